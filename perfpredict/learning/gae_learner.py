"""Fitting ``gae_gnn``: phase 1 pretrains the graph autoencoder on the corpus, then the supervised members train.

The encoder (a SAGEConv stack with an inner-product decoder) learns on every distinct (graph, batch) of the
training rows, plus ``corpus_extra`` graphs regenerated from the committed spec corpus, with binary cross-entropy
on the real edges and as many negatively sampled node pairs; it is then frozen and its pooled embedding joins the
supervised network's inputs (:class:`~perfpredict.predictors.gae.GAEGNNModel`, the half that answers).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from perfpredict.learning.gnn_ensemble_fit import GNNEnsembleLearner
from perfpredict.predictors.gae import GAEGNNModel
from perfpredict.predictors.gnn_data import GRAPHS
from perfpredict.progress import Progress, in_fits

if TYPE_CHECKING:
    from torch import nn

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())


class GAEGNNLearner(GNNEnsembleLearner, GAEGNNModel):
    """TraPPM-style GAE pretraining + supervised GNN; keyword arguments override DEFAULTS."""

    def _corpus(self, keys: list[tuple[Any, float, str]]) -> list[tuple[Any, float, str]]:
        graphs = [k for k in keys if k[0].graph.edges]
        extra = int(self.hp["corpus_extra"] or 0)
        added = 0
        if extra > 0:
            from pathlib import Path

            from perfpredict.learning.training_data import GraphCache
            from perfpredict.predictors.cost_arrays import CostArrays
            from perfpredict.profiling import corpus

            path = Path(self.hp["corpus_path"] or corpus.DEFAULT_DIR / corpus.SPECS_FILE)
            kind = keys[0][2] if keys else "gpu"
            if not path.exists():
                logger.warning("perfpredict: graph corpus %s not found; pretraining on the training graphs only", path)
            else:
                cache = GraphCache()
                for spec in corpus.load_corpus_specs(path)[:extra]:
                    try:
                        arrays = CostArrays.from_graph(cache.graph(spec))
                    except Exception as err:  # noqa: BLE001 - an untraceable corpus graph is skipped, not fatal
                        logger.info("perfpredict: skipping corpus spec %s (%s)", spec.to_key()[:80], err)
                        continue
                    if arrays.graph.edges:
                        graphs.append((arrays, float(spec.batch), kind))
                        added += 1
        graphs = graphs[: self.hp["gae_max_graphs"]]
        self.corpus_info = {"graphs": len(graphs), "from_training_rows": len(graphs) - added, "from_corpus": added}
        return graphs

    def pretrain(self, keys: list[tuple[Any, float, str]], seed: int) -> None:
        import torch
        from torch_geometric.data import Data

        assert self.node_std is not None
        t0 = time.monotonic()
        graphs = self._corpus(keys)
        data = [
            Data(x=torch.from_numpy(self.node_std(GRAPHS.node_matrix(a, b, k))), edge_index=GRAPHS.edge_index(a))
            for a, b, k in graphs
        ]
        torch.manual_seed(seed * 1000 + 7)
        with _python_random_seeded(seed * 1000 + 13):
            self.encoder, losses = self._fit_encoder(data, seed)
        self.fit_info_gae = {"losses": losses, "seconds": time.monotonic() - t0, **self.corpus_info}

    def _fit_encoder(self, data: list[Any], seed: int) -> tuple[nn.Module, list[float]]:
        import torch
        from torch import nn
        from torch_geometric.loader import DataLoader
        from torch_geometric.utils import batched_negative_sampling

        enc = self._new_encoder()
        opt = torch.optim.AdamW(enc.parameters(), lr=self.hp["gae_lr"], weight_decay=1e-5)
        losses = []
        enc.train()
        epochs = self.hp["gae_epochs"] if data else 0
        for _ in Progress("GAE pretraining", epochs, unit="epochs", enabled=in_fits()).track(range(epochs)):
            run, count = 0.0, 0
            gen = torch.Generator().manual_seed(seed * 1000 + 11 + len(losses))
            for b in DataLoader(data, batch_size=self.hp["gae_batch"], shuffle=True, generator=gen):
                opt.zero_grad()
                z = enc(b.x, b.edge_index)
                neg = batched_negative_sampling(b.edge_index, b.batch)
                pos_logit = (z[b.edge_index[0]] * z[b.edge_index[1]]).sum(-1)
                neg_logit = (z[neg[0]] * z[neg[1]]).sum(-1)
                logits = torch.cat([pos_logit, neg_logit])
                labels = torch.cat([torch.ones_like(pos_logit), torch.zeros_like(neg_logit)])
                loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
                loss.backward()
                opt.step()
                run += float(loss.detach()) * b.num_graphs
                count += b.num_graphs
            losses.append(run / max(count, 1))
        enc.eval()
        for p in enc.parameters():
            p.requires_grad_(False)
        return enc, losses

    def fit(self, train: Any, targets: Any, seed: int = 0) -> GAEGNNLearner:
        super().fit(train, targets, seed)
        self.fit_info["gae"] = self.fit_info_gae
        return self


@contextlib.contextmanager
def _python_random_seeded(seed: int) -> Iterator[None]:
    """Seed Python's ``random`` for the block, then give the caller its own stream back.

    Why: torch_geometric's negative sampling draws from Python's ``random`` (``utils._negative_sampling.sample``),
    which torch's seed does not reach; unseeded, two runs of ``perfpredict train`` pretrained different encoders.
    """
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)
