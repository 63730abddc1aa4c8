"""Activation checkpointing (issue 46 item 1): each policy keeps what it should for the backward, the recompute is a
line of its own in the report, and checkpointing the user put in the model is honoured by both captures."""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch")

from parallel_models import TinyDecoder, capture  # noqa: E402

from perfpredict.compiler_hooks import recompute  # noqa: E402
from perfpredict.core.errors import InvalidInputError  # noqa: E402
from perfpredict.core.report import PerfReport  # noqa: E402
from perfpredict.graph_report import report_for_graph  # noqa: E402
from perfpredict.parallel import memory as mem  # noqa: E402
from perfpredict.parallel.structure import backward_start  # noqa: E402

# TinyDecoder: batch 3, seq 10, hidden 48, 8 query heads and 4 key/value heads of 6, MLP 80, float32 (4 bytes).
B, S, H, F = 3, 10, 48, 80
INPUT = B * S * H * 4  # a layer's input: 5,760 bytes
# What one layer's forward saves without checkpointing (test_parallel_stage_memory.py counts it op by op): the two
# RMSNorms' rsqrt (120 each) and normalised inputs (5,760 each), q (5,760), k and v repeated to 8 heads (5,760
# each), the attention's output (5,760), log-sum-exp (3,072) and seed and offset (16), the residual (5,760), and the
# MLP's gate, silu, up and product (9,600 each)
LAYER_NONE = 82_048
# Selective checkpointing saves the outputs of the matmuls and the attention: q 5,760, k and v 30 x 24 x 4 = 2,880
# each, the attention's 5,760 + 3,072 + 16, o 5,760, gate and up 9,600 each, down 5,760
LAYER_SELECTIVE = 5_760 + 2 * 2_880 + (5_760 + 3_072 + 16) + 5_760 + 2 * 9_600 + 5_760  # = 51,088


@pytest.fixture(scope="module")
def step():
    torch.manual_seed(0)
    return capture(TinyDecoder(), "training")


def _saved(graph):
    return mem.saved_activation_bytes(graph, backward_start(graph))


@pytest.mark.parametrize(
    "policy, expected",
    [
        # two layers; the first layer's input is the graph's own (not made by the step), the second's is 5,760
        ("none", 2 * LAYER_NONE + INPUT),
        # full: only the second layer's input stays; everything else is recomputed
        ("full", INPUT),
        # every 2nd block, counting from 1: layer 1 is checkpointed, layer 0 keeps all it saves
        ("every-2", LAYER_NONE + INPUT),
        ("selective-op", 2 * LAYER_SELECTIVE + INPUT),
    ],
)
def test_each_policy_saves_what_a_hand_count_says(step, policy, expected):
    assert LAYER_SELECTIVE == 51_088
    assert _saved(recompute.apply(step, policy)) == expected


def test_the_recompute_is_a_line_of_its_own_in_every_format(step):
    from perfpredict.render.html import render_html
    from perfpredict.render.text import render_text

    none = report_for_graph(step, predictor="analytical")
    full = report_for_graph(step, predictor="analytical", activation_checkpointing="full")
    c = full.recompute
    assert none.recompute is None and (c.policy, c.regions) == ("full", 2)
    # the roofline adds each recomputed op's time and nothing else: the latency grows by exactly the recompute's
    assert full.latency_ms.value - none.latency_ms.value == pytest.approx(c.time_ms, rel=1e-9)
    # the recompute is each layer's forward up to the last tensor its backward reads (non-reentrant checkpoint's
    # early stop): all of it but the down projection (2 x 30 x 80 x 48 = 230,400 FLOPs), whose input is that last
    # tensor, and the closing residual add (3 x 10 x 48 = 1,440), which only the next layer reads
    forward = sum(n.flops for n in step.nodes[: backward_start(step)] if n.module_path.startswith("layers."))
    assert c.flops == forward - 2 * (230_400 + 1_440)
    assert full.graph.total_flops == none.graph.total_flops + c.flops  # hardware FLOPs include the recompute
    assert "of which recompute" in render_text(full) and "of which recompute" in render_html(full)
    back = PerfReport.from_dict(json.loads(full.to_json()))
    assert back.recompute == c


def test_policies_that_cannot_work_are_refused_in_one_line(step):
    with pytest.raises(InvalidInputError, match="every-<k>"):
        recompute.parse_policy("sometimes")
    inference = capture(TinyDecoder(), "inference")
    with pytest.raises(InvalidInputError, match="training step"):
        recompute.apply(inference, "full")
    flat = step.with_run(nodes=tuple(n.__class__(**{**n.__dict__, "module_path": "head"}) for n in step.nodes))
    with pytest.raises(InvalidInputError, match="repeated blocks"):
        recompute.apply(flat, "full")
    assert recompute.apply(recompute.apply(step, "full"), "selective-op") == recompute.apply(step, "full")


class _CheckpointedLayers(TinyDecoder):
    """TinyDecoder whose layers run under ``torch.utils.checkpoint``, as a user writes it."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        for layer in self.layers:
            x = checkpoint(layer, x, self.enter, self.leave, use_reentrant=self.reentrant)
        return x


@pytest.mark.parametrize("reentrant", [False, True])
def test_the_models_own_checkpoint_regions_are_honoured_by_the_meta_capture(reentrant):
    torch.manual_seed(0)
    graph = capture(_CheckpointedLayers(reentrant), "training")
    assert _saved(recompute.apply(graph, None)) == INPUT  # as full checkpointing of both layers
    assert _saved(recompute.apply(graph, "none")) == 2 * LAYER_NONE + INPUT  # "none" overrides the model


@pytest.fixture(scope="module")
def gpt2_steps():
    """A two-layer GPT-2 with HF's gradient checkpointing on, captured on meta tensors and by dynamo."""
    transformers = pytest.importorskip("transformers")
    from perfpredict.api import featurize

    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
    model = transformers.GPT2LMHeadModel(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecation notice for the old name
        model.gradient_checkpointing_enable()
    x = torch.zeros(2, 32, dtype=torch.long)
    kwargs = {"use_cache": False}
    return {
        how: featurize(model, (x,), example_kwargs=kwargs, phase="training", capture=how) for how in ("meta", "dynamo")
    }


def test_hf_gradient_checkpointing_is_honoured_under_both_captures(gpt2_steps):
    # issue 46: gradient_checkpointing_enable() was silently ignored by the meta capture (the same memory and FLOPs)
    # and raised the memory under dynamo (its checkpointed bodies ran attention unfused)
    for graph in gpt2_steps.values():
        plain = report_for_graph(graph, predictor="analytical", activation_checkpointing="none")
        report = report_for_graph(graph, predictor="analytical")
        assert plain.recompute is None
        assert (report.recompute.policy, report.recompute.regions) == ("model", 2)
        assert report.graph.total_flops == plain.graph.total_flops + report.recompute.flops
        assert _saved(recompute.apply(graph, None)) < _saved(graph) / 3
        assert report.peak_memory_bytes.value < plain.peak_memory_bytes.value
    meta, dynamo = (recompute.apply(gpt2_steps[how], None) for how in ("meta", "dynamo"))
    assert (len(meta.nodes), meta.total_flops, _saved(meta)) == (len(dynamo.nodes), dynamo.total_flops, _saved(dynamo))
