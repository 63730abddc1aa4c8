"""Op instances: recorded from zoo models on meta, keyed, rebuilt exactly; the op collector's rows and resume."""

from __future__ import annotations

import random
import statistics
import subprocess
import sys

import pytest
import torch
from killed_collector import kill_after_rows

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.units import GIB
from perfpredict.profiling import collect_engine as engine
from perfpredict.profiling import collect_ops, zoo
from perfpredict.profiling import dataset as ds
from perfpredict.profiling.op_instances import OpInstance, record_ops, spec_ops, validate, variants


def test_recording_on_meta_sees_every_kernel_op_and_no_views():
    x = torch.empty(4, 8, device="meta")
    w = torch.empty(16, 8, device="meta")
    found = record_ops(lambda: torch.relu(torch.nn.functional.linear(x, w)).view(-1).sum())
    names = [op.overload for op in found]
    # linear decomposes to t (a view, skipped) + mm; then relu and sum; the view is not recorded
    assert names == ["aten::mm.default", "aten::relu.default", "aten::sum.default"]
    mm = found[0]
    assert mm.kind == "matmul" and mm.dtype() == "float32"
    assert mm.tensors()[1] == {"t": [8, 16], "d": "float32", "s": [1, 8]}  # w.t(): strides kept
    assert mm.io_bytes() == (4 * 8 + 8 * 16) * 4


def test_a_key_rebuilds_the_exact_op():
    x = torch.empty(2, 3, 5, device="meta").transpose(1, 2)
    (op,) = record_ops(lambda: x.softmax(-1))
    key = op.to_key()
    again = OpInstance.from_key(key)
    assert again == op and again.to_key() == key
    assert again.build("cpu")().shape == (2, 5, 3)
    args, _ = again.materialize("cpu")
    assert args[0].shape == x.shape and args[0].stride() == x.stride()  # non-contiguous input, strides and all
    with pytest.raises(InvalidInputError, match="not an op instance key"):
        OpInstance.from_key("{nope")


@pytest.mark.parametrize("family", ["bert", "gpt2", "resnet", "mobilenet_v2"])
@pytest.mark.parametrize("phase", ["inference", "training"])
def test_zoo_ops_rebuild_and_run_on_cpu(family, phase):
    ops = spec_ops(zoo.smallest_spec(family, phase))
    distinct = {op.to_key(): op for op in ops}
    assert len(distinct) >= 10
    for key, op in distinct.items():
        out = OpInstance.from_key(key).build("cpu")()
        meta = op.build("meta")()
        if isinstance(out, torch.Tensor):
            assert out.shape == meta.shape, op.overload


def test_variants_scale_one_dimension_and_stay_valid():
    a, b = torch.empty(64, 96, device="meta"), torch.empty(96, 128, device="meta")
    (mm,) = record_ops(lambda: a @ b)
    out = variants(mm, random.Random(0), n=6, max_bytes=GIB)
    assert len(out) == 6 and len({v.to_key() for v in out}) == 6
    for v in out:
        (m, k1), (k2, n) = (t["t"] for t in v.tensors())
        assert k1 == k2 and validate(v)  # the shared K moved together
        assert sum(x != y for x, y in zip((m, k1, n), (64, 96, 128))) >= 1
    assert variants(mm, random.Random(0), n=3, max_bytes=1) == []  # nothing over the size cap


def _cfg(out, **kw):
    base = dict(
        out=out,
        families=["mlp"],
        archs_per_family=1,
        batches=(1,),
        phases=("inference",),
        dtypes=("float32",),
        progress=False,
        compact=False,
        device_label="cpu-test",
        round_block=4,
    )
    base.update(kw)
    return engine.CollectConfig(**base)


def test_op_rows_carry_labels_rounds_and_rebuild(tmp_path):
    summary = collect_ops.collect_ops(_cfg(tmp_path), variants=1)
    rows = ds.load_dataset(tmp_path / "ops").rows
    assert summary.measured == len(rows) >= 4
    planned = [op.to_key() for op, _, _ in collect_ops.op_plan(_cfg(tmp_path), 1)]
    assert sorted(r["key"] for r in rows) == sorted(planned)
    rounds = ds.read_jsonl(tmp_path / "ops" / collect_ops.ROUNDS_JSONL, required=("key",))[0]
    for r in rows:
        assert r["status"] == "ok" and r["protocol_version"] == 3 and r["row_kind"] == "op"
        assert r["rounds"] >= 3 and r["device_ms"] > 0 and r["device_method"] == "wall"
        mine = [x for x in rounds if x["key"] == r["key"]]
        assert len(mine) == r["rounds"] and all(len(x["device_samples_ms"]) == 3 for x in mine)  # raw samples kept
        assert r["device_ms"] == statistics.median(r["device_ms_rounds"])
        op = OpInstance.from_key(r["key"])
        assert op.overload == r["op"] and op.kind == r["kind"]
        assert r["in_bytes"] == op.io_bytes() and r["out_bytes"] > 0
    assert any(r["variant"] for r in rows) and any(not r["variant"] for r in rows)


def test_op_collector_resumes_after_sigkill_without_loss_or_duplicates(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "perfpredict",
        "collect",
        "--ops",
        "--out",
        str(out),
        "--families",
        "mlp",
        "--archs-per-family",
        "1",
        "--batches",
        "1",
        "--phases",
        "inference,training",
        "--dtypes",
        "float32",
        "--ops-variants",
        "1",
        "--round-block",
        "6",
        "--min-rounds",  # two rounds a row: the resume is under test, not the labels
        "2",
        "--max-rounds",
        "2",
        "--no-progress",
        "--no-compact",
        "--profile",
        "tiny",
    ]
    env = kill_after_rows(cmd, out / "ops" / ds.ROWS_JSONL, 6, poll_s=0.01)
    killed = ds.load_dataset(out / "ops").rows
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = ds.load_dataset(out / "ops")
    keys = [r["key"] for r in result.rows]
    cfg = _cfg(out, batches=(1,), phases=("inference", "training"), profile="tiny")
    planned = [op.to_key() for op, _, _ in collect_ops.op_plan(cfg, 1)]
    assert len(planned) > len(killed) >= 6
    assert len(keys) == len(set(keys)) and sorted(keys) == sorted(planned), "an op row was lost or duplicated"
    assert result.lost == 0 and result.duplicates == 0
    assert all(r["status"] == "ok" for r in result.rows), [r.get("error") for r in result.rows]
