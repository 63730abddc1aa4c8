"""Scoring a GPU as an unseen one (``benchmarks/unseen_gpu.py``): the shipped fit without any row of that GPU, kept
out of the package, and a predictor that reads it; and which end-to-end GEMMs NeuSight's op rows hold
(``benchmarks/neusight_overlap.py``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks import gpu_op_efficiency, neusight_overlap, unseen_gpu
from perfpredict.core import ops
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.graph_report import report_for_graph
from perfpredict.hardware.devices import get_device
from perfpredict.learning import gpu_efficiency_fit
from perfpredict.learning import gpu_training_rows as tr
from perfpredict.predictors import gpu_efficiency as ge
from perfpredict.predictors import gpu_op_features as gf
from perfpredict.predictors.op_efficiency import OpShape

pytest.importorskip("xgboost")

#: synthetic fp32 GEMM rows: each GPU's measured efficiency (its level, as a fit reads it)
EFFICIENCY = {"T4": 0.4, "A100-40GB-PCIe": 0.8, "L4": 0.6}


@pytest.fixture(scope="module")
def rows():
    """(Arrays, Columns) of 40 fp32 GEMMs per GPU at the efficiencies above, as gpu_training_rows makes them."""
    rng = np.random.default_rng(0)
    shapes, frame = [], []
    for name in EFFICIENCY:
        for _ in range(40):
            m, n, k = (int(2 ** rng.uniform(10, 13)) for _ in range(3))
            shapes.append((OpShape("matmul", "float32", 2.0 * m * n * k, 4.0 * (m * k + k * n + m * n), (m, n)), name))
            frame.append({"device": name, "source": "neusight", "source_split": "test", "source_op": "linear"})
    X, y, bounds, units = [], [], [], []
    for op, name in shapes:
        device = gf.datasheet_basis(get_device(name))
        unit = gf.unit_of(op, device, tr.AS_MEASURED)
        X.append(gf.features(op, device, unit))
        y.append(np.log(EFFICIENCY[name]))
        bounds.append(gf.bound_s(op, device, unit)[0])
        units.append(unit)
    classes = [ge.efficiency_class(op, u) for (op, _), u in zip(shapes, units)]
    a = tr.Arrays(
        np.array(X), np.array(y), np.exp(-np.array(y)) * bounds, np.array(bounds),
        [op for op, _ in shapes], units, classes, [name for _, name in shapes],
    )  # fmt: skip
    labelled = pd.DataFrame(frame).assign(kind="matmul", model=None)
    return a, gpu_op_efficiency.Columns(labelled)


@pytest.fixture(scope="module")
def fits(rows):
    """The shipped fit on every row, and the same fit without L4's (30 trees instead of the shipped 700)."""
    a, cols = rows
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gpu_efficiency_fit, "PARAMS", {**ge.PARAMS, "n_estimators": 30, "n_jobs": 1})
        everyone = gpu_op_efficiency.fit_shipped(a, cols, np.arange(len(a.log_eff)))
        return everyone, unseen_gpu.fit_without(a, cols, "L4")


def test_the_refit_never_trains_on_the_held_gpu(fits):
    everyone, without = fits
    assert set(everyone.levels["simt32"]) == set(EFFICIENCY) and "L4" in everyone.dtypes["simt32"]
    assert set(without.levels["simt32"]) == {"T4", "A100-40GB-PCIe"} and "L4" not in without.dtypes["simt32"]
    l4 = get_device("L4")
    assert everyone.level(l4, "simt32") == pytest.approx((np.log(0.6), "L4"))
    level, origin = without.level(l4, "simt32")  # from its covered neighbours, as for any GPU without rows
    assert origin != "L4" and np.log(0.4) <= level <= np.log(0.8)


def test_a_gpu_scored_unseen_reads_the_refitted_model(fits):
    """A large fp32 GEMM on the L4 is device-bound: its time is the bound over the efficiency, so the two answers
    are in the ratio of the two levels (the trees' residual is near zero on rows of one efficiency per GPU)."""
    everyone, without = fits
    x, w, y = (
        TensorMeta((8192, 4096), "float32"),
        TensorMeta((4096, 4096), "float32"),
        TensorMeta((8192, 4096), "float32"),
    )
    flops = 2 * 8192 * 4096 * 4096  # 275 GFLOP: about 9 ms at the L4's 30 TFLOP/s
    node = OpNode("fc", ops.MATMUL, "aten.mm", (x, w), (y,), flops=flops, bytes_read=4 * (2 * 8192 + 4096) * 4096)
    graph = OpGraph((node,), (), batch_size=8192, name="gemm")
    ms = {
        key: report_for_graph(graph, device="L4", predictor=unseen_gpu.predictor_without("L4", m)).latency_ms.value
        for key, m in (("everyone", everyone), ("without", without))
    }
    expected = np.exp(everyone.level(get_device("L4"), "simt32")[0] - without.level(get_device("L4"), "simt32")[0])
    assert ms["without"] / ms["everyone"] == pytest.approx(expected, rel=0.05)
    assert abs(ms["without"] / ms["everyone"] - 1) > 0.05  # the levels differ by more than that


def test_a_cached_refit_is_read_back_and_nothing_is_fitted(fits, tmp_path, monkeypatch):
    _, without = fits
    without.save(tmp_path / "L4", {"kind": "gpu_op_efficiency_without", "without": "L4"})

    def no_fit():
        raise AssertionError("a cached model must not be refitted")

    monkeypatch.setattr(unseen_gpu, "_training_rows", no_fit)
    (read,) = unseen_gpu.models_without(["L4"], cache=tmp_path).values()
    assert read.levels == without.levels
    # the A100-40GB SXM has no op row in the shipped model: it is unseen already, its model the shipped one
    assert "A100-40GB" not in unseen_gpu.shipped_gpus() and "A100-40GB-PCIe" in unseen_gpu.shipped_gpus()
    (sxm,) = unseen_gpu.models_without(["A100-40GB"], cache=tmp_path).values()
    assert sxm.levels == ge.GpuEfficiencyModel.load().levels


def test_gemm_keys_match_a_problem_however_it_is_spelled():
    # NeuSight's nn.Linear(1024, 4096) on [16, 512, 1024] is one GEMM of 16 * 512 = 8192 rows, K 1024, N 4096
    neusight = neusight_overlap.gemm_key("matmul", [16, 512, 4096], [[16, 512, 1024], [4096, 1024]])
    assert neusight == ("linear", 8192, 1024, 4096)
    # GPT-2's Conv1D: addmm(bias [4096], x [8192, 1024], weight [1024, 4096])
    assert neusight_overlap.gemm_key("matmul", (8192, 4096), ((4096,), (8192, 1024))) == neusight
    # attention scores on [B=16, H=16, 512, 64] x [16, 16, 64, 512]: a bmm of batch 256, M 512, K 64, N 512
    scores = neusight_overlap.gemm_key("matmul", (16, 16, 512, 512), ((16, 16, 512, 64), (16, 16, 64, 512)))
    assert scores == neusight_overlap.gemm_key("matmul", [256, 512, 512], [[256, 512, 64], [256, 64, 512]])
    assert scores == ("bmm", 256, 512, 64, 512)
    assert neusight_overlap.gemm_key("elementwise", (8,), ((8,), (8,))) is None


def test_layer_gemms_are_the_repeated_ones():
    def linear(name: str, rows: int, k: int, n: int) -> OpNode:
        ins = (TensorMeta((rows, k), "float32"), TensorMeta((n, k), "float32"))
        return OpNode(name, ops.MATMUL, "aten.mm", ins, (TensorMeta((rows, n), "float32"),), flops=2 * rows * k * n)

    nodes = [linear("q0", 64, 32, 32), linear("q1", 64, 32, 32), linear("head", 64, 32, 10)]
    gemms = neusight_overlap.layer_gemms(OpGraph(tuple(nodes), (), batch_size=64, name="toy"))
    assert gemms == {("linear", 64, 32, 32): 2 * (2 * 64 * 32 * 32)}  # the head runs once: not a layer GEMM
