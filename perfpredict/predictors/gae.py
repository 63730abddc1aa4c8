"""``gae_gnn``: a TraPPM-style semi-supervised GNN.

Phase 1 pretrains a graph autoencoder on an unlabelled corpus of op graphs: a 4-layer SAGEConv encoder (LayerNorm,
ReLU, dropout) and the inner-product decoder sigmoid(z_i . z_j), trained with binary cross-entropy on the real
edges and as many negatively sampled (within-graph) node pairs. The corpus is every distinct (graph, batch) of the
training rows (their labels unused), plus, when ``corpus_extra`` > 0, that many graphs regenerated from the
committed spec corpus (:mod:`perfpredict.profiling.corpus`; tracing costs 1-5 s per graph on a 2-core host, so the
default is 0; the size used is recorded in the artifact's config). The encoder is then frozen.

Phase 2 trains a supervised GNN (2 SAGEConv layers, sum-pooled) whose pooled output is concatenated with the
sum-pooled frozen GAE embedding and the static features, then FC layers; MSE in log space. Heads, holdout choice,
intervals and OOD are shared with ``graphsage`` (:mod:`perfpredict.predictors.gnn_data`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from perfpredict.predictors.features import TABULAR_FEATURES, schema_hash
from perfpredict.predictors.gnn_data import NODE_FEATURES, STATIC_FEATURES, schema_extra
from perfpredict.predictors.gnn_ensemble import GNNEnsembleModel
from perfpredict.predictors.learned import LearnedPredictor

if TYPE_CHECKING:
    import torch
    from torch import nn


def _encoder(n_node: int, hidden: int, layers: int, dropout: float) -> nn.Module:
    from torch import nn

    from perfpredict.predictors.gnn_layers import run_sage, sage_stack

    class GAEEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = sage_stack([n_node] + [hidden] * layers, last_act=False, dropout=dropout)

        def forward(self, x: Any, edge_index: Any) -> Any:
            return run_sage(self.blocks, x, edge_index, self.training)

    return GAEEncoder()


def _supervised_net(n_node: int, n_static: int, hidden: int, gae_dim: int, n_out: int) -> nn.Module:
    import torch
    from torch_geometric.nn import global_add_pool

    from perfpredict.predictors.gnn_data import slog
    from perfpredict.predictors.gnn_layers import pooled_sage_net

    def sum_and_gae(x: torch.Tensor, b: Any) -> torch.Tensor:  # b.gae: the frozen GAE's sum-pooled embedding
        return torch.cat([slog(global_add_pool(x, b.batch, b.num_graphs)), b.gae], dim=1)

    return pooled_sage_net(
        [n_node, hidden, hidden], [hidden + gae_dim + n_static, 2 * hidden, hidden, n_out], sum_and_gae
    )


class GAEGNNModel(GNNEnsembleModel):
    """TraPPM-style GAE + supervised GNN as served; keyword arguments override DEFAULTS (fitted by ``learning``)."""

    name: ClassVar[str] = "gae_gnn"
    version: ClassVar[str] = "1"
    schema: ClassVar[str] = schema_hash(TABULAR_FEATURES, {"model": "gae_gnn", **schema_extra()})
    DEFAULTS: ClassVar[dict[str, Any]] = {
        **GNNEnsembleModel.DEFAULTS,
        "hidden": 64,
        "members": 3,
        "loss": "mse",
        "gae_hidden": 64,
        "gae_layers": 4,
        "gae_dropout": 0.2,
        "gae_epochs": 20,
        "gae_batch": 16,
        "gae_lr": 5e-3,
        "gae_max_graphs": 2000,
        "corpus_extra": 0,
        "corpus_path": None,
    }

    def __init__(self, **hyper: Any) -> None:
        super().__init__(**hyper)
        self.encoder: nn.Module | None = None
        self.corpus_info: dict[str, Any] = {}

    def make_net(self, n_out: int) -> nn.Module:
        return _supervised_net(
            len(NODE_FEATURES), len(STATIC_FEATURES), self.hp["hidden"], self.hp["gae_hidden"], n_out
        )

    def _new_encoder(self) -> nn.Module:
        return _encoder(len(NODE_FEATURES), self.hp["gae_hidden"], self.hp["gae_layers"], self.hp["gae_dropout"])

    # ---- phase 2 inputs: the frozen, sum-pooled GAE embedding of each distinct graph
    def extra_row_inputs(
        self, uniq: list[tuple[Any, float, str]], xs: list[torch.Tensor], eis: list[torch.Tensor]
    ) -> dict[str, list[torch.Tensor]]:
        import torch

        from perfpredict.predictors.gnn_data import slog

        assert self.encoder is not None
        self.encoder.eval()
        out = []
        with torch.no_grad():
            for x, ei in zip(xs, eis):
                out.append(slog(self.encoder(x, ei).sum(dim=0, keepdim=True)))
        return {"gae": out}

    def extra_state(self) -> dict[str, torch.Tensor]:
        assert self.encoder is not None
        return {f"gae.{k}": v.detach().contiguous() for k, v in self.encoder.state_dict().items()}

    def load_extra_state(self, state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
        enc = self._new_encoder()
        enc.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("gae.")}, strict=True)
        enc.eval()
        self.encoder = enc
        self.corpus_info = dict(config.get("gae_corpus", {}))

    def extra_config(self) -> dict[str, Any]:
        return {"gae_corpus": self.corpus_info}


def make_predictor() -> LearnedPredictor:
    return LearnedPredictor(GAEGNNModel)
