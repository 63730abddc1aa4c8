"""Tabular features read the right things off a real captured graph: depthwise convolutions, time shares, backward."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import perfpredict
from perfpredict.hardware.devices import get_device
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.cost_arrays import CostArrays
from perfpredict.predictors.features import COUNTED_KINDS, TABULAR_FEATURES, depthwise_conv_mask, tabular_matrix


class GrayDepthwise(torch.nn.Module):
    """A one-channel stem (weight [8, 1, 3, 3], not depthwise), one depthwise and one pointwise convolution."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pointwise = torch.nn.Conv2d(8, 16, 1)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        y = self.pointwise(torch.relu(self.depthwise(self.stem(x))))
        return self.head(y.mean(dim=(2, 3)))


def _graph(phase: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return perfpredict.featurize(GrayDepthwise(), (torch.randn(2, 1, 16, 16),), phase=phase)


def _row(graph, phase: str) -> dict[str, float]:
    X = tabular_matrix(CostArrays.from_graph(graph), get_device("H100-SXM"), RunConfig(phase=phase), np.array([2.0]))
    return dict(zip(TABULAR_FEATURES, X[0]))


def test_only_the_grouped_convolution_is_depthwise():
    graph = _graph("inference")
    convs = [n for n in graph.nodes if n.op == "conv"]
    assert len(convs) == 3
    marked = [n for n, dw in zip(graph.nodes, depthwise_conv_mask(graph)) if dw]
    assert marked == [convs[1]]  # the stem has one input channel; the pointwise conv has 8 per group
    row = _row(graph, "inference")
    assert row["count_depthwise_conv"] == 1
    # 2 x 8 x 16 x 16 outputs x 9 taps x 2 FLOP, against the graph's total
    assert row["flop_share_depthwise_conv"] == pytest.approx(2 * 8 * 256 * 9 * 2 / graph.total_flops, rel=0.05)
    assert row["count_backward"] == 0


def test_time_shares_split_the_analytical_time_by_op_kind():
    graph = _graph("training")
    row = _row(graph, "training")
    shares = np.array([row[f"time_share_{k}"] for k in COUNTED_KINDS])
    assert shares.min() >= 0 and shares.sum() == pytest.approx(1.0)
    assert row["time_share_conv"] > row["time_share_matmul"] > 0  # three convolutions and their backward
    assert row["time_share_attention"] == 0  # no attention in a CNN
    assert row["count_backward"] == sum(bool(n.attrs.get("backward")) for n in graph.nodes) > 0
