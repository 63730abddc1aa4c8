"""benchmarks/accuracy.py: a stored run is matched to today's features by an id that names the physics versions."""

import argparse
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from perfpredict.predictors.memory_model import GPU_MEMORY_MODEL_VERSION

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy.py"
_spec = importlib.util.spec_from_file_location("accuracy_benchmark", _PATH)
accuracy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accuracy)


def test_features_id_names_the_gpu_memory_model_for_gpu_rows_only():
    # The committed H100 runs were stored as ".../gpu-memory-2": the id must keep that spelling, or every stored
    # run would be reported stale, and must change when the GPU memory model does.
    base = accuracy.features_id()
    cpu = accuracy.features_id(SimpleNamespace(devices=["cpu"]))
    gpu = accuracy.features_id(SimpleNamespace(devices=["H100-SXM"]))
    assert cpu.startswith(f"{base}/cpu-") and "gpu-memory" not in cpu
    assert gpu == f"{base}/gpu-memory-{GPU_MEMORY_MODEL_VERSION}"


def _part(stem, rows, seed=0, seconds=10.0, n=6):
    oof = {t: np.full(n, np.nan) for t in accuracy.TARGETS}
    oof["latency_ms"][rows] = np.asarray(rows, dtype=float) + 1.0
    meta = {"seed": seed, "seconds": seconds, "created": f"2026-11-23 2{len(rows)}:00 UTC", "data_hash": "h"}
    return Path(f"gae_gnn__leave_one_family_out{stem}.npz"), meta, oof


def test_a_complete_set_of_shards_merges_into_one_run_and_an_incomplete_one_is_left_out():
    parts = [_part("@0of3", [0, 3]), _part("@1of3", [1, 4]), _part("@2of3", [2])]
    skipped = []
    meta, oof = accuracy._merge_shards(parts, skipped)
    assert skipped == [] and meta["shards"] == 3 and meta["seconds"] == 30.0
    np.testing.assert_array_equal(oof["latency_ms"], [1, 2, 3, 4, 5, np.nan])

    assert accuracy._merge_shards(parts[:2], skipped) is None
    assert len(skipped) == 2 and all("incomplete" in s for s in skipped)
    # shards of different seeds come from different folds: never merged
    assert accuracy._merge_shards([*parts[:2], _part("@2of3", [2], seed=1)], []) is None


def test_a_whole_run_wins_over_shards_of_the_same_split():
    whole = _part("", [0, 1, 2, 3, 4, 5], seconds=99.0)
    meta, oof = accuracy._merge_shards([_part("@0of2", [0]), whole], [])
    assert meta["seconds"] == 99.0 and np.isfinite(oof["latency_ms"]).all()


def test_shard_arguments_are_checked():
    assert accuracy.parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "a/2", "1", "-1/2"):
        with pytest.raises(argparse.ArgumentTypeError, match="K/N"):
            accuracy.parse_shard(bad)


def test_the_report_names_the_digest_its_runs_share_or_mixed():
    """A report joins stored runs made at different times: it names their inputs' digest only where they agree."""
    same = [{"inputs_digest": "0123456789abcdef"}, {"inputs_digest": "0123456789abcdef"}]
    assert accuracy.runs_digest(same) == "0123456789abcdef"
    assert accuracy.runs_digest([*same, {"inputs_digest": "fedcba9876543210"}]) == "mixed"
    assert accuracy.runs_digest([*same, {}]) == "mixed"  # a run stored before digests
    shards = []
    for stem, rows, digest in (("@0of2", [0], "0123456789abcdef"), ("@1of2", [1], "fedcba9876543210")):
        path, meta, oof = _part(stem, rows)
        shards.append((path, {**meta, "inputs_digest": digest}, oof))
    meta, _ = accuracy._merge_shards(shards, [])
    assert meta["inputs_digest"] == "mixed"  # shards of different code merge into a mixed run
