"""studies/eager_peak.py checks the liveness walk against an eager step on the CPU. On a plain MLP the two must
agree: the walk's gradients are born in the backward, and the eager tracker must see every tensor the step makes
and none of the weights."""

import importlib.util
import json
from pathlib import Path

import pytest

from perfpredict.learning.training_data import GraphCache
from perfpredict.profiling import zoo
from perfpredict.profiling.dataset import ROWS_JSONL

_PATH = Path(__file__).resolve().parents[2] / "studies" / "eager_peak.py"
_spec = importlib.util.spec_from_file_location("eager_peak", _PATH)
eager_peak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eager_peak)

MLP = {"in_dim": 64, "width": 1024, "layers": 3, "activation": "relu", "layernorm": False}


def test_the_walk_and_the_eager_step_agree_on_an_mlp(tmp_path):
    spec = zoo.ModelSpec("mlp", MLP, phase="training", batch=256)
    eager = eager_peak.eager_peak_bytes(spec)
    walk = eager_peak.walk_peak_bytes(spec, GraphCache(tmp_path))
    weights = 4 * (64 * 1024 + 2 * 1024 * 1024)  # the gradients alone, at least, are made by the step
    assert eager > weights
    assert walk == pytest.approx(eager, rel=0.01)  # 8 bytes apart when written


def test_training_specs_take_one_float32_spec_per_architecture(tmp_path):
    rows = [
        zoo.ModelSpec("mlp", MLP, phase=phase, batch=b, dtype=dtype).to_key()
        for phase, b, dtype in (("training", 1, "bfloat16"), ("training", 8, "float32"), ("inference", 1, "float32"))
    ]
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / ROWS_JSONL).write_text(
        "".join(json.dumps({"key": k, "status": "ok", "schema_version": 1, "device": "cpu"}) + "\n" for k in rows)
    )
    specs = eager_peak.training_specs(folder, batch=2, max_seq=1024, max_hidden=1024)
    assert [(s.phase, s.batch, s.dtype) for s in specs] == [("training", 2, "float32")]
