"""The seeded ensemble training loop of the GNN learners (``graphsage``, ``gae_gnn``, ``gnn_llm``): batching graphs
as PyG data, the two heads per target, intervals and the out-of-distribution score. The graphs themselves are built
by :mod:`perfpredict.predictors.gnn_data`.

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
import logging
import math
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perfpredict.core.errors import ArtifactError, InvalidInputError, NotFittedError
from perfpredict.predictors.features import NODE_FEATURES
from perfpredict.predictors.gnn_data import (
    GRAPHS,
    STATIC_FEATURES,
    STATIC_INDEX,
    Standardizer,
    log_targets,
    row_keys,
    unique_keys,
)
from perfpredict.predictors.learned import TargetPrediction
from perfpredict.predictors.ood import nearest_distance

if TYPE_CHECKING:
    import torch
    from torch import nn

    from perfpredict.predictors.artifacts import Manifest
    from perfpredict.predictors.feature_rows import TrainingSet


logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

MODES = ("log", "residual")
WEIGHTS_FILE = "weights.safetensors"
OOD_FILE = "ood.safetensors"
CONFIG_FILE = "config.json"


class GNNEnsembleLearner:
    """Fit/predict/serialise for a GNN whose ``forward(batch) -> (out [B, 2T], embedding [B, E])``.

    Subclasses set ``name``, ``version``, ``schema``, ``DEFAULTS`` and implement :meth:`make_net`; they may add
    per-row inputs (:meth:`extra_row_inputs`) and frozen parts (:meth:`pretrain`, :meth:`extra_state`).
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

    def pretrain(self, keys: list[tuple[Any, float, str]], seed: int) -> None:
        """Phase-1 training before the supervised members (GAE); the default does nothing."""

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

    def param_groups(self, net: nn.Module) -> list[dict[str, Any]]:
        """Optimiser groups, each with its peak ``lr`` (one group at ``hp['lr']`` unless a subclass splits them)."""
        return [{"params": [p for p in net.parameters() if p.requires_grad], "lr": self.hp["lr"]}]

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
        uniq, inverse = unique_keys(row_keys(ts))
        xs = [torch.from_numpy(self.node_std(GRAPHS.node_matrix(a, b, k))) for a, b, k in uniq]
        eis = [GRAPHS.edge_index(a) for a, _, _ in uniq]
        extra = self.extra_row_inputs(uniq, xs, eis)
        per_row = self.row_inputs(ts)
        static = torch.from_numpy(self.static_std(ts.X[:, STATIC_INDEX]))
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

    # ---- training
    def _epochs(self, n_rows: int) -> int:
        steps_per_epoch = max(1, math.ceil(n_rows / self.hp["batch_size"]))
        return int(
            min(self.hp["max_epochs"], max(self.hp["min_epochs"], math.ceil(self.hp["target_steps"] / steps_per_epoch)))
        )

    def _loss(self, pred: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from torch import nn

        if not mask.any():
            return pred.sum() * 0.0
        if self.hp["loss"] == "huber":
            err = nn.functional.huber_loss(pred[mask], y[mask], delta=1.0, reduction="mean")
        else:
            err = nn.functional.mse_loss(pred[mask], y[mask], reduction="mean")
        return err

    def _train_member(self, data: list[Any], seed: int) -> tuple[nn.Module, list[float]]:
        import torch
        from torch_geometric.loader import DataLoader

        torch.manual_seed(seed)
        net = self.make_net(2 * len(self.targets))
        epochs = self._epochs(len(data))
        loader = DataLoader(
            data, batch_size=self.hp["batch_size"], shuffle=True, generator=torch.Generator().manual_seed(seed)
        )
        losses = self._run_epochs(net, loader, epochs, self.param_groups(net))
        net.eval()
        return net, losses

    def _run_epochs(self, net: nn.Module, loader: Any, epochs: int, groups: list[dict[str, Any]]) -> list[float]:
        """AdamW with a one-cycle schedule over ``epochs`` passes of ``loader``; the mean loss of each epoch."""
        import torch
        from torch import nn

        opt = torch.optim.AdamW(groups, weight_decay=self.hp["weight_decay"])
        total = max(1, epochs * len(loader))
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=[g["lr"] for g in groups], total_steps=total, pct_start=0.15
        )
        losses = []
        net.train()
        for _ in range(epochs):
            run, count = 0.0, 0
            for batch in loader:
                opt.zero_grad()
                out, _ = net(batch)
                loss = self._loss(out, batch.y, batch.mask)
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 5.0)
                opt.step()
                sched.step()
                run += float(loss.detach()) * batch.num_graphs
                count += batch.num_graphs
            losses.append(run / max(count, 1))
        return losses

    def fine_tune(
        self, shots: TrainingSet, *, steps: int = 100, lr_scale: float = 3.0, seed: int = 0
    ) -> dict[str, Any]:
        """Few-shot adaptation: continue training every member on ``shots`` (a new device's or family's rows) for
        about ``steps`` optimiser steps at ``lr_scale`` times the training learning rates (a new device mostly
        shifts the targets, which a few rows move only at a raised rate). Normalisation, heads and calibration
        stay those of the base training; the shots join the OOD reference set."""
        import torch
        from torch_geometric.loader import DataLoader

        if not self.members:
            raise InvalidInputError(f"{self.name!r} is not trained; fit it or load an artifact before adapting")
        t0 = time.monotonic()
        with _threads(self.hp["threads"]):
            y, _ = log_targets(shots, self.targets)
            if not np.isfinite(y).any():
                raise InvalidInputError(
                    f"none of the {len(shots.keys)} adaptation rows has a measured target among {self.targets!r}"
                )
            data = self._data(shots, y)
            batch = max(1, min(self.hp["batch_size"], len(data)))
            epochs = max(1, math.ceil(steps / math.ceil(len(data) / batch)))
            losses = []
            for k, net in enumerate(self.members):
                loader = DataLoader(
                    data, batch_size=batch, shuffle=True, generator=torch.Generator().manual_seed(seed * 1000 + k)
                )
                groups = [{**g, "lr": g["lr"] * lr_scale} for g in self.param_groups(net)]
                losses.append(self._run_epochs(net, loader, epochs, groups))
                net.eval()
            _, emb = self._forward(self.members[:1], data)
        assert self.ood_std is not None
        self.ood_emb = np.concatenate([self.ood_emb, self.ood_std(emb)]).astype(np.float32)
        return {"rows": len(data), "epochs": epochs, "losses": losses, "seconds": time.monotonic() - t0}

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

    def fit(self, train: TrainingSet, targets: Sequence[str], seed: int = 0) -> GNNEnsembleLearner:
        # NB: a fixed thread count makes the float sums, hence the artifact, reproducible on any host; one thread
        # is also the fastest on a busy 2-core machine (oversubscribed OpenMP threads spin).
        with _threads(self.hp["threads"]):
            self._fit(train, targets, seed)
        return self

    def _fit(self, train: TrainingSet, targets: Sequence[str], seed: int) -> None:
        t0 = time.monotonic()
        unknown = [t for t in targets if t not in train.y]
        if unknown:
            raise InvalidInputError(f"unknown targets {unknown!r}; valid: {', '.join(train.y)}")
        y_all, _ = log_targets(train, list(targets))
        keep = [i for i, t in enumerate(targets) if np.isfinite(y_all[:, 2 * i]).sum() >= 2]
        self.targets = [targets[i] for i in keep]
        if not self.targets:
            raise InvalidInputError(f"no target among {list(targets)!r} has at least 2 measured rows to learn from")
        y, _ = log_targets(train, self.targets)
        keys = row_keys(train)
        uniq, inverse = unique_keys(keys)
        counts = np.bincount(inverse, minlength=len(uniq))
        self.node_std = Standardizer.fit([GRAPHS.node_matrix(a, b, k) for a, b, k in uniq], counts)
        self.static_std = Standardizer.fit([train.X[:, STATIC_INDEX]])
        with np.errstate(invalid="ignore"):
            self.target_mean = np.array([np.nanmean(c) if np.isfinite(c).any() else 0.0 for c in y.T])
            sd = np.array([np.nanstd(c) if np.isfinite(c).sum() > 1 else 1.0 for c in y.T])
        self.target_std = np.where(sd > 1e-6, sd, 1.0)
        self.pretrain(uniq, seed)
        t_pre = time.monotonic()
        data = self._data(train, y)
        self._choose_modes(train, data, y, seed)
        t_sel = time.monotonic()
        self.members, losses = [], []
        for k in range(self.hp["members"]):
            net, hist = self._train_member(data, seed * 1000 + 17 * (k + 1))
            self.members.append(net)
            losses.append(hist)
        _, emb = self._forward(self.members[:1], data)
        self._fit_ood(emb, seed)
        t1 = time.monotonic()
        self.fit_info = {
            "rows": len(data),
            "epochs": self._epochs(len(data)),
            "member_losses": losses,
            "seconds": {"pretrain": t_pre - t0, "selection": t_sel - t_pre, "members": t1 - t_sel, "total": t1 - t0},
        }

    def _choose_modes(self, train: TrainingSet, data: list[Any], y: np.ndarray, seed: int) -> None:
        """Per target, the head (log or residual) with the lower holdout MAPE, and the holdout's log-error quantiles."""
        n = len(data)
        n_val = int(round(n * self.hp["holdout"]))
        _, base = log_targets(train, self.targets)
        self.modes = {t: ("residual" if np.isfinite(base[:, i]).all() else "log") for i, t in enumerate(self.targets)}
        self.calibration = {t: [-0.25, 0.25] for t in self.targets}  # NB: a guess, used only without a holdout
        self.holdout_mape = {}
        if n_val < self.hp["min_holdout_rows"] or n - n_val < 2:
            return
        perm = np.random.default_rng(seed).permutation(n)
        val, fit = np.sort(perm[:n_val]), np.sort(perm[n_val:])
        net, _ = self._train_member([data[i] for i in fit], seed * 1000 + 1)
        out, _ = self._forward([net], [data[i] for i in val])
        out = out[0]
        lo_q, hi_q = self.hp["interval_quantiles"]
        for i, t in enumerate(self.targets):
            ly = y[val, 2 * i]
            preds = {"log": out[:, 2 * i], "residual": out[:, 2 * i + 1] + base[val, i]}
            mape = {}
            for mode, p in preds.items():
                ok = np.isfinite(ly) & np.isfinite(p)
                mape[mode] = float(np.mean(np.abs(np.exp(p[ok] - ly[ok]) - 1.0)) * 100) if ok.any() else math.inf
            self.holdout_mape[t] = mape
            if not np.isfinite(base[:, i]).all():
                mape["residual"] = math.inf
            mode = min(MODES, key=lambda m: (mape[m], m != "residual"))
            self.modes[t] = mode
            err = ly - preds[mode]
            err = err[np.isfinite(err)]
            if len(err):
                self.calibration[t] = [min(float(np.quantile(err, lo_q)), 0.0), max(float(np.quantile(err, hi_q)), 0.0)]

    def _fit_ood(self, emb: np.ndarray, seed: int) -> None:
        cap = self.hp["ood_max_rows"]
        if len(emb) > cap:
            emb = emb[np.sort(np.random.default_rng(seed).choice(len(emb), cap, replace=False))]
        self.ood_std = Standardizer.fit([emb])
        z = self.ood_std(emb)
        self.ood_emb = z
        if len(z) < 2:
            self.ood_scale = 1.0
            return
        d = nearest_distance(z, z, exclude_self=True)
        pos = d[d > 1e-6]
        self.ood_scale = float(np.median(pos)) if len(pos) else 1.0

    # ---- prediction
    def predict(self, data: TrainingSet) -> dict[str, TargetPrediction]:
        if not self.members:
            raise NotFittedError(f"{self.name!r} is not trained; call fit() or load an artifact")
        with _threads(self.hp["threads"]):
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
    def from_files(cls, manifest: Manifest | None, files: dict[str, bytes]) -> GNNEnsembleLearner:
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
def _threads(n: int) -> Iterator[None]:
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
