"""Every learner keeps one contract (perfpredict/learning/learner.py), checked on the same tiny synthetic set.

The graphs are real (tiny MLPs and conv nets traced with perfpredict.featurize, tests/synthetic_graphs.py); the
targets are a fixed function of the analytical prediction. Hyper-parameters are the smallest that still fit, so
the whole file stays fast: this checks the contract, not accuracy.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from perfpredict.core.errors import NotFittedError
from perfpredict.learning.learner import ArtifactLearner, Learner
from perfpredict.learning.train import LEARNERS

TARGETS = ["latency_ms", "peak_memory_bytes"]
TINY_GNN = {"members": 1, "hidden": 8, "target_steps": 20, "min_epochs": 1, "max_epochs": 2, "min_holdout_rows": 4}
TINY_XGB = {"grid": {"max_depth": (2,), "learning_rate": (0.3,), "n_estimators": (10,)}}
# (module, class, hyper-parameters, extra packages it needs)
CASES = {
    "xgboost": ("perfpredict.learning.xgboost_learner", "XGBoostLearner", TINY_XGB, ("xgboost", "safetensors")),
    "xgboost_static": (
        "perfpredict.learning.xgboost_learner",
        "XGBoostStaticLearner",
        TINY_XGB,
        ("xgboost", "safetensors"),
    ),
    "graphsage": ("perfpredict.learning.graphsage_learner", "GraphSAGELearner", TINY_GNN, ("torch_geometric",)),
    "gae_gnn": (
        "perfpredict.learning.gae_learner",
        "GAEGNNLearner",
        {**TINY_GNN, "gae_epochs": 1, "gae_hidden": 8, "gae_layers": 1},
        ("torch_geometric",),
    ),
    "two_timeline": ("perfpredict.learning.two_timeline_fit", "TwoTimelineLearner", {"learned": False}, ()),
    "analytical": ("perfpredict.learning.evaluation", "AnalyticalBaseline", {}, ()),
    "flops_linear": ("perfpredict.learning.evaluation", "FlopsLinearBaseline", {}, ()),
}

# The two-timeline simulation reads each row's phase from its zoo spec key, which synthetic rows lack: its fit and
# predict are checked on real measured rows (tests/predictors/test_learned.py), its params and unfitted error here.
NEEDS_ZOO_KEYS = {"two_timeline"}


def _learner_class(name: str):
    module, cls, _, needs = CASES[name]
    for package in needs:
        pytest.importorskip(package)
    return getattr(importlib.import_module(module), cls)


@pytest.fixture(scope="module")
def data(synthetic_traced):
    ts, _ = synthetic_traced
    return ts


@pytest.fixture(scope="module")
def fitted(data):
    """One fitted learner per case, fitted once for the whole module (the fit is the slow part)."""
    cache = {}

    def get(name):
        if name in NEEDS_ZOO_KEYS:
            pytest.skip(f"{name} needs zoo spec keys (tests/predictors/test_learned.py fits it on real rows)")
        if name not in cache:
            cls, hyper = _learner_class(name), CASES[name][2]
            learner = cls(**hyper)
            cache[name] = (learner, learner.fit(data, TARGETS, seed=0))
        return cache[name]

    return get


def test_every_trainable_predictor_is_covered():
    assert set(LEARNERS) - set(CASES) == {"gnn_llm"}  # tests/predictors/test_gnn_llm.py: it needs a base LM


@pytest.mark.parametrize("name", sorted(CASES))
def test_fit_returns_self(fitted, name):
    learner, returned = fitted(name)
    assert returned is learner
    assert isinstance(learner, Learner)


@pytest.mark.parametrize("name", sorted(CASES))
def test_params_round_trip_through_init(name):
    cls, hyper = _learner_class(name), CASES[name][2]
    params = cls(**hyper).get_params()
    for key, value in hyper.items():
        assert params[key] == value
    again = cls(**params).get_params()
    assert again.keys() == params.keys()
    for key, value in params.items():
        assert np.array_equal(value, again[key]) if isinstance(value, np.ndarray) else value == again[key]


@pytest.mark.parametrize("name", sorted(CASES))
def test_predict_gives_one_finite_value_per_row_and_target(data, fitted, name):
    learner, _ = fitted(name)
    half = data.subset(np.arange(0, len(data.keys), 2))
    out = learner.predict(half)
    assert set(TARGETS) <= set(out)
    for target in TARGETS:
        p = out[target]
        for part in (p.value, p.low, p.high, p.ood):
            assert np.shape(part) == (len(half.keys),)
        assert np.all(np.isfinite(p.value)) and np.all(p.value > 0)
        assert np.all(p.low <= p.value) and np.all(p.value <= p.high)


@pytest.mark.parametrize("name", sorted(CASES))
def test_save_and_load_predict_the_same(data, fitted, name):
    learner, _ = fitted(name)
    if not isinstance(learner, ArtifactLearner):
        pytest.skip(f"{name} ships no artifact")
    files = learner.to_files()
    assert files and all(isinstance(v, bytes) for v in files.values())
    loaded = type(learner).from_files(None, files)
    assert loaded.targets == learner.targets
    before, after = learner.predict(data), loaded.predict(data)
    for target in learner.targets:
        for part in ("value", "low", "high"):
            np.testing.assert_allclose(getattr(after[target], part), getattr(before[target], part), rtol=1e-6)
        # the OOD reference is stored in float32: a training row lies ~1e-7 from itself once loaded
        np.testing.assert_allclose(after[target].ood, before[target].ood, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_unfitted_learner_says_to_fit_it(data, name):
    cls, hyper = _learner_class(name), CASES[name][2]
    with pytest.raises(NotFittedError, match="fit"):
        cls(**hyper).predict(data)
