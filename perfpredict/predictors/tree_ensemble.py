"""A trained xgboost regressor evaluated with numpy alone, so a prediction never imports xgboost.

``import xgboost`` costs about as much as the rest of a cached CLI answer, and the device-time model is read on
every GPU question. The trees are read once, at training time, from xgboost's own JSON model format into flat
arrays (saved as ``.npz``), and evaluated level by level for every (row, tree) pair at once; the result equals
``booster.predict`` to float32 precision (a test checks it). Only what the shipped regressors use is supported:
numerical splits, squared-error objective, one target; a model using more is refused at load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.core.errors import ArtifactError


@dataclass(frozen=True)
class TreeEnsemble:
    """Trees as [tree, node] arrays: a node's feature (-1 at a leaf), threshold, children and leaf value."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    default_left: np.ndarray
    value: np.ndarray
    base_score: float
    depth: int

    @classmethod
    def from_xgboost(cls, regressor: Any) -> TreeEnsemble:
        """The trees of a fitted ``xgboost.XGBRegressor`` (or ``Booster``)."""
        booster = regressor.get_booster() if hasattr(regressor, "get_booster") else regressor
        return cls.from_json_text(bytes(booster.save_raw(raw_format="json")).decode(), "the fitted model")

    @classmethod
    def from_json_text(cls, text: str, where: str) -> TreeEnsemble:
        """Read xgboost's JSON model format (``save_model("model.json")``)."""
        learner = json.loads(text)["learner"]
        if learner["objective"]["name"] != "reg:squarederror" or learner["learner_model_param"]["num_class"] != "0":
            raise ArtifactError(f"{where}: only squared-error regressors are read without xgboost")
        trees = learner["gradient_booster"]["model"]["trees"]
        if any(t.get("categories_nodes") for t in trees):
            raise ArtifactError(f"{where}: categorical splits are not supported; retrain with numerical features")
        width = max(len(t["left_children"]) for t in trees)

        def stack(key: str, dtype, fill) -> np.ndarray:
            out = np.full((len(trees), width), fill, dtype=dtype)
            for i, t in enumerate(trees):
                out[i, : len(t[key])] = t[key]
            return out

        left = stack("left_children", np.int32, -1)
        leaf = left < 0
        split = stack("split_conditions", np.float32, 0.0)
        return cls(
            feature=np.where(leaf, -1, stack("split_indices", np.int32, 0)),
            threshold=np.where(leaf, np.float32(0), split),
            left=np.where(leaf, np.arange(width)[None, :], left).astype(np.int32),
            right=np.where(leaf, np.arange(width)[None, :], stack("right_children", np.int32, -1)).astype(np.int32),
            default_left=stack("default_left", bool, False),
            value=np.where(leaf, split, np.float32(0)),
            base_score=_base_score(learner["learner_model_param"]["base_score"]),
            depth=_depth(trees),
        )

    def save(self, path: Path) -> None:
        """Write the arrays (``.npz``, compressed; node indices as int16 where they fit)."""
        small = np.int16 if self.feature.shape[1] < 2**15 else np.int32
        np.savez_compressed(
            path,
            feature=self.feature.astype(small),
            threshold=self.threshold,
            left=self.left.astype(small),
            right=self.right.astype(small),
            default_left=self.default_left,
            value=self.value,
            meta=np.array([self.base_score, self.depth], dtype=np.float64),
        )

    @classmethod
    def load(cls, path: Path) -> TreeEnsemble:
        with np.load(path) as f:
            meta = f["meta"]
            return cls(
                feature=f["feature"].astype(np.int32),
                threshold=f["threshold"],
                left=f["left"].astype(np.int32),
                right=f["right"].astype(np.int32),
                default_left=f["default_left"],
                value=f["value"],
                base_score=float(meta[0]),
                depth=int(meta[1]),
            )

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The ensemble's output per row of ``X`` (features as float32, as xgboost reads them)."""
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or not len(X):
            return np.zeros(len(X))
        trees, width = self.feature.shape
        feature, threshold = self.feature.ravel(), self.threshold.ravel()
        left, right, default_left = self.left.ravel(), self.right.ravel(), self.default_left.ravel()
        base = (np.arange(trees, dtype=np.int64) * width)[None, :]
        flat = np.broadcast_to(base, (len(X), trees)).copy()  # [row, tree] -> its node's flat index
        row_offset = (np.arange(len(X), dtype=np.int64) * X.shape[1])[:, None]
        values = X.ravel()
        for _ in range(self.depth):
            f = feature.take(flat)
            x = values.take(row_offset + np.maximum(f, 0))
            go_left = np.where(np.isnan(x), default_left.take(flat), x < threshold.take(flat))
            flat = base + np.where(go_left, left.take(flat), right.take(flat))
        return self.value.ravel().take(flat).sum(axis=1, dtype=np.float64) + self.base_score


def _base_score(text: str) -> float:
    """xgboost 3 writes ``"[1.68E0]"`` (one per target), xgboost 2 ``"1.68"``."""
    value = json.loads(text) if text.startswith("[") else float(text)
    return float(value[0] if isinstance(value, list) else value)


def _depth(trees: list[dict]) -> int:
    """The deepest leaf of any tree (levels to walk)."""
    deepest = 0
    for t in trees:
        level = {0: 0}
        for i, (lo, hi) in enumerate(zip(t["left_children"], t["right_children"])):
            if lo >= 0:
                level[lo] = level[hi] = level[i] + 1
        deepest = max(deepest, max(level.values()))
    return deepest
