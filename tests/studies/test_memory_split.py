"""studies/memory_split.py scores the analytical model's two halves of peak memory, step and build, against the
collector's split. Its halves must be the product's own numbers: the step is what a user loading weights in the
run dtype is told, the combined peak what the default (float32 build) report says."""

import importlib.util
from pathlib import Path

import pytest

from perfpredict.graph_report import report_for_graph
from perfpredict.hardware.devices import get_device
from perfpredict.learning.training_data import GraphCache, _trace, arrays_for
from perfpredict.profiling import zoo

_PATH = Path(__file__).resolve().parents[2] / "studies" / "memory_split.py"
_spec = importlib.util.spec_from_file_location("memory_split", _PATH)
memory_split = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(memory_split)

MLP = {"in_dim": 64, "width": 1024, "layers": 3, "activation": "relu", "layernorm": False}


def _tensor_bytes(report) -> int:
    return report.memory.total_bytes - report.memory.runtime_overhead_bytes


@pytest.mark.parametrize("phase", ["inference", "training"])
def test_halves_are_the_reports_numbers(tmp_path, phase):
    spec = zoo.ModelSpec("mlp", MLP, phase=phase, batch=8, dtype="bfloat16")
    device = get_device("H100-SXM")
    halves = memory_split.predicted_halves(arrays_for(spec, GraphCache(tmp_path)), device, spec)
    graph = _trace(spec)
    step = _tensor_bytes(report_for_graph(graph, device=device, predictor="analytical", weights_built_in=None))
    peak = _tensor_bytes(report_for_graph(graph, device=device, predictor="analytical"))
    assert halves["step"] == pytest.approx(step, rel=0.01)
    assert halves["peak"] == pytest.approx(peak, rel=0.01)
    if phase == "inference":  # 3 MB of bf16 weights built in float32: the load is the peak, not the step
        assert halves["build"] > halves["step"] and halves["peak"] == halves["build"]


def test_rows_without_the_split_are_skipped_and_scores_are_signed():
    assert memory_split.measured_halves({"peak_memory_bytes": 10, "step_peak_memory_bytes": None}) is None
    row = {"peak_memory_bytes": 10, "step_peak_memory_bytes": 10, "build_peak_memory_bytes": 4}
    assert memory_split.measured_halves(row) == {"step": 10.0, "build": 4.0, "peak": 10.0}
    s = memory_split.score([(5.0, 10.0), (12.0, 10.0), (10.0, 10.0)])
    assert s["n"] == 3 and s["mape_pct"] == pytest.approx(100 * (0.5 + 0.2) / 3)
    assert s["median_ratio"] == pytest.approx(1.0) and s["within_10pct"] == pytest.approx(1 / 3)


_HPATH = Path(__file__).resolve().parents[2] / "studies" / "memory_history.py"
_hspec = importlib.util.spec_from_file_location("memory_history", _HPATH)
memory_history = importlib.util.module_from_spec(_hspec)
_hspec.loader.exec_module(memory_history)


def test_live_at_peak_follows_allocs_and_completed_frees():
    trace = [
        {"action": "alloc", "addr": 1, "size": 100, "frames": []},
        {"action": "alloc", "addr": 2, "size": 300, "frames": []},
        {"action": "free_requested", "addr": 1, "size": 100},  # still held until completed
        {"action": "alloc", "addr": 3, "size": 50, "frames": []},  # the peak: 450 held
        {"action": "free_completed", "addr": 1, "size": 100},
        {"action": "free_completed", "addr": 9, "size": 999},  # allocated before the trace began: ignored
        {"action": "free_completed", "addr": 2, "size": 300},
        {"action": "alloc", "addr": 4, "size": 200, "frames": []},
    ]
    peak, live = memory_history.live_at_peak(trace)
    assert peak == 450
    assert [e["addr"] for e in live] == [2, 1, 3]  # largest first


def test_where_names_the_model_code_not_torch_internals():
    frames = [
        {"filename": "/x/site-packages/torch/nn/functional.py", "line": 5, "name": "scaled_dot_product"},
        {"filename": "/x/site-packages/transformers/models/distilbert/modeling.py", "line": 42, "name": "fwd"},
    ]
    assert memory_history.where(frames) == ["modeling.py:42 fwd"]
    assert memory_history.where(frames[:1]) == ["functional.py:5 scaled_dot_product"]  # only torch: keep it


def test_pick_rows_takes_the_most_under_predicted_rows_of_each_family_and_phase():
    def row(family, phase, predicted, measured):
        return {"family": family, "phase": phase, "predicted": {"step": predicted}, "measured": {"step": measured}}

    split = {
        "rows": [
            row("vgg", "inference", 9, 10),
            row("vgg", "inference", 5, 10),
            row("vgg", "training", 1, 10),
            row("bert", "inference", 10, 10),
        ]
    }
    picked = memory_history.pick_rows(split, ["vgg"], 1)
    assert picked == [split["rows"][1]]
    assert memory_history.pick_rows(split, ["vgg:training", "bert"], 1) == [split["rows"][2], split["rows"][3]]
