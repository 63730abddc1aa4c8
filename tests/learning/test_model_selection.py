"""The one-standard-error rule that picks among formulations scored on the same inner folds."""

import numpy as np
import pytest

from perfpredict.learning.model_selection import clustered_standard_error, simplest_within_one_se


def test_clustered_standard_error_by_hand():
    # Two groups of two rows: centred diffs -1,-1,+1,+1; group sums -2,+2; sqrt(2/1 * 8) / 4 = 1.
    assert clustered_standard_error(np.array([1.0, 1.0, 3.0, 3.0]), np.array(["a", "a", "b", "b"])) == 1.0


def test_clustered_standard_error_with_one_row_per_group_is_the_classic_one():
    diff = np.random.default_rng(0).normal(size=50)
    classic = np.std(diff, ddof=1) / np.sqrt(len(diff))
    assert clustered_standard_error(diff, np.arange(50)) == pytest.approx(classic)
    assert clustered_standard_error(diff, np.zeros(50)) == 0.0  # one group: no spread to measure


def test_a_difference_inside_the_noise_goes_to_the_simpler_candidate():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(40), 5)
    complex_errors = rng.uniform(5, 30, len(groups))
    noise = rng.normal(0.0, 3.0, len(groups))
    simple_errors = complex_errors + noise - noise.mean() + 0.05  # exactly 0.05 points worse, 3 points of noise
    assert np.mean(simple_errors) > np.mean(complex_errors)
    assert simplest_within_one_se([simple_errors, complex_errors], groups) == 0


def test_a_clear_difference_goes_to_the_better_candidate():
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(40), 5)
    complex_errors = rng.uniform(5, 30, len(groups))
    simple_errors = complex_errors + rng.normal(4.0, 1.0, len(groups))
    more_complex = complex_errors + 2.0  # worse and later in the order: never chosen
    assert simplest_within_one_se([simple_errors, complex_errors, more_complex], groups) == 1


def test_errors_shared_within_an_architecture_widen_the_margin():
    # The same 1-point gap: on independent rows it is significant, but when each architecture's five rows share
    # one error (a batch sweep) there are only 8 independent draws and the gap is inside the noise.
    rng = np.random.default_rng(3)
    best = np.full(40, 10.0)
    per_row = best + 1.0 + rng.normal(0, 1.0, 40)
    per_architecture = best + 1.0 + np.repeat(rng.normal(0, 4.0, 8), 5)
    per_architecture += 1.0 - per_architecture.mean() + best.mean()  # exactly the same 1-point gap on average
    groups = np.repeat(np.arange(8), 5)
    assert simplest_within_one_se([per_row, best], np.arange(40)) == 1
    assert simplest_within_one_se([per_architecture, best], groups) == 0


def test_errors_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="one error per row"):
        simplest_within_one_se([np.ones(3), np.ones(4)], np.arange(3))


def test_a_candidate_with_nan_errors_is_never_chosen():
    groups = np.repeat(np.arange(10), 3)
    good = np.full(30, 12.0)
    assert simplest_within_one_se([np.full(30, np.nan), good], groups) == 1
    assert simplest_within_one_se([good, np.full(30, np.nan)], groups) == 0
    with pytest.raises(ValueError, match="no candidate has a finite mean error"):
        simplest_within_one_se([np.full(30, np.nan)], groups)


def test_xgboost_candidates_run_simplest_first():
    from perfpredict.learning.xgboost_learner import XGBoostLearner, XGBoostStaticLearner

    order = [(c["residual"], c["params"] and c["params"]["max_depth"]) for c in XGBoostLearner()._candidates()]
    assert order == [(True, None), (True, 4), (True, 8), (False, 4), (False, 8)]
    static = [(c["residual"], c["params"]["max_depth"]) for c in XGBoostStaticLearner()._candidates()]
    assert static == [(False, 4), (False, 8)]  # no physics: no scaled or residual candidate


def test_out_of_fold_predictions_never_see_their_own_fold():
    # Each architecture has its own random level that no feature reveals but its id column: a model that saw the
    # row's own fold would learn the level from the id; one that did not can only guess the others' levels.
    xgb = pytest.importorskip("xgboost")
    from perfpredict.learning.xgboost_learner import XGBoostLearner, _folds

    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(30), 4)
    level = np.exp(rng.normal(0.0, 1.0, 30))[groups]
    X = groups[:, None].astype(float)
    y, base = level * 10.0, np.full(len(groups), 10.0)
    folds = _folds(groups, 3, seed=0)
    params = {"max_depth": 6, "learning_rate": 0.3, "n_estimators": 50}
    booster = XGBoostLearner._out_of_fold(xgb, X, y, base, folds, {"residual": False, "params": params}, 0)
    scaled = XGBoostLearner._out_of_fold(xgb, X, y, base, folds, {"residual": True, "params": None}, 0)
    for pred in (booster, scaled):
        assert np.median(np.abs(pred - y) / y) > 0.3  # a leak would fit each level almost exactly
    for test in folds:  # the scaled physics is the other folds' median log-ratio, exactly
        np.testing.assert_allclose(scaled[test], 10.0 * np.exp(np.median(np.log(level[~test]))))
