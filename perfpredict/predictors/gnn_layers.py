"""The GNN layers the learners share: GraphSAGE blocks and a plain MLP. torch loads only when one is built."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

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
