"""A small named-module stack (4 linear+norm blocks and a head) for report tests: its per-op, block and op-kind
tables have something to group. Not a test file: tests/test_render.py and tests/test_breakdown_sums.py import it."""

from __future__ import annotations

import torch


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = torch.nn.Linear(64, 64)
        self.norm = torch.nn.LayerNorm(64)

    def forward(self, x):
        return self.norm(self.mlp(x).relu())


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(4))
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)
