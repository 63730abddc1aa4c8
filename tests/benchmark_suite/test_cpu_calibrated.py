"""benchmarks/cpu_calibrated.py: the report scores each predictor per group (tuning models apart from held-out
ones), and a stored calibration is fitted again by the current code."""

import importlib.util
import sys
from pathlib import Path

import pytest

_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(_DIR))
_spec = importlib.util.spec_from_file_location("cpu_calibrated", _DIR / "cpu_calibrated.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
from cpu_calibrated_report import render  # noqa: E402


def test_the_report_scores_tuning_and_held_out_models_apart():
    items = [("a", 1), ("b", 1)]
    measured = {
        "created": "now",
        "threads": 2,
        "load_average_per_round": [0.5, 0.7],
        "rows": {
            "a|1": {"ms": 100.0, "rounds_ms": [100.0, 104.0], "spread": 0.04},
            "b|1": {"ms": 50.0, "rounds_ms": [50.0, 50.0], "spread": 0.0},
        },
    }
    predicted = {
        ("a", 1): {"two_timeline": 110.0, "before": 50.0, "xgboost": None},
        ("b", 1): {"two_timeline": 45.0, "before": 100.0, "xgboost": 50.0},
    }
    run = {"command": "cmd", "started": "t", "calibration": {"seconds": 12.0, "path": "p.json"}}
    text = render(run, measured, predicted, items, tuning=("a",))
    assert "| a | 1 | tuning | 100.0 | 4% | 110.0 | +10% | 50.0 | -50% | - | - |" in text
    assert "| b | 1 | held out | 50.0 | 0% | 45.0 | -10% | 100.0 | +100% | 50.0 | +0% |" in text
    # two_timeline: held out 10% (b), tuning 10% (a), all 10%; before: 100%, 50%, 75%
    assert "| two_timeline (default, calibrated) | 10.0% | 10.0% | 10.0% |" in text
    assert "| before: learned op efficiency, estimated ceilings | 100.0% | 50.0% | 75.0% |" in text
    assert "| xgboost (whole model, CPU rows) | 0.0% | - | 0.0% |" in text
    assert "load average per round 0.50, 0.70" in text and "12.0 s" in text


def test_a_stored_calibration_is_fitted_again_from_its_probes():
    from dataclasses import replace

    from perfpredict.learning.host_calibration import calibrate

    profile = calibrate("ci", quick=True)
    stale = replace(profile, cpu_ops={**profile.cpu_ops, "fits": {}})  # as if fitted by older code
    again = bench.refit(stale)
    assert again.cpu_op_model().fits == profile.cpu_op_model().fits


@pytest.mark.parametrize("model_id", ["bert-base-uncased", "microsoft/resnet-50"])
def test_text_models_run_at_sequence_128_and_images_at_their_size(model_id):
    assert bench.seq_of(model_id) == (128 if "bert" in model_id else None)
