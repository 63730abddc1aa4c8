"""Graphs as GNN inputs, shared by the GNN learners (``graphsage``, ``gae_gnn``, ``gnn_llm``).

One row of a :class:`TrainingSet` becomes standardised node features (NODE_FEATURES at the row's batch), the
dataflow edges in both directions, the row's static features (a standardised subset of the tabular features, chosen
by name) and its targets in log space. Node matrices and edge tensors are cached per (arrays object, batch). The
training loop that batches them is :mod:`perfpredict.learning.gnn_ensemble_fit`; the layers, :mod:`.gnn_layers`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from perfpredict.core.errors import InvalidInputError
from perfpredict.predictors.features import (
    HARDWARE_FEATURES,
    NODE_FEATURES,
    PHYSICS_FEATURES,
    STATIC_ONLY_FEATURES,
    TABULAR_FEATURES,
    edge_index,
    node_matrix,
)

if TYPE_CHECKING:
    import torch

    from perfpredict.predictors.cost_arrays import CostArrays
    from perfpredict.predictors.feature_rows import TrainingSet


STATIC_FEATURES = tuple(STATIC_ONLY_FEATURES + HARDWARE_FEATURES + PHYSICS_FEATURES)
STATIC_INDEX = np.array([TABULAR_FEATURES.index(n) for n in STATIC_FEATURES])
_IS_GPU = TABULAR_FEATURES.index("is_gpu")


def schema_extra() -> dict[str, Any]:
    """What the GNN artifacts depend on beyond the tabular schema (goes into the feature-schema hash)."""
    return {"node": list(NODE_FEATURES), "static": list(STATIC_FEATURES), "edges": "both-directions"}


# ---------------------------------------------------------------------------------------------------------------
# Graph tensors, cached per (arrays object, batch): the rows of one batch sweep share their CostArrays object.


class _GraphCache:
    """Bounded LRU of node matrices and edge tensors. Values keep their CostArrays alive, so ids are never reused."""

    def __init__(self, max_bytes: int = 512 << 20) -> None:
        self.max_bytes = max_bytes
        self.nodes: OrderedDict[tuple[int, float, str], tuple[Any, np.ndarray]] = OrderedDict()
        self.edges: OrderedDict[int, tuple[Any, torch.Tensor]] = OrderedDict()
        self.bytes = 0

    def node_matrix(self, arrays: CostArrays, batch: float, kind: str) -> np.ndarray:
        key = (id(arrays), float(batch), kind)
        hit = self.nodes.get(key)
        if hit is not None and hit[0] is arrays:
            self.nodes.move_to_end(key)
            return hit[1]
        mat = node_matrix(arrays, float(batch), kind)
        self.nodes[key] = (arrays, mat)
        self.bytes += mat.nbytes
        while self.bytes > self.max_bytes and len(self.nodes) > 1:
            _, (_, old) = self.nodes.popitem(last=False)
            self.bytes -= old.nbytes
        return mat

    def edge_index(self, arrays: CostArrays) -> torch.Tensor:
        import torch

        hit = self.edges.get(id(arrays))
        if hit is not None and hit[0] is arrays:
            self.edges.move_to_end(id(arrays))
            return hit[1]
        ei = edge_index(arrays.graph)
        both = np.concatenate([ei, ei[::-1]], axis=1) if ei.size else ei
        tensor = torch.from_numpy(np.ascontiguousarray(both))
        self.edges[id(arrays)] = (arrays, tensor)
        while len(self.edges) > 20_000:
            self.edges.popitem(last=False)
        return tensor


GRAPHS = _GraphCache()


def row_keys(ts: TrainingSet) -> list[tuple[Any, float, str]]:
    """(arrays, batch, device kind) of each row."""
    if not ts.arrays or len(ts.arrays) != len(ts.rows):
        raise InvalidInputError(
            "the GNN predictors need the rows' graphs (TrainingSet.arrays); build the set with "
            "load_training_set or single_row_set"
        )
    kinds = np.where(ts.X[:, _IS_GPU] > 0.5, "gpu", "cpu")
    return [
        (a, float(r.get("batch_size") or a.graph.batch_size or 1), str(k)) for a, r, k in zip(ts.arrays, ts.rows, kinds)
    ]


def unique_keys(keys: Sequence[tuple[Any, float, str]]) -> tuple[list[tuple[Any, float, str]], np.ndarray]:
    """Distinct (arrays, batch, kind) keys in first-seen order, and each row's index into them."""
    seen: dict[tuple[int, float, str], int] = {}
    uniq, inverse = [], []
    for arrays, batch, kind in keys:
        k = (id(arrays), batch, kind)
        if k not in seen:
            seen[k] = len(uniq)
            uniq.append((arrays, batch, kind))
        inverse.append(seen[k])
    return uniq, np.asarray(inverse, dtype=np.int64)


def row_graphs(ts: TrainingSet) -> tuple[list[tuple[Any, float, str]], np.ndarray]:
    """The distinct graphs (arrays, batch, device kind) of a set's rows in first-seen order, and each row's index
    into them: rows that share a graph (one model at several settings) featurise it once."""
    return unique_keys(row_keys(ts))


def node_matrices(graphs: Sequence[tuple[Any, float, str]]) -> Iterator[np.ndarray]:
    """Each graph's node features before standardising, one at a time (the cache bounds what is held)."""
    return (GRAPHS.node_matrix(arrays, batch, kind) for arrays, batch, kind in graphs)


def static_columns(ts: TrainingSet) -> np.ndarray:
    """The rows' static features before standardising: the tabular columns STATIC_FEATURES names."""
    return ts.X[:, STATIC_INDEX]


# ---------------------------------------------------------------------------------------------------------------
# Normalisation


class Standardizer:
    """Per-column mean and std (std 1 where a column is constant); stored in the artifact as JSON."""

    def __init__(self, mean: np.ndarray, std: np.ndarray) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)
        self.std = np.asarray(std, dtype=np.float64)

    @classmethod
    def fit(cls, matrices: Sequence[np.ndarray], weights: Sequence[float] | None = None) -> Standardizer:
        weights = list(weights) if weights is not None else [1.0] * len(matrices)
        dim = matrices[0].shape[1]
        n, s, ss = 0.0, np.zeros(dim), np.zeros(dim)
        for m, w in zip(matrices, weights):
            m = np.nan_to_num(np.asarray(m, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
            n += w * len(m)
            s += w * m.sum(axis=0)
            ss += w * (m * m).sum(axis=0)
        mean = s / max(n, 1.0)
        std = np.sqrt(np.maximum(ss / max(n, 1.0) - mean * mean, 0.0))
        return cls(mean, np.where(std > 1e-6, std, 1.0))

    def __call__(self, m: np.ndarray) -> np.ndarray:
        out = (np.asarray(m, dtype=np.float64) - self.mean) / self.std
        return np.nan_to_num(np.clip(out, -50.0, 50.0), nan=0.0).astype(np.float32)

    def to_json(self) -> dict[str, list[float]]:
        return {"mean": [float(v) for v in self.mean], "std": [float(v) for v in self.std]}

    @classmethod
    def from_json(cls, d: dict[str, list[float]]) -> Standardizer:
        return cls(np.array(d["mean"]), np.array(d["std"]))


def slog(x: torch.Tensor) -> torch.Tensor:
    """Signed log compression of sum-pooled vectors (their scale grows with the node count)."""
    import torch

    return torch.sign(x) * torch.log1p(torch.abs(x))


def log_targets(ts: TrainingSet, targets: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """[rows, 2T] log targets (columns t*2: log y, t*2+1: log y - log analytical), and log analytical [rows, T]."""
    ys, base = [], []
    for t in targets:
        y = np.asarray(ts.y[t], dtype=np.float64)
        a = np.asarray(ts.analytical(t), dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ly = np.where(y > 0, np.log(y), np.nan)
            la = np.where((a > 0) & np.isfinite(a), np.log(a), np.nan)
        ys += [ly, ly - la]
        base.append(la)
    return np.column_stack(ys), np.column_stack(base)
