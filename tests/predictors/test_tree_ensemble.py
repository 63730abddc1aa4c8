"""Trees read with numpy give xgboost's own predictions, after a save and a load."""

from __future__ import annotations

import numpy as np
import pytest

from perfpredict.predictors.tree_ensemble import TreeEnsemble

xgboost = pytest.importorskip("xgboost")


def test_numpy_trees_predict_what_xgboost_predicts(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 7))
    X[::17, 3] = np.nan  # missing values follow each split's default direction
    y = np.sin(X[:, 0] * 2) + np.nan_to_num(X[:, 3]) * X[:, 1] + (X[:, 5] > 0.3)
    fitted = xgboost.XGBRegressor(n_estimators=60, max_depth=6, learning_rate=0.2, n_jobs=1).fit(X, y)
    trees = TreeEnsemble.from_xgboost(fitted)
    test = rng.normal(size=(500, 7))
    test[::5, 3] = np.nan
    np.testing.assert_allclose(trees.predict(test), fitted.predict(test), atol=1e-5)
    trees.save(tmp_path / "t.npz")
    again = TreeEnsemble.load(tmp_path / "t.npz")
    np.testing.assert_allclose(again.predict(test), fitted.predict(test), atol=1e-5)
    assert again.depth == trees.depth <= 6


def test_a_classifier_is_refused():
    from perfpredict.core.errors import ArtifactError

    X = np.random.default_rng(1).normal(size=(100, 3))
    fitted = xgboost.XGBClassifier(n_estimators=3, max_depth=2).fit(X, X[:, 0] > 0)
    with pytest.raises(ArtifactError, match="squared-error"):
        TreeEnsemble.from_xgboost(fitted)
