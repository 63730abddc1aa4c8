"""The GPU lease's op plan: every op rebuilds on meta (the compile-only check of the GPU plan), the order puts every
kind early, the shapes are the ones named, and a planned op becomes an op row with the collector's schema."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from perfpredict.core.units import MIB
from perfpredict.profiling import collect_engine as engine
from perfpredict.profiling import collect_ops, op_plan
from perfpredict.profiling import dataset as ds
from perfpredict.profiling.op_instances import OpInstance

KINDS = {"matmul", "attention", "norm", "softmax", "elementwise", "copy", "embedding", "conv"}


@pytest.fixture(scope="module")
def plan():
    return op_plan.lease_plan()


def test_the_gpu_plan_rebuilds_on_meta_each_op_once(plan):
    keys = [p.op.to_key() for p in plan]
    assert len(keys) == len(set(keys)) and len(plan) > 2000
    for p in plan:
        assert p.op.io_bytes() <= op_plan.MAX_IO_BYTES
        out = OpInstance.from_key(p.op.to_key()).build("meta")()  # shapes agree: the op runs as keyed
        assert isinstance(out, (torch.Tensor, tuple)), p.op.overload
    assert keys == [p.op.to_key() for p in op_plan.lease_plan()]  # deterministic: a later lease extends it


def test_every_kind_comes_early_and_bf16_first(plan):
    first = plan[:300]
    assert {p.op.kind for p in first} >= KINDS
    assert {p.tier for p in first} == {1}
    tier1 = [p for p in plan if p.tier == 1]
    dtypes = Counter(p.op.dtype() for p in tier1 if p.group != "gemm_vidur_fp16")
    assert set(dtypes) <= {"bfloat16", "float32"} and dtypes["bfloat16"] > 0.8 * sum(dtypes.values())
    assert [p.tier for p in plan] == sorted(p.tier for p in plan)
    assert {p.op.dtype() for p in plan if p.tier == 4} >= {"float16"}
    summary = op_plan.plan_summary(plan)
    assert summary["ops"] == len(plan) and sum(summary["by_tier"].values()) == len(plan)


def test_linear_is_mm_with_the_transposed_weight_as_a_model_runs_it():
    (mm,) = op_plan.linear(16, 4096, 11008, "bfloat16")
    assert mm.overload == "aten::mm.default"
    assert mm.tensors() == [
        {"t": [16, 4096], "d": "bfloat16"},
        {"t": [4096, 11008], "d": "bfloat16", "s": [1, 4096]},  # F.linear's weight.t(): a view, strides kept
    ]
    (addmm,) = op_plan.linear(16, 896, 1152, "bfloat16", bias=True)
    assert addmm.overload == "aten::addmm.default"


def test_llm_projection_shapes():
    llama = op_plan.LLMS[0]
    weights = [[t for t in op.tensors() if len(t["t"]) == 2][-1] for op in op_plan.gemm_llm([1], "bfloat16")]
    got = {tuple(w["t"]) for w in weights}  # (in, out): mm(x, w.t()), addmm(bias, x, w.t())
    # q, k, v and o of Llama-2-7B are all 4096 x 4096; gate/up 4096 -> 11008, down 11008 -> 4096
    assert {(4096, 4096), (4096, 11008), (11008, 4096)} <= got
    # Qwen2-0.5B: 14 heads of 64 (896), 2 kv heads (128); Llama-3-8B: 8 kv heads of 128 (1024)
    assert {(896, 896), (896, 128), (4096, 1024)} <= got
    assert llama.intermediate == 11008


def test_vidur_projections_are_the_shapes_of_the_public_h100_rows():
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    vidur = pd.read_parquet(op_plan_path("vidur"))
    h100 = vidur[(vidur.device == "H100-SXM") & (vidur.model == "meta-llama/Llama-2-7b-hf") & (vidur.kind == "matmul")]
    public = {tuple(tuple(s) for s in json.loads(x)) for x in h100.in_shapes}
    ours = [op for op in op_plan.gemm_vidur((1, 128, 4096), (1, 2, 4, 8)) if op.overload == "aten::mm.default"]
    assert len(ours) == 3 * 4 * 4
    for op in ours:
        (t, k), (_, n) = (tuple(x["t"]) for x in op.tensors())
        assert ((t, k), (n, k)) in public, (t, k, n)  # Vidur writes a linear as x [T, K] and W [N, K]
        assert op.dtype() == "float16"


def op_plan_path(source: str):
    from perfpredict.external.op_rows import EXTERNAL_DIR, OPS_FILE

    return EXTERNAL_DIR / source / OPS_FILE


def test_gemm_spread_holds_sizes_off_the_tile_grid():
    ops = list(op_plan.gemm_spread(48, "bfloat16"))
    dims = [d for op in ops for t in op.tensors() for d in t["t"]]
    off = [d for d in dims if d % 64]
    assert len(ops) == 48 and len(off) > len(dims) / 4
    assert any(t.get("s") for op in ops for t in op.tensors())  # half of them with a transposed weight


def test_composites_are_planned_as_the_call_a_model_makes():
    (att,) = op_plan.sdpa((1, 32, 512, 128), (1, 32, 512, 128), "bfloat16", causal=True)
    assert att.kind == "attention" and dict(att.kwargs) == {"is_causal": True}
    (dec,) = op_plan.sdpa((8, 32, 1, 128), (8, 32, 2048, 128), "bfloat16", mask=True)
    assert dec.tensors()[3]["t"] == [8, 1, 1, 2048]  # a static cache's additive mask
    (sm,) = op_plan.softmax((1, 32, 16, 16), "bfloat16", upcast=True)
    assert sm.build("cpu")().dtype == torch.float32
    (emb,) = op_plan.embedding(64, 1000, 32, "bfloat16")
    ids = emb.materialize("cpu", on_device=True)[0][1]
    assert ids.dtype == torch.int64 and int(ids.min()) >= 0 and int(ids.max()) < 1000 and len(set(ids.tolist())) > 10
    hf = op_plan.rms_norm_hf((8, 64), "bfloat16")
    assert [op.name for op in hf] == ["_to_copy", "pow", "mean", "add", "rsqrt", "mul", "_to_copy", "mul"]
    (conv,) = op_plan.conv2d(1, 3, 224, 768, 16, 16, "bfloat16", bias=True)
    assert conv.build("meta")().shape == (1, 768, 14, 14)  # ViT-B/16's patch grid: no padding


def test_a_dry_run_plan_fits_a_cpu_and_runs_there():
    small = op_plan.lease_plan(max_io_bytes=MIB, max_flops=2e7)
    groups = {p.group for p in small}
    assert {"gemm_llm", "elementwise", "norm", "conv"} <= groups
    for p in small[:: max(1, len(small) // 40)]:
        out = p.op.build("cpu", on_device=True)()
        assert out is not None, p.op.overload


def test_a_planned_op_becomes_an_op_row(tmp_path):
    small = op_plan.lease_plan(max_io_bytes=2**18, max_flops=1e6)[:3]
    cfg = engine.CollectConfig(out=tmp_path, device="cpu", progress=False, compact=False, device_label="cpu-test")
    summary = collect_ops.collect_ops(cfg, plan=((p.op, p.source, False) for p in small), build_on_device=True)
    rows = ds.load_dataset(tmp_path / "ops").rows
    assert summary.measured == 3 and len(rows) == 3
    for p, r in zip(small, sorted(rows, key=lambda r: [q.op.to_key() for q in small].index(r["key"]))):
        assert r["source_key"] == f"lease_plan/1/{p.group}" and r["variant"] is False
        assert r["kind"] == p.op.kind and r["dtype"] == p.op.dtype() and r["device_ms"] > 0
        assert r["in_bytes"] == p.op.io_bytes() and r["out_bytes"] > 0 and r["flops"] is not None
    again = collect_ops.collect_ops(cfg, plan=((p.op, p.source, False) for p in small))
    assert again.measured == 0 and again.skipped_existing == 3  # a rerun extends, never redoes


def test_planned_op_rows_train_the_gpu_device_time_model_unchanged(plan, tmp_path, monkeypatch):
    """The rows a lease files under data/v3/<gpu>/ops/ go into the device-time model's training arrays as they are.
    The device_ms here is a fixture (0.05 ms for every row), not a measurement: the test checks the interface."""
    import numpy as np

    from perfpredict.learning import gpu_training_rows as gtr

    by_group: dict[str, list] = {}
    for p in plan:
        by_group.setdefault(p.group, []).append(p)
    sample = [p for ps in by_group.values() for p in ps[:2]]
    folder = tmp_path / "v3" / "nvidia-h100-80gb-hbm3" / "ops"
    folder.mkdir(parents=True)
    with open(folder / "rows.jsonl", "w") as f:
        for p in sample:
            out = p.op.build("meta")()
            first = out[0] if isinstance(out, (list, tuple)) else out
            row = {
                **{"schema_version": 2, "protocol_version": 3, "row_kind": "op", "status": "ok", "device_ms": 0.05},
                **{"key": p.op.to_key(), "op": p.op.overload, "kind": p.op.kind, "dtype": p.op.dtype()},
                **{"device": "nvidia-h100-80gb-hbm3", "device_type": "cuda", "device_method": "cuda_graph"},
                **{"env_device_name": "NVIDIA H100 80GB HBM3", "source_key": p.source, "variant": False},
                **{"in_bytes": p.op.io_bytes(), "out_bytes": first.numel() * first.element_size()},
                "flops": op_plan._meta_flops(p.op),
            }
            f.write(json.dumps(row) + "\n")
    monkeypatch.setattr(gtr, "DATA_DIR", tmp_path)
    own = gtr.own_rows()
    assert len(own) == len(sample) and set(own["device"]) == {"H100-SXM"}
    arrays = gtr.arrays(gtr.load_frame(sources=(), own=True))
    assert arrays.X.shape[0] == len(sample) and np.isfinite(arrays.X).all() and (arrays.bound_s > 0).all()
    assert {"tensor", "memory"} <= set(arrays.classes)
