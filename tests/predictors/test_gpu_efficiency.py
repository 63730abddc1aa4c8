"""The GPU device-time model: bounded by the roofline, one basis for every GPU, levels that fall back to the
nearest GPUs with rows, and leave-one-GPU-out folds that never train on the held-out GPU."""

from __future__ import annotations

import numpy as np
import pytest

from perfpredict.hardware.devices import get_device
from perfpredict.learning import gpu_training_rows as tr
from perfpredict.learning.gpu_efficiency_fit import GpuEfficiencyLearner
from perfpredict.learning.gpu_training_rows import AS_MEASURED
from perfpredict.predictors import gpu_efficiency as ge
from perfpredict.predictors import gpu_op_features as gf
from perfpredict.predictors.op_efficiency import OpShape

pytest.importorskip("xgboost")


def _gemm(m: int, n: int, k: int, dtype: str = "float32") -> OpShape:
    width = 4 if dtype == "float32" else 2
    return OpShape("matmul", dtype, 2.0 * m * n * k, float(width * (m * k + k * n + m * n)), (m, n), ((m, k), (n, k)))


def _add(numel: int, dtype: str = "float32") -> OpShape:
    width = 4 if dtype == "float32" else 2
    return OpShape("elementwise", dtype, float(numel), float(3 * width * numel), (numel,), ((numel,), (numel,)))


@pytest.fixture(scope="module")
def toy_model():
    """Trees fitted on synthetic rows: fp32 GEMMs on T4 at efficiency 0.4 and on A100-40GB-PCIe at 0.8, fp16
    GEMMs on A40 at 0.6, and memory-bound adds on both fp32 GPUs at 0.85."""
    rows = []
    rng = np.random.default_rng(0)
    for name, cls_eff in (("T4", {"simt32": 0.4}), ("A100-40GB-PCIe", {"simt32": 0.8}), ("A40", {"tensor": 0.6})):
        device = gf.datasheet_basis(get_device(name))
        for _ in range(60):
            m, n, k = (int(2 ** rng.uniform(9, 13)) for _ in range(3))
            op = _gemm(m, n, k, "float32" if "simt32" in cls_eff else "float16")
            unit = gf.unit_of(op, device, AS_MEASURED)
            rows.append((op, device, unit, next(iter(cls_eff.values()))))
            if "simt32" in cls_eff:
                add = _add(int(2 ** rng.uniform(22, 26)))
                rows.append((add, device, gf.unit_of(add, device, AS_MEASURED), 0.85))
    X = np.array([gf.features(op, d, u) for op, d, u, _ in rows])
    y = np.log([e for *_, e in rows])
    bounds = np.array([gf.bound_s(op, d, u)[0] for op, d, u, _ in rows])
    classes = [ge.efficiency_class(op, u) for op, _, u, _ in rows]
    learner = GpuEfficiencyLearner(params={**ge.PARAMS, "n_estimators": 30, "n_jobs": 1})
    assert learner.fit(X, y, classes, [d.name for _, d, _, _ in rows], bounds) is learner
    model = learner.model
    model.dtypes = {"simt32": {"T4": ["float32"], "A100-40GB-PCIe": ["float32"]}, "tensor": {"A40": ["float16"]}}
    return model


def test_levels_are_read_from_each_gpus_own_rows(toy_model):
    assert np.exp(toy_model.levels["simt32"]["T4"]) == pytest.approx(0.4)
    assert np.exp(toy_model.levels["tensor"]["A40"]) == pytest.approx(0.6)
    assert "memory" not in toy_model.levels  # memory-bound ops are read by the trees alone


def test_a_gpu_without_rows_takes_its_neighbours_level(toy_model):
    # L4 (72 W, Ada) has no rows here: its fp32 level comes from T4 (70 W) first, by board power
    level, origin = toy_model.level(get_device("L4"), "simt32")
    assert origin.split("+")[0] == "T4" and np.exp(level) < 0.8
    # bf16 GEMMs on an L4: no tensor rows but A40's
    assert toy_model.level(get_device("L4"), "tensor")[1] == "A40"
    lines = toy_model.sources(get_device("L4"), {"tensor", "simt32"})
    assert any("no L4 rows; level from A40" in line for line in lines)


def test_tf32_reads_the_tensor_core_level_and_says_so(toy_model):
    assert toy_model.level(get_device("A40"), "tf32") == toy_model.level(get_device("A40"), "tensor")
    (line,) = toy_model.sources(get_device("A40"), {"tf32"})
    assert "no TF32 GEMMs (tensor cores) rows on any GPU yet" in line and "A40's own float16 op rows" in line


def test_a_mig_slice_keeps_its_parents_level(toy_model):
    sliced = get_device("A100-40GB-PCIe/1g.5gb")
    assert toy_model.level(sliced, "simt32") == (toy_model.levels["simt32"]["A100-40GB-PCIe"], "A100-40GB-PCIe")


def test_time_is_never_under_the_roofline_bound(toy_model):
    ops_ = [_gemm(4096, 4096, 4096), _gemm(64, 64, 8192), _add(2**27), _add(2**16)]
    for name in ("T4", "A100-40GB-PCIe", "H100-SXM", "L4", "B200"):
        device = gf.datasheet_basis(get_device(name))
        units = [gf.unit_of(op, device, AS_MEASURED) for op in ops_]
        seconds = toy_model.device_s(ops_, device, units)
        bounds = np.array([gf.bound_s(op, device, u)[0] for op, u in zip(ops_, units)])
        caps = np.array([ge.max_efficiency(op, device) for op in ops_])  # only what fits in L2 may beat HBM
        assert np.all(seconds >= bounds / caps * (1 - 1e-9))
        assert caps[-1] == ge.L2_SPEEDUP and caps[2] == 1.0


def test_a_full_memo_starts_again_without_losing_the_ops_it_had_found(toy_model, monkeypatch):
    # A long process (the H100 accuracy benchmark, a NAS search, the web server) fills the memo: it was cleared
    # after the lookup had counted the ops it held as found, and the next ask raised KeyError on them.
    device = gf.datasheet_basis(get_device("T4"))
    first, second = [_gemm(1024, 1024, 1024), _add(2**20)], [_gemm(2048, 512, 256), _add(2**22)]
    units = [gf.unit_of(op, device, AS_MEASURED) for op in first + second]
    expected = toy_model.efficiency(first + second, device, units)
    toy_model._memo.clear()
    monkeypatch.setattr(ge, "MEMO_OPS", 1)
    toy_model.efficiency(first, device, units[:2])
    np.testing.assert_array_equal(toy_model.efficiency(first + second, device, units), expected)


def test_every_gpu_is_on_the_datasheet_basis(shipped_ceilings):
    measured = get_device("H100-SXM")
    assert measured.measured  # the shipped roofline run
    basis = gf.datasheet_basis(measured)
    assert basis.memory_bandwidth_bytes_per_s == 3.35e12 and basis.peak_flops_per_s["fp32"] == 66.9e12
    assert gf.datasheet_basis(get_device("H200")) is get_device("H200")


def test_leave_one_out_never_trains_on_the_held_out_key():
    keys = np.array(["T4", "L4", "T4", "A40", "L4"])
    folds = list(tr.leave_one_out(keys))
    assert [h for h, _, _ in folds] == ["A40", "L4", "T4"]
    for held, train, test in folds:
        assert set(keys[test]) == {held} and held not in set(keys[train])
        assert sorted([*train, *test]) == list(range(len(keys)))


def test_neusight_timing_floor_and_overhead_are_recovered():
    import pandas as pd

    device = get_device("T4")
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(1000):  # kernel = bytes / (0.8 x bandwidth); measured = max(30 us, kernel + 15 us)
        nbytes = float(2 ** rng.uniform(10, 28))
        kernel_ms = nbytes / (0.8 * device.memory_bandwidth_bytes_per_s) * 1e3
        rows.append(
            {
                "device": "T4",
                "kind": "elementwise",
                "flops": 0.0,
                "bytes": nbytes,
                "device_ms": max(0.030, kernel_ms + 0.015) * rng.uniform(0.99, 1.01),
            }
        )
    timing = tr.neusight_timing(pd.DataFrame(rows))["T4"]
    assert timing.floor_ms == pytest.approx(0.030, rel=0.03)
    assert timing.overhead_ms == pytest.approx(0.015, rel=0.15)


def _timed_calls(device, rng, kind: str, host_extra_s: float, n: int = 400) -> list[dict]:
    """NeuSight-like rows of ``kind`` on ``device``: kernel = bound / 0.8; measured = max(the floor, kernel + 15 us)
    with ``host_extra_s`` more host time per call (what cuDNN or cuBLAS adds to an elementwise launch)."""
    rows = []
    for _ in range(n):
        nbytes = float(2 ** rng.uniform(10, 28))
        kernel_s = nbytes / (0.8 * device.memory_bandwidth_bytes_per_s)
        measured_s = max(30e-6, kernel_s + 15e-6) + host_extra_s
        rows.append(
            {
                "device": device.name,
                "kind": kind,
                "flops": 0.0,
                "bytes": nbytes,
                "device_ms": measured_s * 1e3 * rng.uniform(0.99, 1.01),
                "kernel_ms": kernel_s * 1e3,
            }
        )
    return rows


def test_a_kinds_own_host_time_is_taken_off_its_rows():
    # a convolution's call costs 100 us more on the host than an elementwise one: its floor stands 100 us higher,
    # and its rows' labels lose that too (else a small convolution reads 100 us of host time as kernel time)
    import pandas as pd

    device = get_device("T4")
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(_timed_calls(device, rng, "elementwise", 0.0) + _timed_calls(device, rng, "conv", 100e-6))
    timing = tr.neusight_timing(frame)["T4"]
    assert timing.kind_extra_ms["conv"] == pytest.approx(0.100, rel=0.05)
    floor, overhead = timing.host_ms("conv")
    assert floor == pytest.approx(0.130, rel=0.05) and overhead == pytest.approx(0.115, rel=0.15)
    conv = frame[(frame["kind"] == "conv") & (frame["kernel_ms"] > 0.2)]
    labels = [
        tr._less_overhead(ms, k, *timing.host_ms("conv")) * 1e3
        for ms, k in zip(conv["device_ms"], conv["kernel_ms"] * 0.8)
    ]
    assert np.median(np.abs(np.array(labels) / conv["kernel_ms"].to_numpy() - 1)) < 0.1


def test_rows_are_kept_by_their_bound_never_by_their_measured_time():
    # two rows of one op, one timed slowly: both are kept or both left out (keeping only the slow one of the small
    # ops would teach the trees that small ops are slow)
    fast, slow = tr._less_overhead(0.040, 0.002, 0.030, 0.015), tr._less_overhead(0.090, 0.002, 0.030, 0.015)
    assert np.isnan(fast) and np.isnan(slow)  # a 2 us op is under half the 30 us floor: it says nothing
    assert tr._less_overhead(0.060, 0.020, 0.030, 0.015) == pytest.approx(0.045e-3)


@pytest.fixture(scope="module")
def gpt2_fp32():
    from perfpredict.api import featurize
    from perfpredict.compiler_hooks.hf_frontend import model_from_hf

    model, inputs, _ = model_from_hf("gpt2", 16, 256, dtype="float32")
    return featurize(model, inputs)


def test_every_catalog_gpu_uses_the_shipped_model_and_names_its_data(gpt2_fp32):
    from perfpredict.hardware.devices import list_devices
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.two_timeline import TwoTimelinePredictor

    predictor = TwoTimelinePredictor()
    assert ge.GpuEfficiencyModel.load() is not None
    for device in (d for d in list_devices() if d.kind == "gpu"):
        t = predictor.predict(gpt2_fp32, device, RunConfig()).timeline
        assert t.device_model.startswith("learned per-op efficiency on the datasheet"), device.name
        assert "fp32 GEMMs (CUDA cores)" in t.device_model and "memory-bound ops" in t.device_model
    l4 = predictor.predict(gpt2_fp32, get_device("L4"), RunConfig()).timeline.device_model
    assert "learned from L4's own float32 op rows" in l4  # NeuSight's L4 rows


def test_one_basis_more_bandwidth_is_never_slower(gpt2_fp32, shipped_ceilings):
    """The H100's shipped roofline run must not make it beat an H200 (same SMs and clocks, more bandwidth) or a
    B200: every GPU is read on its datasheet."""
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.two_timeline import TwoTimelinePredictor

    predictor = TwoTimelinePredictor()
    device_ms = {
        name: predictor.predict(gpt2_fp32, get_device(name), RunConfig()).timeline.device_ms
        for name in ("H100-SXM", "H200", "B200")
    }
    assert device_ms["H200"] <= device_ms["H100-SXM"] * 1.001 and device_ms["B200"] < device_ms["H100-SXM"], device_ms
