import numpy as np
import pytest

from perfpredict.core.errors import NotFittedError
from perfpredict.learning.op_efficiency_fit import OpEfficiencyLearner
from perfpredict.predictors.op_efficiency import EFFICIENCY_FLOOR, PARAMS


def test_fit_returns_self_and_its_model_learns_the_efficiency():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (300, 3))
    log_eff = np.log(0.2 + 0.6 * X[:, 0])  # efficiency grows with the first feature
    learner = OpEfficiencyLearner(params={**PARAMS, "n_estimators": 60, "n_jobs": 1})
    assert learner.fit(X, log_eff) is learner
    eff = learner.model.efficiency(X)
    assert np.all((eff >= EFFICIENCY_FLOOR) & (eff <= 1.0))
    assert np.median(np.abs(eff / np.exp(log_eff) - 1)) < 0.05
    assert learner.model.params["n_estimators"] == 60


def test_params_round_trip_and_an_unfitted_learner_has_no_model():
    learner = OpEfficiencyLearner()
    assert OpEfficiencyLearner(**learner.get_params()).get_params() == {"params": None}
    with pytest.raises(NotFittedError, match="fit"):
        learner.model  # noqa: B018 - the property raises
