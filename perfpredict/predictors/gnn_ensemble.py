"""The GNN ensembles as served (``graphsage``, ``gae_gnn``, ``gnn_llm``): batching graphs as PyG data, the two
heads per target, intervals and the out-of-distribution score, loaded from an artifact. The seeded training loop
that fits them is :mod:`perfpredict.learning.gnn_ensemble_fit`; the graphs themselves are built by
:mod:`perfpredict.predictors.gnn_data`.

One row of a :class:`TrainingSet` becomes one PyG ``Data``: standardised node features (NODE_FEATURES at the
row's batch), the dataflow edges in both directions, the row's static features (a standardised subset of the
tabular features, chosen by name) and its targets in log space. Each target is learned twice by two heads of the
same network: ``log`` (log y) and ``residual`` (log y - log analytical). A holdout split of the training set picks,
per target, the head that predicts better and calibrates the interval; the final members train on all rows.

Intervals: the ensemble's min..max (members differ only in their seed), widened by the 5th and 95th percentiles of
the holdout's log errors and by ``sqrt(max(1, ood))``. OOD: the distance of a row's pooled graph embedding (first
member, standardised) to its nearest training embedding, divided by the median nearest-neighbour distance among
the training rows (1 is typical, above :data:`perfpredict.predictors.learned.OOD_WARN_ABOVE` warns).

torch and torch_geometric are imported inside the functions that use them, so importing this module (and
registering the predictors) stays cheap.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perfpredict.core.errors import ArtifactError, InvalidInputError, NotFittedError
from perfpredict.predictors.features import NODE_FEATURES
from perfpredict.predictors.gnn_data import (
    GRAPHS,
    STATIC_FEATURES,
    Standardizer,
    log_targets,
    node_matrices,
    row_graphs,
    static_columns,
)
from perfpredict.predictors.learned import TargetPrediction
from perfpredict.predictors.ood import nearest_distance

if TYPE_CHECKING:
    import torch
    from torch import nn

    from perfpredict.predictors.artifacts import Manifest
    from perfpredict.predictors.feature_rows import TrainingSet


MODES = ("log", "residual")
WEIGHTS_FILE = "weights.safetensors"
OOD_FILE = "ood.safetensors"
CONFIG_FILE = "config.json"


class GNNEnsembleModel:
    """Predict/serialise for a GNN whose ``forward(batch) -> (out [B, 2T], embedding [B, E])``.

    Subclasses set ``name``, ``version``, ``schema``, ``DEFAULTS`` and implement :meth:`make_net`; they may add
    per-row inputs (:meth:`extra_row_inputs`) and frozen parts (:meth:`extra_state`). Their learners
    (``perfpredict.learning``) add the fitting.
    """

    name: ClassVar[str]
    version: ClassVar[str]
    schema: ClassVar[str]
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "hidden": 64,
        "members": 3,
        "batch_size": 32,
        "lr": 3e-3,
        "weight_decay": 1e-2,
        "target_steps": 200,
        "min_epochs": 8,
        "max_epochs": 100,
        "holdout": 0.2,
        "min_holdout_rows": 8,
        "loss": "huber",
        "interval_quantiles": [0.05, 0.95],
        "ood_max_rows": 5000,
        "threads": 1,
    }

    def __init__(self, **hyper: Any) -> None:
        unknown = set(hyper) - set(self.DEFAULTS)
        if unknown:
            raise InvalidInputError(
                f"unknown hyper-parameters {sorted(unknown)!r} for {self.name!r}; "
                f"valid: {', '.join(sorted(self.DEFAULTS))}"
            )
        self.hp: dict[str, Any] = {**self.DEFAULTS, **hyper}
        self.targets: list[str] = []
        self.modes: dict[str, str] = {}
        self.members: list[nn.Module] = []
        self.node_std: Standardizer | None = None
        self.static_std: Standardizer | None = None
        self.target_mean = np.zeros(0)
        self.target_std = np.ones(0)
        self.calibration: dict[str, list[float]] = {}
        self.holdout_mape: dict[str, dict[str, float]] = {}
        self.ood_emb = np.zeros((0, 0), dtype=np.float32)
        self.ood_std: Standardizer | None = None
        self.ood_scale = 1.0
        self.fit_info: dict[str, Any] = {}  # timings and losses; not in the artifact (it would not reproduce)

    # ---- hooks for subclasses
    def make_net(self, n_out: int) -> nn.Module:
        raise NotImplementedError

    def extra_row_inputs(
        self, uniq: list[tuple[Any, float, str]], xs: list[torch.Tensor], eis: list[torch.Tensor]
    ) -> dict[str, list[torch.Tensor]]:
        """Extra [1, d] tensors per distinct graph, attached to each row's Data (e.g. frozen embeddings)."""
        return {}

    def row_inputs(self, ts: TrainingSet) -> dict[str, torch.Tensor]:
        """Extra per-row tensors [rows, ...] (e.g. a row's prompt tokens), attached to each row's Data."""
        return {}

    def member_state(self, net: nn.Module) -> dict[str, torch.Tensor]:
        """What of a trained member the artifact stores (all of it, unless a frozen part ships elsewhere)."""
        return dict(net.state_dict())

    def load_member(self, net: nn.Module, state: dict[str, torch.Tensor]) -> None:
        net.load_state_dict(state, strict=True)

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {}

    def load_extra_state(self, state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
        pass

    def extra_config(self) -> dict[str, Any]:
        return {}

    # ---- data
    def _data(self, ts: TrainingSet, y: np.ndarray | None) -> list[Any]:
        import torch
        from torch_geometric.data import Data

        assert self.node_std is not None and self.static_std is not None
        uniq, inverse = row_graphs(ts)
        xs = [torch.from_numpy(self.node_std(m)) for m in node_matrices(uniq)]
        eis = [GRAPHS.edge_index(a) for a, _, _ in uniq]
        extra = self.extra_row_inputs(uniq, xs, eis)
        per_row = self.row_inputs(ts)
        static = torch.from_numpy(self.static_std(static_columns(ts)))
        n_out = 2 * len(self.targets)
        if y is not None:
            ystd = ((y - self.target_mean) / self.target_std).astype(np.float32)
            mask = np.isfinite(ystd)
            yt, mt = torch.from_numpy(np.nan_to_num(ystd, nan=0.0)), torch.from_numpy(mask)
        else:
            yt, mt = torch.zeros(len(inverse), n_out), torch.zeros(len(inverse), n_out, dtype=torch.bool)
        out = []
        for i, u in enumerate(inverse):
            d = Data(x=xs[u], edge_index=eis[u], static=static[i : i + 1], y=yt[i : i + 1], mask=mt[i : i + 1])
            for k, v in extra.items():
                d[k] = v[u]
            for k, v in per_row.items():
                d[k] = v[i : i + 1]
            out.append(d)
        return out

    def _forward(self, nets: list[nn.Module], data: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Members' outputs [members, rows, 2T] (destandardised log space) and the first member's embeddings."""
        import torch

        with torch.no_grad():
            return self._forward_nograd(nets, data)

    def _forward_nograd(self, nets: list[nn.Module], data: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        from torch_geometric.loader import DataLoader

        outs, embs = [], []
        for j, net in enumerate(nets):
            net.eval()
            chunks, e = [], []
            for batch in DataLoader(data, batch_size=64, shuffle=False):
                o, emb = net(batch)
                chunks.append(o.double().numpy())
                if j == 0:
                    e.append(emb.double().numpy())
            outs.append(np.concatenate(chunks) * self.target_std + self.target_mean)
            if j == 0:
                embs = e
        return np.stack(outs), np.concatenate(embs)

    def get_params(self) -> dict[str, Any]:
        """The hyper-parameters (every key of DEFAULTS): ``type(self)(**get_params())`` is an unfitted copy."""
        return dict(self.hp)

    # ---- prediction
    def predict(self, data: TrainingSet) -> dict[str, TargetPrediction]:
        if not self.members:
            raise NotFittedError(f"{self.name!r} is not trained; call fit() or load an artifact")
        with torch_threads(self.hp["threads"]):
            rows = self._data(data, None)
            out, emb = self._forward(self.members, rows)
        _, base = log_targets(data, self.targets)
        ood = self.ood(emb)
        widen = np.sqrt(np.maximum(1.0, ood))
        result = {}
        for i, t in enumerate(self.targets):
            col = 2 * i + (self.modes[t] == "residual")
            offset = base[:, i] if self.modes[t] == "residual" else 0.0
            members = out[:, :, col] + offset  # [members, rows]
            mid = members.mean(axis=0)
            lo_c, hi_c = self.calibration[t]
            low = members.min(axis=0) + lo_c * widen
            high = members.max(axis=0) + hi_c * widen
            value = np.exp(mid)
            result[t] = TargetPrediction(
                value=value, low=np.minimum(np.exp(low), value), high=np.maximum(np.exp(high), value), ood=ood.copy()
            )
        return result

    def ood(self, emb: np.ndarray) -> np.ndarray:
        if self.ood_std is None or not len(self.ood_emb):
            return np.zeros(len(emb))
        return nearest_distance(self.ood_std(emb), self.ood_emb) / max(self.ood_scale, 1e-6)

    # ---- artifacts
    def _config(self) -> dict[str, Any]:
        assert self.node_std is not None and self.static_std is not None and self.ood_std is not None
        return {
            "predictor": self.name,
            "version": self.version,
            "hyper": self.hp,
            "targets": self.targets,
            "modes": self.modes,
            "calibration": self.calibration,
            "holdout_mape": self.holdout_mape,
            "node_features": list(NODE_FEATURES),
            "static_features": list(STATIC_FEATURES),
            "node_std": self.node_std.to_json(),
            "static_std": self.static_std.to_json(),
            "target_mean": [float(v) for v in self.target_mean],
            "target_std": [float(v) for v in self.target_std],
            "ood_std": self.ood_std.to_json(),
            "ood_scale": self.ood_scale,
            **self.extra_config(),
        }

    def to_files(self) -> dict[str, bytes]:
        import torch
        from safetensors.torch import save

        if not self.members:
            raise NotFittedError(f"{self.name!r} is not trained; nothing to save")
        state = {
            f"member{k}.{n}": v.detach().contiguous()
            for k, m in enumerate(self.members)
            for n, v in self.member_state(m).items()
        }
        state.update(self.extra_state())
        config = json.dumps(_jsonable(self._config()), sort_keys=True, indent=1).encode()
        return {
            WEIGHTS_FILE: save(state),
            OOD_FILE: save({"embeddings": torch.from_numpy(self.ood_emb.copy())}),
            CONFIG_FILE: config,
        }

    @classmethod
    def from_files(cls, manifest: Manifest | None, files: dict[str, bytes]) -> GNNEnsembleModel:
        from safetensors.torch import load

        try:
            config = json.loads(files[CONFIG_FILE])
            state = load(files[WEIGHTS_FILE])
            ood = load(files[OOD_FILE])["embeddings"].numpy()
        except (KeyError, ValueError) as err:
            raise ArtifactError(
                f"{cls.name!r} artifact is incomplete or damaged ({err}); retrain it with "
                f"`perfpredict train --predictor {cls.name}`"
            ) from err
        if (
            config.get("predictor") != cls.name
            or config.get("node_features") != list(NODE_FEATURES)
            or config.get("static_features") != list(STATIC_FEATURES)
        ):
            raise ArtifactError(
                f"artifact was written by {config.get('predictor')!r} with other features than this "
                f"{cls.name!r} computes; retrain it with `perfpredict train --predictor {cls.name}`"
            )
        self = cls(**config["hyper"])
        self.targets = list(config["targets"])
        self.modes = dict(config["modes"])
        self.calibration = {k: list(v) for k, v in config["calibration"].items()}
        self.holdout_mape = config.get("holdout_mape", {})
        self.node_std = Standardizer.from_json(config["node_std"])
        self.static_std = Standardizer.from_json(config["static_std"])
        self.target_mean, self.target_std = np.array(config["target_mean"]), np.array(config["target_std"])
        self.ood_std, self.ood_scale, self.ood_emb = Standardizer.from_json(config["ood_std"]), config["ood_scale"], ood
        self.load_extra_state(state, config)
        for k in range(self.hp["members"]):
            net = self.make_net(2 * len(self.targets))
            prefix = f"member{k}."
            self.load_member(net, {n[len(prefix) :]: v for n, v in state.items() if n.startswith(prefix)})
            net.eval()
            self.members.append(net)
        return self


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (np.floating, np.integer)):
        return _jsonable(v.item())
    return v
