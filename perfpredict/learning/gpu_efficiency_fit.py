"""Fitting the GPU device-time model (``predictors/gpu_efficiency.py``): per-GPU levels, then shape trees.

Per class and GPU the level is the median log efficiency of its larger ops; the trees (xgboost, read back into a
numpy :class:`~perfpredict.predictors.tree_ensemble.TreeEnsemble` so a prediction never imports xgboost) learn
what the levels leave, on every GPU's rows at once. The rows come from ``gpu_training_rows``;
``benchmarks/gpu_op_efficiency.py --save`` fits and writes the shipped artifact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfpredict.learning.learner import FitsOneModel, Params
from perfpredict.predictors.gpu_efficiency import LEVEL_BOUND_S, LEVELLED, PARAMS, GpuEfficiencyModel
from perfpredict.predictors.tree_ensemble import TreeEnsemble


class GpuEfficiencyLearner(Params, FitsOneModel[GpuEfficiencyModel]):
    """Fits a :class:`GpuEfficiencyModel` (``model_``); ``params`` are the xgboost regressor's (default PARAMS)."""

    name = "gpu_efficiency"

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        self.params = params
        self.model_: GpuEfficiencyModel | None = None

    def fit(
        self,
        X: np.ndarray,
        log_eff: np.ndarray,
        classes: Sequence[str],
        devices: Sequence[str],
        bounds_s: np.ndarray,
        weight: np.ndarray | None = None,
    ) -> GpuEfficiencyLearner:
        """Levels from the rows, then the trees on what the levels leave."""
        from xgboost import XGBRegressor

        params = dict(PARAMS if self.params is None else self.params)
        levels = fit_levels(log_eff, classes, devices, bounds_s)
        offset = np.array([levels.get(c, {}).get(d, 0.0) for c, d in zip(classes, devices)])
        fitted = XGBRegressor(**params).fit(X, log_eff - offset, sample_weight=weight)
        self.model_ = GpuEfficiencyModel(TreeEnsemble.from_xgboost(fitted), levels, params=params)
        return self


def fit_levels(
    log_eff: np.ndarray, classes: Sequence[str], devices: Sequence[str], bounds_s: np.ndarray
) -> dict[str, dict[str, float]]:
    """Per class and GPU: the median log efficiency of its ops at least LEVEL_BOUND_S long at the bound (of all its
    ops in the class where fewer than 30 are that long)."""
    classes, devices = np.asarray(classes), np.asarray(devices)
    levels: dict[str, dict[str, float]] = {}
    for cls in np.unique(classes):
        if cls not in LEVELLED:
            continue
        for name in np.unique(devices[classes == cls]):
            mine = (classes == cls) & (devices == name)
            long = mine & (bounds_s >= LEVEL_BOUND_S)
            levels.setdefault(str(cls), {})[str(name)] = float(np.median(log_eff[long if long.sum() >= 30 else mine]))
    return levels
