"""Fitting the GNN ensembles (``graphsage``, ``gae_gnn``, ``gnn_llm``): the seeded training loop, the holdout
that picks each target's head and calibrates its interval, the OOD reference, and few-shot adaptation.

What it fits is the answering half, :class:`~perfpredict.predictors.gnn_ensemble.GNNEnsembleModel` (and its
subclasses); a learner here is that model plus ``fit``. Members differ only in their seed; a fixed thread count
makes the float sums, hence the artifact, reproducible on any host.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from perfpredict.core.errors import InvalidInputError
from perfpredict.predictors.gnn_data import Standardizer, log_targets, node_matrices, row_graphs, static_columns
from perfpredict.predictors.gnn_ensemble import MODES, GNNEnsembleModel, torch_threads
from perfpredict.predictors.ood import nearest_distance
from perfpredict.progress import Progress, in_fits

if TYPE_CHECKING:
    import torch
    from torch import nn

    from perfpredict.predictors.feature_rows import TrainingSet


class GNNEnsembleLearner(GNNEnsembleModel):
    """A :class:`GNNEnsembleModel` that fits: ``fit(train, targets, seed)`` trains the members, the heads' choice,
    the interval calibration and the OOD reference. Subclasses may pretrain frozen parts (:meth:`pretrain`) and split
    the optimiser's groups (:meth:`param_groups`)."""

    def pretrain(self, keys: list[tuple[Any, float, str]], seed: int) -> None:
        """Phase-1 training before the supervised members (GAE); the default does nothing."""

    def param_groups(self, net: nn.Module) -> list[dict[str, Any]]:
        """Optimiser groups, each with its peak ``lr`` (one group at ``hp['lr']`` unless a subclass splits them)."""
        return [{"params": [p for p in net.parameters() if p.requires_grad], "lr": self.hp["lr"]}]

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
        for _ in Progress(f"{self.name} training", epochs, unit="epochs", enabled=in_fits()).track(range(epochs)):
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
        with torch_threads(self.hp["threads"]):
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

    def fit(self, train: TrainingSet, targets: Sequence[str], seed: int = 0) -> GNNEnsembleLearner:
        # NB: a fixed thread count makes the float sums, hence the artifact, reproducible on any host; one thread
        # is also the fastest on a busy 2-core machine (oversubscribed OpenMP threads spin).
        with torch_threads(self.hp["threads"]):
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
        uniq, inverse = row_graphs(train)
        counts = np.bincount(inverse, minlength=len(uniq))
        self.node_std = Standardizer.fit(list(node_matrices(uniq)), counts)
        self.static_std = Standardizer.fit([static_columns(train)])
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
