"""Held-out evaluation: splits, metrics and the baselines every learned predictor is compared with.

Splits follow DESIGN.md: random k-fold with rows of one architecture kept in one fold, so a batch sweep cannot leak
across (our headline); random k-fold over rows, the research's own protocol, where an architecture's other batch
sizes, phases and dtypes may be in training (for comparing with the papers' figures like for like); and
leave-one-family-out (architectures the model never saw). Metrics: MAPE, RMSE, Kendall's tau and Acc(10%),
overall and per family.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from perfpredict.learning.learner import Params, not_fitted
from perfpredict.predictors.learned import TargetPrediction


def metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """MAPE (%), RMSE (target units), Kendall's tau and Acc(10%) (% of predictions within 10%)."""
    ok = np.isfinite(y) & np.isfinite(p) & (y > 0)
    y, p = y[ok], p[ok]
    if len(y) == 0:
        return {"n": 0}
    rel = np.abs(p - y) / y
    out = {
        "n": int(len(y)),
        "mape": float(rel.mean() * 100),
        "rmse": float(np.sqrt(np.mean((p - y) ** 2))),
        "acc10": float((rel <= 0.10).mean() * 100),
    }
    if len(y) >= 3:
        from scipy.stats import kendalltau

        tau = kendalltau(y, p).statistic
        out["kendall_tau"] = float(tau) if np.isfinite(tau) else float("nan")
    return out


def random_folds(data: Any, k: int = 5, seed: int = 0) -> list[np.ndarray]:
    """Test masks of k folds over architectures (all rows of one architecture share a fold)."""
    groups = np.unique(data.group_ids)
    rng = np.random.default_rng(seed)
    rng.shuffle(groups)
    return [np.isin(data.group_ids, part) for part in np.array_split(groups, k) if len(part)]


def random_row_folds(data: Any, k: int = 5, seed: int = 0) -> list[np.ndarray]:
    """Test masks of k folds over rows, as the research splits: one model's other configs may be in training."""
    rows = np.arange(len(data.keys))
    np.random.default_rng(seed).shuffle(rows)
    return [np.isin(np.arange(len(data.keys)), part) for part in np.array_split(rows, k) if len(part)]


def family_folds(data: Any) -> list[tuple[str, np.ndarray]]:
    """One test mask per family: train on every other family."""
    return [(fam, data.families == fam) for fam in sorted(set(data.families.tolist()))]


def cross_validate(
    make: Callable[[], Any], data: Any, targets: Sequence[str], folds: Sequence[np.ndarray], seed: int = 0
) -> dict[str, np.ndarray]:
    """Out-of-fold predictions of every target for every row (NaN where a fold could not predict it)."""
    out = {t: np.full(len(data.keys), np.nan) for t in targets}
    for test in folds:
        if test.all() or not test.any():
            continue
        learner = make()
        learner.fit(data.subset(np.flatnonzero(~test)), targets, seed)
        pred = learner.predict(data.subset(np.flatnonzero(test)))
        for t in targets:
            if t in pred:
                out[t][test] = pred[t].value
    return out


def report(data: Any, predictions: dict[str, np.ndarray], targets: Sequence[str]) -> dict[str, Any]:
    """Overall and per-family metrics of out-of-fold predictions."""
    result: dict[str, Any] = {}
    for t in targets:
        y = data.y[t]
        if not np.isfinite(y).any():
            continue
        entry = {"overall": metrics(y, predictions[t]), "families": {}}
        for fam in sorted(set(data.families.tolist())):
            mask = data.families == fam
            entry["families"][fam] = metrics(y[mask], predictions[t][mask])
        result[t] = entry
    return result


class AnalyticalBaseline(Params):
    """The analytical roofline as it stands: ``fit`` only notes which targets to answer."""

    name: ClassVar[str] = "analytical"

    def fit(self, train: Any, targets: Sequence[str], seed: int = 0) -> AnalyticalBaseline:
        self.targets = list(targets)
        return self

    def predict(self, data: Any) -> dict[str, TargetPrediction]:
        if not hasattr(self, "targets"):
            raise not_fitted(self)
        out = {}
        for t in self.targets:
            v = data.analytical(t)
            out[t] = TargetPrediction(v, v, v, np.zeros(len(v)))
        return out


class FlopsLinearBaseline(Params):
    """A straight line through (FLOPs, target) per phase, by relative least squares: the simplest learned model."""

    name: ClassVar[str] = "flops_linear"

    def fit(self, train: Any, targets: Sequence[str], seed: int = 0) -> FlopsLinearBaseline:
        from perfpredict.predictors.features import TABULAR_FEATURES

        self.col = TABULAR_FEATURES.index("log_flops")
        self.phase_col = TABULAR_FEATURES.index("is_training")
        self.coef: dict[tuple[str, float], np.ndarray] = {}
        self.targets = [t for t in targets if np.isfinite(train.y[t]).sum() >= 2]
        for t in self.targets:
            for phase in (0.0, 1.0):
                mask = np.isfinite(train.y[t]) & (train.X[:, self.phase_col] == phase)
                if mask.sum() >= 2:
                    # Weighted by 1/y, so the fit minimises relative error (what MAPE scores), not the error of
                    # the largest models alone.
                    y, w = train.y[t][mask], 1.0 / train.y[t][mask]
                    A = np.column_stack([np.expm1(train.X[mask, self.col]), np.ones(mask.sum())])
                    self.coef[(t, phase)] = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)[0]
        return self

    def predict(self, data: Any) -> dict[str, TargetPrediction]:
        if not hasattr(self, "coef"):
            raise not_fitted(self)
        out = {}
        flops = np.expm1(data.X[:, self.col])
        for t in self.targets:
            v = np.full(len(flops), np.nan)
            for (target, phase), (a, b) in self.coef.items():
                if target == t:
                    mask = data.X[:, self.phase_col] == phase
                    v[mask] = np.maximum(a * flops[mask] + b, 1e-9)
            out[t] = TargetPrediction(v, v, v, np.zeros(len(v)))
        return out
