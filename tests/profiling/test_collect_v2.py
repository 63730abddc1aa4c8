"""The collector: resume after SIGKILL, OOM rows, damaged files, compaction, and the CLI wiring."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from killed_collector import kill_after_rows

from perfpredict.core.errors import InvalidInputError
from perfpredict.profiling import collect_engine as engine
from perfpredict.profiling import collect_v2, graph_features, zoo
from perfpredict.profiling import dataset as ds
from perfpredict.profiling.measurement import MEASUREMENT_SCHEMA_VERSION

FAST = [
    "--families",
    "mlp",
    "--archs-per-family",
    "2",
    "--batches",
    "1,2,4",
    "--warmup-min",
    "1",
    "--min-runs",
    "3",
    "--floor-runs",
    "3",
    "--graph-features",
    "none",
    "--no-progress",
    "--no-compact",
]


def _cfg(out: Path, **kw) -> engine.CollectConfig:
    base = dict(
        out=out,
        families=["mlp"],
        archs_per_family=2,
        batches=(1, 2, 4),
        warmup_min=1,
        min_runs=3,
        floor_runs=3,
        min_seconds=0.0,
        graph_features="none",
        progress=False,
        compact=False,
        device_label="cpu-test",
    )
    base.update(kw)
    return engine.CollectConfig(**base)


def test_resume_after_sigkill_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "perfpredict",
        "collect",
        "--out",
        str(out),
        "--min-seconds",
        "0.05",
        "--protocol",
        "2",
        *FAST,
    ]
    env = kill_after_rows(cmd, out / ds.ROWS_JSONL, 3)
    killed_rows = ds.load_dataset(out).rows
    assert 3 <= len(killed_rows) < 24
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = ds.load_dataset(out)
    keys = [r["key"] for r in result.rows]
    expected = [s.to_key() for s in _cfg(out).plan()]  # 2 archs x 3 batches x 2 phases x 2 dtypes = 24
    assert len(expected) == 24
    assert len(keys) == len(set(keys)) == 24, "a row was duplicated or lost"
    assert set(keys) == set(expected)
    assert result.lost == 0 and result.duplicates == 0
    assert {r["key"] for r in killed_rows} <= set(keys)
    assert all(r["status"] == "ok" and r["latency_ms"] > 0 for r in result.rows), [r.get("error") for r in result.rows]


def test_oom_rows_and_larger_batches_skipped(tmp_path, monkeypatch):
    real = zoo.make_step

    def failing(model, x, labels, phase, **kw):
        if phase == "training" and x.shape[0] >= 2:

            def step():
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

            return step
        return real(model, x, labels, phase, **kw)

    monkeypatch.setattr(zoo, "make_step", failing)
    summary = collect_v2.collect(_cfg(tmp_path))
    rows = ds.load_dataset(tmp_path).rows
    train = [r for r in rows if r["phase"] == "training"]
    assert {(r["batch_size"], r["status"]) for r in train} == {(1, "ok"), (2, "oom")}
    assert not [r for r in train if r["batch_size"] == 4], "larger batches after an OOM must be skipped"
    assert all(r["status"] == "ok" for r in rows if r["phase"] == "inference")
    assert len([r for r in rows if r["phase"] == "inference"]) == 12  # 2 archs x 3 batches x 2 dtypes
    assert summary.oom == 4 and summary.skipped_larger == 4  # 2 archs x 2 dtypes
    oom = next(r for r in train if r["status"] == "oom")
    assert "OutOfMemoryError" in oom["error"] and oom.get("latency_ms") is None
    # a resumed run re-derives the skips from the rows and measures nothing new
    again = collect_v2.collect(_cfg(tmp_path))
    assert again.measured == 0 and again.skipped_larger == 4


def test_rows_carry_features_noise_and_environment(tmp_path):
    collect_v2.collect(_cfg(tmp_path, max_rows=2, graph_features="inline", compact=True))
    rows = ds.load_dataset(tmp_path).rows
    assert len(rows) == 2
    if importlib.util.find_spec("pyarrow") is not None:
        assert (tmp_path / ds.ROWS_PARQUET).exists() and (tmp_path / ds.ROWS_JSONL).read_bytes() == b""
    r = rows[0]
    for column in (
        "latency_ms",
        "latency_min_ms",
        "latency_cv",
        "peak_memory_bytes",
        "param_count",
        "torch_flops",
        "graph_flops",
        "graph_nodes",
        "env_cpu_model",
        "env_torch_version",
        "protocol_min_runs",
    ):
        assert r[column] is not None, column
    # the zoo's HF families run transformers' model code: which release ran is part of what was measured
    assert r["env_transformers_version"] == importlib.metadata.version("transformers")
    assert r["graph_features_method"] == "exact" and r["schema_version"] == ds.DATASET_SCHEMA_VERSION
    assert r["measurement_schema_version"] == MEASUREMENT_SCHEMA_VERSION and r["protocol_version"] == 2
    if r["memory_method"] == "rss_hwm":  # the window is split once the model is built: the step's own peak apart
        assert r["build_peak_memory_bytes"] > 0 and r["step_peak_memory_bytes"] > 0
        assert r["peak_memory_bytes"] == max(r["build_peak_memory_bytes"], r["step_peak_memory_bytes"])
    assert zoo.ModelSpec.from_key(r["key"]).family == "mlp"


def test_affine_graph_features_match_an_exact_trace():
    cache = graph_features.GraphFeatureCache()
    spec = zoo.smallest_spec("mlp")
    for b in (1, 2, 4):
        assert cache.features(spec.with_batch(b))["graph_features_method"] == "exact"
    affine = cache.features(spec.with_batch(16))
    assert affine["graph_features_method"] == "affine_batch_2_4"
    exact = graph_features.graph_summary(graph_features.spec_graph(spec.with_batch(16)))
    for k in ("graph_flops", "graph_bytes", "graph_nodes"):
        assert affine[k] == exact[k], k


def test_damaged_files_are_reported_not_fatal(tmp_path):
    collect_v2.collect(_cfg(tmp_path, max_rows=4))
    log = tmp_path / ds.ROWS_JSONL
    with open(log, "ab") as f:
        f.write(b"{not json}\n")
        f.write(b'{"schema_version": 1, "key": "x"}\n')  # missing columns
        f.write(b'{"schema_version": 1, "key": "torn", "dev')  # a torn last line
    result = ds.load_dataset(tmp_path)
    assert result.kept == 4 and result.lost == 3
    assert any("torn last line" in p for p in result.problems)
    # the next append repairs the tail first, so new rows are never glued to garbage
    collect_v2.collect(_cfg(tmp_path, max_rows=6))
    result = ds.load_dataset(tmp_path)
    assert result.kept == 6 and result.lost == 2
    # compaction keeps the good rows; a damaged Parquet file loses its rows, loudly, without crashing
    pytest.importorskip("pyarrow")
    assert ds.compact(tmp_path) == 6
    assert log.read_bytes() == b""
    assert ds.load_dataset(tmp_path).kept == 6
    pq = tmp_path / ds.ROWS_PARQUET
    pq.write_bytes(pq.read_bytes()[:-100])
    result = ds.load_dataset(tmp_path)
    assert result.kept == 0 and any("unreadable" in p for p in result.problems)


def test_crash_between_compaction_steps_does_not_duplicate(tmp_path):
    pytest.importorskip("pyarrow")
    collect_v2.collect(_cfg(tmp_path, max_rows=3))
    saved = (tmp_path / ds.ROWS_JSONL).read_bytes()
    ds.compact(tmp_path)
    (tmp_path / ds.ROWS_JSONL).write_bytes(saved)  # as if the log had not been emptied yet
    result = ds.load_dataset(tmp_path)
    assert result.kept == 3 and result.duplicates == 3


def test_twice_crashed_config_becomes_a_row(tmp_path):
    spec = _cfg(tmp_path).plan()[0]
    with ds.JsonlAppender(tmp_path / ds.ATTEMPTS_JSONL) as f:
        for _ in range(2):
            f.append({"key": spec.to_key(), "device": "cpu-test"})
    collect_v2.collect(_cfg(tmp_path, max_rows=1))
    row = ds.load_dataset(tmp_path).rows[0]
    assert row["key"] == spec.to_key() and row["status"] == "crashed"


def test_config_errors():
    with pytest.raises(InvalidInputError, match="unknown model family 'nope'"):
        engine.CollectConfig(out=Path("x"), families=["nope"])
    with pytest.raises(InvalidInputError, match="float16.*not measured on cpu"):
        engine.CollectConfig(out=Path("x"), dtypes=["float16"])
    with pytest.raises(InvalidInputError, match="'cpu', 'cuda'"):
        engine.CollectConfig(out=Path("x"), device="tpu")


def test_cli_register_collect_and_zoo(tmp_path, capsys):
    from perfpredict.cli import collect as cli_collect

    parser = argparse.ArgumentParser(prog="perfpredict")
    sub = parser.add_subparsers(dest="command")
    cli_collect.register(sub)
    args = parser.parse_args(["collect", "--out", str(tmp_path / "d"), "--max-rows", "2", *FAST])
    assert args.func(args) == 0
    assert ds.load_dataset(tmp_path / "d").kept == 2
    args = parser.parse_args(["zoo", "graphs", "--n", "30", "--out", str(tmp_path / "g")])
    assert args.func(args) == 0
    manifest = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert manifest["specs"] == 30
    args = parser.parse_args(["zoo", "families"])
    assert args.func(args) == 0
    assert "t5_encoder" in capsys.readouterr().out


def test_arch_block_sweeps_whole_batch_ranges_for_fewer_architectures(tmp_path):
    # A short GPU lease: arch_block=1 measures the first architecture's whole sweep before the next one starts
    plan = _cfg(tmp_path, archs_per_family=3, arch_block=1, phases=("inference",), dtypes=("float32",)).plan()
    archs = [s.arch_key() for s in plan]
    assert [s.batch for s in plan[:3]] == [1, 2, 4] and len(set(archs[:3])) == 1
    wide = _cfg(tmp_path, archs_per_family=3, phases=("inference",), dtypes=("float32",)).plan()  # default block 5
    assert [s.batch for s in wide[:3]] == [1, 1, 1] and len({s.arch_key() for s in wide[:3]}) == 3
    assert sorted(s.to_key() for s in plan) == sorted(s.to_key() for s in wide)  # the same specs, in another order
    args = argparse.ArgumentParser()
    from perfpredict.cli import collect as cli_collect

    cli_collect.add_collect_args(args)
    parsed = args.parse_args(["--arch-block", "2", "--power-sample-interval-s", "0"])
    assert parsed.arch_block == 2 and parsed.power_sample_interval_s == 0.0


def test_too_slow_guard_allows_one_outlier():
    calls = iter([0.0, 0.03, 0.0, 0.03])
    guarded = engine.guarded(lambda: time.sleep(next(calls)), limit_ms=20)
    guarded()
    guarded()  # one slow call is an outlier
    guarded()
    with pytest.raises(engine.TooSlow, match="2 calls slower than 20 ms"):
        guarded()


def test_trusted_label_needs_a_quiet_host_and_agreeing_runs():
    quiet = {"latency_cv": 0.03, "env_load_avg_1m_before": 1.2, "env_cpu_count": 2}
    assert ds.trusted_label(quiet)
    assert not ds.trusted_label({**quiet, "latency_cv": 0.15})  # timed runs disagree
    assert not ds.trusted_label({**quiet, "env_load_avg_1m_before": 4.5})  # other work on the host
    assert not ds.trusted_label({**quiet, "latency_cv": None})  # no spread recorded: cannot vouch for it
    assert not ds.trusted_label({"latency_cv": 0.03})  # no load recorded: not known to be quiet
    summary = ds.summarize(
        [
            {**quiet, "status": "ok", "latency_ms": 1.0},
            {**quiet, "status": "ok", "latency_ms": 2.0, "env_load_avg_1m_before": 5.0},
        ]
    )
    assert summary["quiet_rows"] == 1


def test_sentinel_reading_travels_with_each_row_only_when_asked(tmp_path, monkeypatch):
    from perfpredict.profiling.sentinel import Sentinel

    refreshes = []
    real = Sentinel.refresh
    monkeypatch.setattr(Sentinel, "refresh", lambda self: refreshes.append(1) or real(self))
    collect_v2.collect(_cfg(tmp_path / "with", max_rows=2, sentinel=True))
    assert len(refreshes) == 2  # a fresh reading for each row, not one per run
    collect_v2.collect(_cfg(tmp_path / "without", max_rows=2))
    assert len(refreshes) == 2
    with_rows = ds.load_dataset(tmp_path / "with").rows
    assert len(with_rows) == 2
    for r in with_rows:
        assert all(r[f"env_sentinel_{p}_ms"] > 0 for p in ("matmul", "stream", "dispatch"))
        assert r["env_sentinel_age_s"] < 1.0
    assert not any(k.startswith("env_sentinel") for r in ds.load_dataset(tmp_path / "without").rows for k in r)
