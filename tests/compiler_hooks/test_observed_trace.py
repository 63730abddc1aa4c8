"""Training graphs describe the step a GPU runs: fused attention, a backward on meta tensors too, user results intact.

See perfpredict/compiler_hooks/observed_trace.py for why the observed copy differs from the host's decomposition.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
import torch

import perfpredict
from perfpredict.graph_report import report_for_graph
from perfpredict.predictors.cost_arrays import CostArrays
from perfpredict.predictors.features import graph_size_without_views
from perfpredict.predictors.memory_model import cpu_math_attention_bytes

F = torch.nn.functional


class ConvClassifier(torch.nn.Module):
    """A plain-torch model whose loss is the graph's only output, as the zoo's VGG and DenseNet heads are."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
        )
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x, labels):
        return F.cross_entropy(self.head(self.body(x)), labels)


class Attention(torch.nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, dropout: float = 0.1):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x, labels=None):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        y = self.out(y.transpose(1, 2).reshape(b, s, d))
        return y if labels is None else F.cross_entropy(y.reshape(b * s, d), labels)


def _kinds(graph):
    return collections.Counter((n.op, n.target) for n in graph.nodes if not n.is_view)


def test_meta_training_graph_has_the_backward_a_cpu_trace_has():
    graphs = {}
    for device in ("cpu", "meta"):
        torch.manual_seed(0)
        model = ConvClassifier().to(device)
        x, labels = torch.randn(4, 3, 16, 16, device=device), torch.zeros(4, dtype=torch.long, device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graphs[device] = perfpredict.featurize(model, (x,), phase="training", example_kwargs={"labels": labels})
    assert ("conv", "convolution_backward") in _kinds(graphs["meta"])
    assert ("loss", "nll_loss_backward") in _kinds(graphs["meta"])
    assert _kinds(graphs["meta"]) == _kinds(graphs["cpu"])
    assert graphs["meta"].total_flops == graphs["cpu"].total_flops


def test_attention_with_dropout_is_traced_fused_and_keeps_no_scores():
    b, s, heads = 2, 64, 4
    graph = perfpredict.featurize(Attention(heads=heads), (torch.randn(b, s, 32),), phase="training")
    forward, backward = [n for n in graph.nodes if n.op == "attention"]
    assert forward.attrs["dropout_p"] == 0.1 and not forward.attrs.get("backward")
    assert backward.attrs["backward"]
    assert not [n for n in graph.nodes if n.op == "softmax"]
    assert not [t for n in graph.nodes for t in n.outputs if t.shape[-2:] == (s, s)]  # no [.., seq, seq] tensor


def test_cpu_memory_adds_back_the_math_path_scores_a_cpu_keeps():
    b, s, heads = 2, 64, 4
    graph = perfpredict.featurize(Attention(heads=heads), (torch.randn(b, s, 32),), phase="training")
    out_bytes = CostArrays.from_graph(graph).at(np.array([b]))[2]
    extra = cpu_math_attention_bytes(graph, out_bytes)
    # softmax output and dropped probabilities (fp32) plus the dropout mask (1 byte) per score
    assert extra.sum() == b * heads * s * s * (4 + 4 + 1)
    cpu = report_for_graph(graph, device="cpu", predictor="analytical").memory.activations_peak_bytes
    gpu = report_for_graph(graph, device="H100-SXM", predictor="analytical").memory.activations_peak_bytes
    # the scores are live from the forward to the backward attention; the peak may fall where part of what
    # the GPU holds at its own peak is already freed, so the CPU's peak grows by at most the scores
    assert 0.5 * extra.sum() < cpu - gpu <= extra.sum()


def test_no_dropout_means_no_math_path_on_cpu_either():
    graph = perfpredict.featurize(Attention(dropout=0.0), (torch.randn(2, 64, 32),), phase="training")
    out_bytes = CostArrays.from_graph(graph).at(np.array([2]))[2]
    assert cpu_math_attention_bytes(graph, out_bytes).sum() == 0


def test_training_compile_with_attention_and_cross_entropy_leaves_results_alone():
    torch.manual_seed(0)
    model, x = Attention(dropout=0.0), torch.randn(2, 16, 32)
    labels = torch.randint(0, 32, (32,))
    ref = model(x, labels)
    ref.backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    got = torch.compile(model, backend="perfpredict", options={"phase": "training"})(x, labels)
    got.backward()
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    for p, want in zip(model.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, want, rtol=0, atol=0)


def test_views_are_contracted_out_of_node_and_edge_counts():
    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.fc(x))

    class Reshaped(Plain):
        def forward(self, x):
            return torch.relu(self.fc(x).view(2, 4, 8).transpose(0, 1).reshape(8, 8))

    x = torch.randn(8, 8)
    plain, reshaped = perfpredict.featurize(Plain(), (x,)), perfpredict.featurize(Reshaped(), (x,))
    assert len(reshaped.nodes) > len(plain.nodes)
    assert graph_size_without_views(reshaped) == graph_size_without_views(plain) == (2, 1)


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((), {}),
        ((), {"ignore_index": 1, "reduction": "sum"}),
        ((None, None, -100, None, "none"), {}),  # F.nll_loss's five, positionally
        ((None, None, -100, None, "mean", 0.1), {}),  # label smoothing, positionally: torch's own path
        ((), {"label_smoothing": 0.2, "reduction": "sum"}),
    ],
)
def test_cross_entropy_replacement_matches_torch(args, kwargs):
    import torch.nn.functional as F

    from perfpredict.compiler_hooks.observed_trace import _cross_entropy

    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    target = torch.tensor([0, 1, 2, 3, 1, 0])
    torch.testing.assert_close(
        _cross_entropy(logits, target, *args, **kwargs), F.cross_entropy(logits, target, *args, **kwargs)
    )
