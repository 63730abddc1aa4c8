"""The protocol-v3 model collector on the CPU: rows from rounds, resume from stored rounds, v2 rows still load."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from perfpredict.profiling import collect_engine as engine
from perfpredict.profiling import collect_v3
from perfpredict.profiling import dataset as ds
from perfpredict.profiling.rounds import RoundPolicy

REPO = Path(__file__).resolve().parents[2]


def _cfg(out: Path, **kw) -> engine.CollectConfig:
    base = dict(
        out=out,
        families=["mlp"],
        archs_per_family=1,
        batches=(1, 2),
        phases=("inference", "training"),
        dtypes=("float32",),
        warmup_min=1,
        warmup_max_s=0.05,
        min_seconds=0.03,
        floor_runs=3,
        graph_features="none",
        progress=False,
        compact=False,
        device_label="cpu-test",
    )
    base.update(kw)
    return engine.CollectConfig(**base)


def test_v3_rows_are_medians_of_interleaved_rounds_with_raw_samples_kept(tmp_path):
    policy = RoundPolicy(min_rounds=3, max_rounds=4, max_spread=0.03)
    summary = collect_v3.collect_rounds(_cfg(tmp_path), policy, block=4)
    rows = ds.load_dataset(tmp_path).rows
    assert summary.measured == len(rows) == 4  # 1 arch x 2 batches x 2 phases
    recs = collect_v3.load_rounds(tmp_path, "cpu-test")
    for r in rows:
        assert r["status"] == "ok", r.get("error")
        assert r["protocol_version"] == 3 and 3 <= r["rounds"] <= 4
        mine = recs[r["key"]]
        assert [x["round"] for x in mine] == list(range(r["rounds"]))
        assert r["device_ms_rounds"] == [x["device_ms"] for x in mine]
        assert r["device_ms"] == statistics.median(r["device_ms_rounds"])
        lo, hi = min(r["device_ms_rounds"]), max(r["device_ms_rounds"])
        assert r["device_ms_round_spread"] == pytest.approx((hi - lo) / r["device_ms"])
        assert r["rounds"] == 3 or r["device_ms_round_spread"] > 0.03 or r["remeasured"]
        assert r["device_method"] == "wall" and r["device_ms"] == r["eager_ms"] == r["latency_ms"]
        assert r["eager_sync_ms"] > 0 and r["host_dispatch_ms"] is None  # no separate host on a CPU
        assert r["aten_op_count"] > 0 and r["param_count"] > 0 and r["peak_memory_bytes"] is not None
        assert r["env_sentinel_matmul_ms"] > 0  # the host sentinel, read beside every round
        assert all(len(x["eager_samples_ms"]) == 3 and x["samples_ms"] for x in mine)  # raw samples kept
    assert (tmp_path / "host_device.json").exists()  # the CPU that measured them (profiling/host_record.py)
    # interleaved: every row's round 0 comes before any row's round 1 (one block)
    first = [x["at"] for rs in recs.values() for x in rs if x["round"] == 0]
    second = [x["at"] for rs in recs.values() for x in rs if x["round"] == 1]
    assert max(first) <= min(second)


def test_v3_collector_resumes_from_the_rounds_it_stored(tmp_path):
    policy = RoundPolicy(min_rounds=3, max_rounds=3)
    cfg = _cfg(tmp_path, budget_minutes=1e-9)  # stops before the first round
    collect_v3.collect_rounds(cfg, policy, block=4)
    assert ds.load_dataset(tmp_path).kept == 0
    # a killed run left rounds 0 and 1 of every key (written here by a run that measured only two rounds)
    collect_v3.collect_rounds(_cfg(tmp_path), RoundPolicy(min_rounds=2, max_rounds=2), block=4)
    rows_two = {r["key"]: r for r in ds.load_dataset(tmp_path).rows}
    assert all(r["rounds"] == 2 for r in rows_two.values())
    (tmp_path / ds.ROWS_JSONL).write_text("")  # forget the rows, keep the rounds: as if it died before finishing
    collect_v3.collect_rounds(_cfg(tmp_path), policy, block=4)
    rows = ds.load_dataset(tmp_path).rows
    recs = collect_v3.load_rounds(tmp_path, "cpu-test")
    assert len(rows) == 4 and all(r["rounds"] == 3 for r in rows)
    for r in rows:  # the two stored rounds were reused; only round 2 is new
        assert [x["round"] for x in recs[r["key"]]] == [0, 1, 2]
        assert r["device_ms_rounds"][:2] == rows_two[r["key"]]["device_ms_rounds"]


def test_v3_failed_rounds_end_the_row_as_data(tmp_path, monkeypatch):
    from perfpredict.profiling import zoo

    real = zoo.make_step

    def failing(model, x, labels, phase, **kw):
        if phase == "training":

            def step():
                raise RuntimeError("DefaultCPUAllocator: can't allocate memory")

            return step
        return real(model, x, labels, phase, **kw)

    monkeypatch.setattr(zoo, "make_step", failing)
    collect_v3.collect_rounds(_cfg(tmp_path, batches=(1, 2, 4)), RoundPolicy(), block=6)
    rows = ds.load_dataset(tmp_path).rows
    train = [r for r in rows if r["phase"] == "training"]
    assert [r["status"] for r in train] == ["oom"] and train[0]["rounds"] == 1  # larger batches skipped
    assert all(r["status"] == "ok" for r in rows if r["phase"] == "inference")


def test_protocol_v2_rows_still_load_and_are_labelled_v2(tmp_path):
    committed = ds.load_dataset(REPO / "data" / "cpu-amd-epyc-2c")
    assert committed.kept > 1000 and committed.lost == 0
    assert {r["protocol_version"] for r in committed.rows} == {2}
    old = {"schema_version": 1, "key": '{"x":1}', "device": "cpu-x", "status": "ok", "latency_ms": 3.0}
    (tmp_path / ds.ROWS_JSONL).write_text(json.dumps(old) + "\n")
    (row,) = ds.load_dataset(tmp_path).rows
    assert row["protocol_version"] == ds.LEGACY_PROTOCOL_VERSION == 2 and row["latency_ms"] == 3.0
