"""Sharded collection: shards of the plan, part folders merged on load, and Ray workers that survive a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from perfpredict.core.errors import InvalidInputError, MissingDependencyError, PerfPredictError
from perfpredict.profiling import collect_engine as engine
from perfpredict.profiling import collect_v2, collect_v3, parts, shard_run, shards
from perfpredict.profiling import dataset as ds


def _cfg(out: Path, **kw) -> engine.CollectConfig:
    # 2 archs x 2 batches x 2 phases = 8 rows in 4 batch sweeps; a row times for about 0.2 s
    base = dict(
        out=out,
        families=["mlp"],
        archs_per_family=2,
        batches=(1, 2),
        phases=("inference", "training"),
        dtypes=("float32",),
        warmup_min=1,
        warmup_max_s=0.05,
        min_runs=10_000,
        min_seconds=0.2,
        floor_runs=3,
        graph_features="none",
        progress=False,
        compact=False,
        device_label="cpu-test",
        protocol_version=2,
    )
    base.update(kw)
    return engine.CollectConfig(**base)


def _raw_keys(out: Path) -> list[str]:
    """Every row key in every file of the folder, duplicates included (load_dataset would hide them)."""
    logs = [out / ds.ROWS_JSONL, *(f / ds.ROWS_JSONL for f in parts.part_folders(out))]
    keys = [r["key"] for log in logs for r in ds.read_jsonl(log)[0]]
    return keys + [r["key"] for r in ds.read_parquet(out / ds.ROWS_PARQUET)[0]]


def _part(out: Path, index: int, count: int) -> Path:
    return out / parts.PARTS_DIR / parts.part_name(index, count)


# -- shards, without Ray ------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [1, 2, 3, 8])
def test_shards_are_disjoint_cover_the_plan_and_keep_batch_sweeps_whole(tmp_path, count):
    full = engine.CollectConfig(out=tmp_path, archs_per_family=3).plan()  # every family: 1848 specs, 264 sweeps
    got = [
        engine.CollectConfig(out=tmp_path, archs_per_family=3, shard_index=i, shard_count=count).plan()
        for i in range(count)
    ]
    keys = [s.to_key() for shard in got for s in shard]
    assert len(keys) == len(set(keys)) == len(full), "shards overlap or lose specs"
    assert set(keys) == {s.to_key() for s in full}
    owner = {s.group_key(): i for i, shard in enumerate(got) for s in shard}
    assert all(owner[s.group_key()] == i for i, shard in enumerate(got) for s in shard)  # sweeps stay whole
    sweeps = [len({s.group_key() for s in shard}) for shard in got]
    assert max(sweeps) - min(sweeps) <= 1  # dealt round-robin
    order = {s.to_key(): n for n, s in enumerate(full)}
    assert all([order[s.to_key()] for s in shard] == sorted(order[s.to_key()] for s in shard) for shard in got)
    # the assignment depends on the plan's set of sweeps, not on the order a worker sees them in
    assert shards.select(full[::-1], 0, count)[::-1] == got[0]


def test_shard_option_parses_and_rejects_bad_values(tmp_path):
    assert shards.parse_shard("3/8") == (3, 8) and shards.parse_shard(" 0 / 1 ") == (0, 1)
    for bad in ("8/8", "1/0", "-1/2", "3", "a/b", ""):
        with pytest.raises(InvalidInputError, match="I/N|0 <= I < N"):
            shards.parse_shard(bad)
    with pytest.raises(InvalidInputError, match="0 <= I < N"):
        _cfg(tmp_path, shard_index=2, shard_count=2)
    assert _cfg(tmp_path).write_dir() == tmp_path
    assert _cfg(tmp_path, shard_index=1, shard_count=4).write_dir() == tmp_path / "parts" / "shard-1-of-4"


def test_shards_run_one_after_another_merge_into_one_dataset(tmp_path):
    # the SLURM path: `perfpredict collect --shard I/2` per task, no Ray
    for i in (0, 1):
        summary = shard_run.run_shard(_cfg(tmp_path, min_seconds=0.01, shard_index=i, shard_count=2))
        assert summary.measured == 4 and summary.rows_total == 4 * (i + 1)
    plan = {s.to_key() for s in _cfg(tmp_path).plan()}
    for i in (0, 1):
        mine = {r["key"] for r in ds.read_jsonl(_part(tmp_path, i, 2) / ds.ROWS_JSONL)[0]}
        assert mine == {s.to_key() for s in _cfg(tmp_path, shard_index=i, shard_count=2).plan()}
    assert sorted(_raw_keys(tmp_path)) == sorted(plan)
    # resume reads every part: a shard, another sharding, and an unsharded run all find nothing left
    assert shard_run.run_shard(_cfg(tmp_path, shard_index=0, shard_count=2)).measured == 0
    assert shard_run.run_shard(_cfg(tmp_path, shard_index=2, shard_count=3)).measured == 0
    assert collect_v2.collect(_cfg(tmp_path)).measured == 0
    pytest.importorskip("pyarrow")
    assert ds.compact(tmp_path) == 8
    assert all((f / ds.ROWS_JSONL).read_bytes() == b"" for f in parts.part_folders(tmp_path))
    assert sorted(_raw_keys(tmp_path)) == sorted(plan)


def _fake_rows(folder: Path, keys: list[str]) -> None:
    with ds.JsonlAppender(folder / ds.ROWS_JSONL) as f:
        for k in keys:
            f.append({"schema_version": ds.DATASET_SCHEMA_VERSION, "key": k, "device": "cpu-test", "status": "ok"})


def test_compaction_leaves_a_live_part_alone(tmp_path):
    pytest.importorskip("pyarrow")
    live, idle = _part(tmp_path, 0, 2), _part(tmp_path, 1, 2)
    _fake_rows(live, ["a", "b"])
    _fake_rows(idle, ["c"])
    with parts.writer(live):
        assert parts.writer_pid(live) == os.getpid()
        assert ds.compact(tmp_path) == 1  # the idle part only: the live one may be appending right now
        assert (live / ds.ROWS_JSONL).read_bytes().count(b"\n") == 2
        assert (idle / ds.ROWS_JSONL).read_bytes() == b""
        loaded = ds.load_dataset(tmp_path)
        assert sorted(r["key"] for r in loaded.rows) == ["a", "b", "c"] and loaded.duplicates == 0
    assert ds.compact(tmp_path) == 3
    assert sorted(_raw_keys(tmp_path)) == ["a", "b", "c"]


def test_max_rows_is_shared_between_shards(tmp_path):
    _fake_rows(tmp_path, ["a", "b", "c", "d"])
    assert shard_run.shard_max_rows(_cfg(tmp_path, max_rows=11, shard_index=1, shard_count=2), "cpu-test") == 4 + 4
    assert shard_run.shard_max_rows(_cfg(tmp_path, max_rows=3, shard_index=1, shard_count=2), "cpu-test") == 4
    assert shard_run.shard_max_rows(_cfg(tmp_path, max_rows=3), "cpu-test") == 3  # unsharded: the folder's total


def test_without_ray_the_cluster_run_says_what_to_install(tmp_path, monkeypatch):
    from perfpredict.profiling import cluster

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(MissingDependencyError) as err:
        cluster.run_cluster(_cfg(tmp_path), workers=2)
    assert 'pip install "perfpredict[cluster]"' in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InvalidInputError, match="drop --shard"):
        cluster.run_cluster(_cfg(tmp_path, shard_index=0, shard_count=2))


# -- Ray ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def target():
        try:
            out["result"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


#: how long a step may take before the test calls it hung: a guard against a hang, not a speed test (a busy 2-core
#: host takes minutes to start Ray and import torch in two workers)
HANG_S = 900


def _kill_writer_when(folder: Path, log: str, lines: int, run: threading.Thread) -> tuple[int, list[dict]]:
    """SIGKILL the worker writing ``folder`` once its ``log`` holds ``lines`` lines; (its pid, the log's records).
    Fails if the run ends first or hangs."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline and run.is_alive():
        if (folder / log).exists() and (folder / log).read_bytes().count(b"\n") >= lines:
            pid = parts.writer_pid(folder)
            assert pid is not None and pid != os.getpid()
            os.kill(pid, signal.SIGKILL)
            return pid, ds.read_jsonl(folder / log, required=("key",))[0]
        time.sleep(0.02)
    raise AssertionError(f"{folder / log} never reached {lines} lines while the run lasted")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:2 CPU workers share")
def test_ray_worker_killed_mid_run_is_restarted_and_loses_or_duplicates_nothing(tmp_path, ray_local):
    from perfpredict.profiling import cluster

    cfg = _cfg(tmp_path)
    thread, out = _in_thread(cluster.run_cluster, cfg, workers=2)
    part0 = _part(tmp_path, 0, 2)
    pid, written = _kill_writer_when(part0, ds.ROWS_JSONL, 1, thread)
    thread.join(HANG_S)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    assert 1 <= len(written) < 4, "the worker was not killed mid-shard"
    assert parts.writer_pid(part0) != pid  # Ray restarted the actor, which finished the shard
    plan = [s.to_key() for s in cfg.plan()]
    raw = _raw_keys(tmp_path)
    assert sorted(raw) == sorted(plan), "a row was lost or written twice"
    rows = {r["key"]: r for r in ds.load_dataset(tmp_path).rows}
    for r in written:  # every row written before the kill is still there, unchanged
        assert rows[r["key"]] == r
    for i in (0, 1):  # each worker wrote exactly its shard
        mine = [r["key"] for r in ds.read_jsonl(_part(tmp_path, i, 2) / ds.ROWS_JSONL)[0]]
        assert sorted(mine) == sorted(s.to_key() for s in _cfg(tmp_path, shard_index=i, shard_count=2).plan())
    assert all(r["status"] == "ok" for r in rows.values()), [r.get("error") for r in rows.values()]
    assert out["result"].rows_total == 8 and out["result"].measured == 8
    # resumable: a second run measures nothing, and its driver folds the parts into Parquet
    pytest.importorskip("pyarrow")
    with pytest.warns(UserWarning, match="2 CPU workers share 1 host"):
        again = cluster.run_cluster(_cfg(tmp_path, compact=True), workers=2)
    assert again.measured == 0 and again.skipped_existing == 8 and again.rows_total == 8
    assert sorted(_raw_keys(tmp_path)) == sorted(plan)
    assert all((f / ds.ROWS_JSONL).read_bytes() == b"" for f in parts.part_folders(tmp_path))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:2 CPU workers share")
def test_ray_worker_out_of_restarts_fails_loudly_and_a_rerun_finishes_its_shard(tmp_path, ray_local):
    from perfpredict.profiling import cluster

    # protocol 3: 1 arch x 2 batches x 2 phases = 4 rows, 2 rounds each; one batch sweep per worker
    cfg = _cfg(tmp_path, protocol_version=3, archs_per_family=1, min_seconds=0.03, min_rounds=2, max_rounds=2)
    thread, out = _in_thread(cluster.run_cluster, cfg, workers=2, max_restarts=0)
    part1 = _part(tmp_path, 1, 2)
    _, stored = _kill_writer_when(part1, collect_v3.ROUNDS_JSONL, 1, thread)
    thread.join(HANG_S)
    assert not thread.is_alive()
    err = out.get("error")
    assert isinstance(err, PerfPredictError), err
    assert "worker 1 (shard 1/2)" in str(err) and "run the same command again" in str(err)
    shard1 = {s.to_key() for s in _cfg(tmp_path, archs_per_family=1, shard_index=1, shard_count=2).plan()}
    assert {r["key"] for r in ds.load_dataset(tmp_path).rows} == {s.to_key() for s in cfg.plan()} - shard1
    again = cluster.run_cluster(cfg, workers=2)
    assert again.measured == 2 and again.rows_total == 4
    assert sorted(_raw_keys(tmp_path)) == sorted(s.to_key() for s in cfg.plan())
    rounds = collect_v3.load_rounds(tmp_path, "cpu-test")
    for rec in stored:  # the rounds stored before the kill were kept and reused, not measured again
        assert json.dumps(rounds[rec["key"]][rec["round"]], sort_keys=True) == json.dumps(rec, sort_keys=True)
    for r in ds.load_dataset(tmp_path).rows:
        assert r["status"] == "ok" and r["rounds"] == len(rounds[r["key"]]) == 2


def test_cli_without_ray_says_what_to_install_in_one_line(tmp_path, monkeypatch, capsys):
    from perfpredict.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    code = main(
        [
            "collect",
            "--ray",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "run"),
            "--families",
            "mlp",
            "--max-rows",
            "1",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "perfpredict[cluster]" in err[0]
    assert main(["collect", "--workers", "2"]) == 2 and "--workers needs --ray" in capsys.readouterr().err
