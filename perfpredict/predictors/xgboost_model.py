"""XGBoost on tabular features, as served: one booster per target on log targets, read from its artifact.

The fitting (formulation and grid search, folds, the OOD reference) is ``perfpredict.learning.xgboost_learner``;
this half only loads what it wrote and predicts. Per target the artifact holds either a multi-quantile booster
(10th, 50th and 90th percentiles), on the log target or on its log ratio to the analytical prediction, or, for
the scaled physics, the training rows' log-ratio quantiles alone (no trees). The OOD score is the distance to the
nearest training row in standardised feature space, divided by the training rows' own median nearest-neighbour
distance.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np

from perfpredict.core.errors import NotFittedError, require
from perfpredict.predictors.features import STATIC_ONLY_FEATURES, TABULAR_FEATURES, schema_hash
from perfpredict.predictors.intervals import bracket
from perfpredict.predictors.learned import LearnedPredictor, TargetPrediction
from perfpredict.predictors.ood import nearest_distance

QUANTILES = (0.1, 0.5, 0.9)


class XGBoostModel:
    """A fitted xgboost predictor: per-target models, the formulation chosen for each, and the OOD reference."""

    name: ClassVar[str] = "xgboost"
    version: ClassVar[str] = "1"
    schema: ClassVar[str] = schema_hash(TABULAR_FEATURES)
    columns: ClassVar[tuple[str, ...]] = TABULAR_FEATURES

    def __init__(
        self,
        targets: list[str] | None = None,
        models: dict[str, Any] | None = None,
        choice: dict[str, dict[str, Any]] | None = None,
        reference: np.ndarray | None = None,
        scale: tuple[np.ndarray, np.ndarray] | None = None,
        nn_median: float = 1.0,
    ) -> None:
        self.targets = list(targets or [])
        self.models = dict(models or {})
        self.choice = dict(choice or {})
        self.reference = reference
        self.scale = scale
        self.nn_median = nn_median

    @classmethod
    def features(cls, data: Any) -> np.ndarray:
        """The columns of ``data.X`` this model reads."""
        index = [TABULAR_FEATURES.index(c) for c in cls.columns]
        return data.X[:, index]

    def ood(self, X: np.ndarray) -> np.ndarray:
        if self.reference is None or self.scale is None:
            return np.zeros(len(X))
        Z = np.nan_to_num((X - self.scale[0]) / self.scale[1])
        return nearest_distance(Z, self.reference) / self.nn_median

    def predict(self, data: Any) -> dict[str, TargetPrediction]:
        if not self.targets:
            raise NotFittedError(f"{self.name!r} has no trained targets: load a trained artifact")
        X = self.features(data)
        ood = self.ood(X)
        out = {}
        for target in self.targets:
            q = np.asarray(self.models[target].predict(X)).reshape(len(X), len(QUANTILES))
            offset = np.log(data.analytical(target)) if self.choice[target]["residual"] else 0.0
            low, mid, high = (np.exp(q[:, i] + offset) for i in range(3))
            # quantile models trained apart can cross (the median beyond q90): that end mirrors the other one
            out[target] = TargetPrediction(mid, *bracket(mid, low, high), ood)
        return out

    def to_files(self) -> dict[str, bytes]:
        from safetensors.numpy import save

        files = {}
        for target, model in self.models.items():
            if isinstance(model, ScaledPhysics):
                files[f"{target}.json"] = json.dumps({"log_ratio_quantiles": model.log_ratios.tolist()}).encode()
            else:
                files[f"{target}.ubj"] = bytes(model.booster.save_raw(raw_format="ubj"))
        # C order on purpose: safetensors writes the buffer as it lies, and a column-indexed feature matrix is
        # often Fortran-ordered, which read back as C scrambled the reference (artifacts before this fix)
        files["ood.safetensors"] = save(
            {
                "reference": np.ascontiguousarray(self.reference, dtype=np.float32),
                "mean": np.ascontiguousarray(self.scale[0]),
                "std": np.ascontiguousarray(self.scale[1]),
            }
        )
        files["config.json"] = json.dumps(
            {
                "targets": self.targets,
                "choice": self.choice,
                "nn_median": self.nn_median,
                "columns": list(self.columns),
            },
            indent=1,
        ).encode()
        return files

    @classmethod
    def from_files(cls, manifest: Any, files: dict[str, bytes]) -> XGBoostModel:
        xgb = require("xgboost", "gnn")
        from safetensors.numpy import load

        config = json.loads(files["config.json"])
        models: dict[str, Any] = {}
        for target in config["targets"]:
            if config["choice"][target]["params"] is None:
                ratios = json.loads(files[f"{target}.json"])["log_ratio_quantiles"]
                models[target] = ScaledPhysics(np.asarray(ratios, dtype=float))
                continue
            booster = xgb.Booster()
            booster.load_model(bytearray(files[f"{target}.ubj"]))
            models[target] = BoosterModel(booster)
        arrays = load(files["ood.safetensors"])
        return cls(
            config["targets"],
            models,
            config["choice"],
            arrays["reference"],
            (arrays["mean"], arrays["std"]),
            config["nn_median"],
        )


class XGBoostStaticModel(XGBoostModel):
    """The research's boosting baseline: static model features only (no hardware, no physics)."""

    name: ClassVar[str] = "xgboost_static"
    schema: ClassVar[str] = schema_hash(STATIC_ONLY_FEATURES)
    columns: ClassVar[tuple[str, ...]] = tuple(STATIC_ONLY_FEATURES)


class BoosterModel:
    """A loaded Booster with the sklearn-style predict the model uses."""

    def __init__(self, booster: Any) -> None:
        self.booster = booster

    def predict(self, X: np.ndarray) -> np.ndarray:
        xgb = require("xgboost", "gnn")
        return self.booster.predict(xgb.DMatrix(X))


class ScaledPhysics:
    """No trees: the analytical prediction times the training rows' ratio quantiles (the median is the point)."""

    def __init__(self, log_ratios: np.ndarray) -> None:
        self.log_ratios = np.asarray(log_ratios, dtype=float)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.tile(self.log_ratios, (len(X), 1))


def make_predictor() -> LearnedPredictor:
    return LearnedPredictor(XGBoostModel)
