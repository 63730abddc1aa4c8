"""Fitting the per-op efficiency model (``predictors/op_efficiency.py``) on measured op rows.

The target is ``log(bound / measured device seconds)``, the share of the roofline bound an op reached, clipped to
[EFFICIENCY_FLOOR, max_efficiency]; on a CPU the host profile's dispatch cost is taken off each row first.
``benchmarks/op_efficiency.py`` scores it out of fold and writes the shipped artifact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfpredict.learning.learner import FitsOneModel, Params
from perfpredict.learning.op_row_shapes import row_shape
from perfpredict.predictors.op_efficiency import (
    EFFICIENCY_FLOOR,
    PARAMS,
    EfficiencyModel,
    OpShape,
    bound_s,
    features,
    max_efficiency,
)


class OpEfficiencyLearner(Params, FitsOneModel[EfficiencyModel]):
    """Fits an :class:`EfficiencyModel` (``model``); ``params`` are the xgboost regressor's (default PARAMS)."""

    name = "op_efficiency"

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        self.params = params
        self.model_: EfficiencyModel | None = None

    def fit(self, X: np.ndarray, log_eff: np.ndarray) -> OpEfficiencyLearner:
        from xgboost import XGBRegressor

        params = dict(PARAMS if self.params is None else self.params)
        self.model_ = EfficiencyModel(XGBRegressor(**params).fit(X, log_eff), params)
        return self


def training_arrays(
    rows: Sequence[dict[str, Any]],
    device: Any,
    dispatch_us: dict[str, float] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[OpShape]]:
    """(X, log efficiency, measured device seconds, shapes) of ok op rows on ``device``. ``dispatch_us`` (a CPU
    host profile's) is taken off each row's time first."""
    X, y, measured, shapes = [], [], [], []
    for r in rows:
        if r.get("status") != "ok" or not r.get("device_ms"):
            continue
        shape = row_shape(r)
        seconds = r["device_ms"] * 1e-3
        if dispatch_us is not None:
            seconds = max(seconds - dispatch_us.get(shape.kind, 0.0) * 1e-6, 0.1 * seconds)
        b = bound_s(shape, device)[0]
        X.append(features(shape, device))
        y.append(math.log(min(max(b / seconds, EFFICIENCY_FLOOR), max_efficiency(shape, device))))
        measured.append(seconds)
        shapes.append(shape)
    return np.array(X), np.array(y), np.array(measured), shapes
