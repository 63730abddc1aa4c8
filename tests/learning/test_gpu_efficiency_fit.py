import numpy as np
import pytest

from perfpredict.core.errors import NotFittedError
from perfpredict.learning.gpu_efficiency_fit import GpuEfficiencyLearner, fit_levels
from perfpredict.predictors.gpu_efficiency import LEVEL_BOUND_S


def test_params_round_trip_and_an_unfitted_learner_has_no_model():
    learner = GpuEfficiencyLearner(params={"n_estimators": 5})
    assert GpuEfficiencyLearner(**learner.get_params()).get_params() == {"params": {"n_estimators": 5}}
    with pytest.raises(NotFittedError, match="fit"):
        learner.model  # noqa: B018 - the property raises


def test_a_level_is_the_median_of_the_long_ops_where_there_are_enough():
    rng = np.random.default_rng(0)
    short, long = np.log(rng.uniform(0.1, 0.2, 40)), np.log(rng.uniform(0.7, 0.9, 40))
    log_eff = np.concatenate([short, long, np.log([0.5, 0.5])])
    bounds = np.array([LEVEL_BOUND_S / 10] * 40 + [LEVEL_BOUND_S * 10] * 40 + [1.0, 1.0])
    classes = ["simt32"] * 80 + ["memory"] * 2
    levels = fit_levels(log_eff, classes, ["T4"] * 82, bounds)
    assert levels == {"simt32": {"T4": pytest.approx(float(np.median(long)))}}  # memory ops take no level
    few = fit_levels(log_eff[:50], classes[:50], ["T4"] * 50, bounds[:50])  # 10 long ops: all of them count
    assert few["simt32"]["T4"] == pytest.approx(float(np.median(log_eff[:50])))
