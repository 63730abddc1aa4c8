"""studies/sweep_recheck.py picks the roughest batch sweeps to measure again and says which bumps came back."""

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "studies" / "sweep_recheck.py"
_spec = importlib.util.spec_from_file_location("sweep_recheck", _PATH)
sweep_recheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep_recheck)


def _sweep(arch: str, latencies: dict[int, float]) -> list[dict]:
    return [
        {
            "arch_key": arch,
            "phase": "inference",
            "seq_len": None,
            "dtype": "float32",
            "batch_size": b,
            "latency_ms": ms,
            "key": f"{arch}-{b}",
        }
        for b, ms in latencies.items()
    ]


def test_pick_sweeps_takes_the_roughest_and_leaves_slow_or_short_ones_out():
    rows = (
        _sweep("smooth", {1: 2.0, 2: 3.0, 4: 5.0})
        + _sweep("bumpy", {1: 2.0, 2: 6.0, 4: 5.0})
        + _sweep("mild", {1: 2.0, 2: 3.3, 4: 5.0})
        + _sweep("slow", {1: 20.0, 2: 90.0, 4: 50.0})
        + _sweep("short", {1: 2.0, 2: 9.0})
    )
    top, control = sweep_recheck.pick_sweeps(rows, bumped=2, control=5, max_latency_ms=40.0, seed=0)
    assert [s[1]["arch_key"] for s in top] == ["bumpy", "mild"]
    assert [s[1]["arch_key"] for s in control] == ["smooth"]  # all that is left; slow and short never qualify


def test_compare_counts_a_bump_back_only_when_both_passes_repeat_it():
    entries = [
        {"dataset": 1.5, "pass1": 1.3, "pass2": 1.25},  # back: same way, over half the size in log terms
        {"dataset": 1.5, "pass1": 1.3, "pass2": 0.9},  # the second pass points the other way
        {"dataset": 0.6, "pass1": 0.95, "pass2": 0.9},
    ]  # too small to count
    s = sweep_recheck.compare(entries)
    assert s["interior_rows"] == 3 and s["bumps_back_in_both_passes"] == 1
    assert s["median_abs_bump_dataset_pct"] == pytest.approx(50.0)
    fresh = sorted(abs(math.log(v)) for v in (1.3, 1.25, 1.3, 0.9, 0.95, 0.9))
    assert s["median_abs_bump_fresh_pct"] == pytest.approx(100 * (math.exp((fresh[2] + fresh[3]) / 2) - 1))
