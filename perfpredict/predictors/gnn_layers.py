"""The GNN layers the learners share: GraphSAGE blocks, a plain MLP and the pooled SAGE network built from them.
torch loads only when one is built."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn


def sage_stack(dims: Sequence[int], last_act: bool = True, dropout: float = 0.0) -> nn.ModuleList:
    """SAGEConv -> LayerNorm -> ReLU blocks (the last block without norm/act when ``last_act`` is False)."""
    from torch import nn
    from torch_geometric.nn import SAGEConv

    blocks = nn.ModuleList()
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        last = i == len(dims) - 2
        blocks.append(
            nn.ModuleDict(
                {"conv": SAGEConv(a, b), "norm": nn.LayerNorm(b) if (last_act or not last) else nn.Identity()}
            )
        )
    blocks.dropout = dropout  # type: ignore[attr-defined]
    blocks.last_act = last_act  # type: ignore[attr-defined]
    return blocks


def run_sage(blocks: nn.ModuleList, x: torch.Tensor, edge_index: torch.Tensor, training: bool) -> torch.Tensor:
    import torch
    from torch import nn

    n = len(blocks)
    for i, block in enumerate(blocks):
        x = block["conv"](x, edge_index)
        if i < n - 1 or blocks.last_act:  # type: ignore[attr-defined]
            x = torch.relu(block["norm"](x))
            if blocks.dropout and training:  # type: ignore[attr-defined]
                x = nn.functional.dropout(x, p=blocks.dropout, training=True)  # type: ignore[attr-defined]
    return x


def mlp(dims: Sequence[int]) -> nn.Sequential:
    from torch import nn

    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def pooled_sage_net(
    node_dims: Sequence[int], head_dims: Sequence[int], pool: Callable[[torch.Tensor, Any], torch.Tensor]
) -> nn.Module:
    """SAGE blocks over the nodes, pooled per graph by ``pool(x, batch)`` into the graph's embedding, which is joined
    with the static features and mapped by an MLP head: ``forward(batch) -> (out, embedding)``, the network shape
    :class:`~perfpredict.predictors.gnn_ensemble.GNNEnsembleModel` serves (the embedding is its OOD space).
    ``graphsage`` and ``gae_gnn`` differ only in depth, widths and pooling. The parameters are ``blocks`` then
    ``head``, in that order: the shipped weights are keyed by those names and seeded in that order."""
    import torch
    from torch import nn

    class PooledSageNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = sage_stack(node_dims)
            self.head = mlp(head_dims)

        def forward(self, b: Any) -> tuple[torch.Tensor, torch.Tensor]:
            x = run_sage(self.blocks, b.x, b.edge_index, self.training)
            emb = pool(x, b)
            return self.head(torch.cat([emb, b.static], dim=1)), emb

    return PooledSageNet()
