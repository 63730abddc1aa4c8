"""``graphsage``: a DIPPM-style GNN.

Three SAGEConv blocks (LayerNorm, ReLU) over the op graph, mean- and sum-pooled, concatenated with the static
graph features, then three fully connected layers that predict every target jointly in log space (Huber loss,
unmeasured targets masked). Each target is learned both as log y and as the residual over the analytical roofline;
a holdout split of the training set picks the better head per target (recorded in the artifact's config). A small
deep ensemble gives the interval and the pooled graph embedding gives the OOD score; see
:mod:`perfpredict.predictors.gnn_data`. torch and torch_geometric load only when the learner is used.
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


def _sage_net(n_node: int, n_static: int, hidden: int, n_out: int) -> nn.Module:
    import torch
    from torch_geometric.nn import global_add_pool, global_mean_pool

    from perfpredict.predictors.gnn_data import slog
    from perfpredict.predictors.gnn_layers import pooled_sage_net

    def mean_and_sum(x: torch.Tensor, b: Any) -> torch.Tensor:
        return torch.cat(
            [global_mean_pool(x, b.batch, b.num_graphs), slog(global_add_pool(x, b.batch, b.num_graphs))], dim=1
        )

    return pooled_sage_net(
        [n_node, hidden, hidden, hidden], [2 * hidden + n_static, 2 * hidden, hidden, n_out], mean_and_sum
    )


class GraphSAGEModel(GNNEnsembleModel):
    """DIPPM-style GraphSAGE as served; keyword arguments override DEFAULTS (its learner: ``learning.graphsage_learner``)."""

    name: ClassVar[str] = "graphsage"
    version: ClassVar[str] = "1"
    schema: ClassVar[str] = schema_hash(TABULAR_FEATURES, {"model": "graphsage", **schema_extra()})
    DEFAULTS: ClassVar[dict[str, Any]] = {**GNNEnsembleModel.DEFAULTS, "hidden": 64, "members": 3, "loss": "huber"}

    def make_net(self, n_out: int) -> nn.Module:
        return _sage_net(len(NODE_FEATURES), len(STATIC_FEATURES), self.hp["hidden"], n_out)


def make_predictor() -> LearnedPredictor:
    return LearnedPredictor(GraphSAGEModel)
