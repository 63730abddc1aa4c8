"""The table every learned model reads: feature rows, targets and row identities.

Training builds it from measured rows (``perfpredict.learning.training_data``); answering builds a one-row table
from the user's graph (:func:`single_row_set`), so a learner has one input path. It lives on the answering side
because a prediction needs it and must not import the training code (which traces models and reads datasets).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from perfpredict.predictors.cost_arrays import CostArrays
from perfpredict.predictors.features import TABULAR_FEATURES, tabular_matrix

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.hardware.devices import Device
    from perfpredict.predictors.base import RunConfig

# What the predictors learn, in natural units. Latency is the median of the timed runs (the collector also keeps
# the minimum); energy is per sample so batch sizes compare.
TARGETS = ("latency_ms", "peak_memory_bytes", "energy_per_sample_j", "avg_power_w")


@dataclass
class TrainingSet:
    """Feature rows (TABULAR_FEATURES), targets and identities for every usable measured row."""

    X: np.ndarray
    y: dict[str, np.ndarray]
    families: np.ndarray
    keys: list[str]
    group_ids: np.ndarray  # rows of one architecture share an id (for grouped splits)
    devices: list[str]
    rows: list[dict[str, Any]]
    arrays: list[CostArrays] = field(default_factory=list)  # per row (shared objects within a group)
    data_hash: str = ""
    problems: list[str] = field(default_factory=list)

    def analytical(self, target: str) -> np.ndarray:
        """The analytical predictor's value of ``target`` per row (from the physics feature columns)."""
        col = {name: i for i, name in enumerate(TABULAR_FEATURES)}
        if target == "latency_ms":
            return np.exp(self.X[:, col["log_analytical_latency"]]) * 1e3
        if target == "peak_memory_bytes":
            return np.expm1(self.X[:, col["log_analytical_memory"]])
        if target == "avg_power_w":
            return self.X[:, col["analytical_power_w"]]
        power = self.X[:, col["analytical_power_w"]]
        return power * np.exp(self.X[:, col["log_analytical_latency"]]) / np.maximum(self.X[:, col["batch"]], 1)

    def subset(self, index: np.ndarray) -> TrainingSet:
        index = np.asarray(index)
        return TrainingSet(
            self.X[index],
            {k: v[index] for k, v in self.y.items()},
            self.families[index],
            [self.keys[i] for i in index],
            self.group_ids[index],
            self.devices,
            [self.rows[i] for i in index],
            [self.arrays[i] for i in index] if self.arrays else [],
            self.data_hash,
            self.problems,
        )


def single_row_set(graph: OpGraph, device: Device, config: RunConfig) -> TrainingSet:
    """A user's graph as a one-row TrainingSet (no targets), so learners need one input path only."""
    arrays = CostArrays.from_graph(graph)
    X = tabular_matrix(arrays, device, config, np.array([graph.batch_size]))
    row = {"batch_size": graph.batch_size, "family": graph.name or "model", "key": graph.structure_hash()}
    return TrainingSet(
        X=X,
        y={t: np.array([np.nan]) for t in TARGETS},
        families=np.array([row["family"]]),
        keys=[row["key"]],
        group_ids=np.array([0]),
        devices=[device.name],
        rows=[row],
        arrays=[arrays],
    )
