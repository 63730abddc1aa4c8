"""The GIN graph encoder of ``gnn_llm``: 5 GINConv layers (each an MLP Linear-BatchNorm-ReLU-Linear), batch norm
and ReLU between layers, mean-pooled. Its stage-1 GraphMAE pretraining is ``perfpredict.learning.graphmae``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())


def _gin_mlp(a: int, b: int) -> nn.Module:
    from torch import nn

    return nn.Sequential(nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(), nn.Linear(b, b))


def gin_encoder(n_in: int, hidden: int, layers: int = 5) -> nn.Module:
    import torch
    from torch import nn
    from torch_geometric.nn import GINConv

    class GINEncoder(nn.Module):
        """Node embeddings (``forward``) and their mean over each graph (``pool``)."""

        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.ModuleList([GINConv(_gin_mlp(n_in if i == 0 else hidden, hidden)) for i in range(layers)])
            self.norms = nn.ModuleList([nn.BatchNorm1d(hidden) for _ in range(layers)])

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            for conv, norm in zip(self.convs, self.norms):
                x = torch.relu(norm(conv(x, edge_index)))
            return x

        def pool(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, n_graphs: int) -> torch.Tensor:
            from torch_geometric.nn import global_mean_pool

            return global_mean_pool(self(x, edge_index), batch, n_graphs)

    return GINEncoder()
