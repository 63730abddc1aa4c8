"""studies/logits_rule.py scores the analytical peak under both liveness rules for a training step's forward
outputs. Its "kept" column must be the CPU's own physics feature and "freed" the GPU's, or the comparison that
decides each device's rule compares something else."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from perfpredict.hardware.devices import get_device
from perfpredict.learning.training_data import GraphCache, arrays_for
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.features import TABULAR_FEATURES, tabular_matrix
from perfpredict.profiling import zoo

_PATH = Path(__file__).resolve().parents[2] / "studies" / "logits_rule.py"
_spec = importlib.util.spec_from_file_location("logits_rule", _PATH)
logits_rule = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(logits_rule)

MLP = {"in_dim": 64, "width": 1024, "layers": 3, "activation": "relu", "layernorm": False}


def _feature_peak(arrays, device, spec) -> float:
    row = tabular_matrix(arrays, device, RunConfig(phase=spec.phase), np.array([spec.batch]))[0]
    return float(np.expm1(row[TABULAR_FEATURES.index("log_analytical_memory")]))


def test_each_rule_is_the_physics_feature_of_the_device_that_uses_it(tmp_path):
    specs = [zoo.ModelSpec("mlp", MLP, phase=phase, batch=8) for phase in ("inference", "training")]
    cache = GraphCache(tmp_path)
    arrays = [arrays_for(spec, cache) for spec in specs]
    data = SimpleNamespace(arrays=arrays, rows=[{"key": s.to_key()} for s in specs])
    cpu, gpu = get_device("cpu"), get_device("H100-SXM")
    on_cpu, on_gpu = logits_rule.predicted_peaks(data, cpu), logits_rule.predicted_peaks(data, gpu)
    for i, spec in enumerate(specs):
        assert on_cpu["kept"][i] == pytest.approx(_feature_peak(arrays[i], cpu, spec), rel=1e-12)
        assert on_gpu["freed"][i] == pytest.approx(_feature_peak(arrays[i], gpu, spec), rel=1e-12)
    # inference has no rule to choose; training frees its output (the loss's input) only under "freed"
    assert on_cpu["kept"][0] == on_cpu["freed"][0]
    assert on_cpu["freed"][1] < on_cpu["kept"][1]


def test_the_scaled_score_forgives_a_steady_factor_and_the_lm_group_holds_only_lm_training_rows():
    measured = np.array([100.0, 200.0, 400.0])
    doubled = logits_rule.score(2 * measured, measured)
    assert doubled["median_ratio"] == 2.0 and doubled["mape_pct"] == 100.0 and doubled["scaled_mape_pct"] == 0.0
    keys = [zoo.ModelSpec("mlp", MLP, phase=p, batch=1).to_key() for p in ("training", "inference", "training")]
    data = SimpleNamespace(keys=keys, families=np.array(["gpt2", "gpt2", "mlp"]))
    groups = logits_rule.groups(data)
    assert groups["LM training"].tolist() == [True, False, False]
    assert groups["training"].tolist() == [True, False, True]
