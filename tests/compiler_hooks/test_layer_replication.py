"""A deep layer stack traced with two layers and copied is the same graph as the whole stack traced."""

from __future__ import annotations

import copy
import warnings

import pytest

from perfpredict.api import featurize
from perfpredict.compiler_hooks import hf_capture
from perfpredict.compiler_hooks import hf_frontend as hf
from perfpredict.compiler_hooks import layer_replication as lr
from perfpredict.hardware.devices import get_device
from perfpredict.predictors.analytical import AnalyticalPredictor
from perfpredict.predictors.base import RunConfig


def _both(model_id: str, phase: str, layers: int = 4):
    config = copy.deepcopy(hf.load_config(model_id))
    setattr(config, lr.layer_field(config), layers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, inputs, name = hf.model_from_hf(config, batch_size=2, seq_len=32)
        full = featurize(model, inputs, phase=phase, name=name)
        fast, _ = hf_capture.capture(config, batch_size=2, seq_len=32, dtype="float32", phase=phase)
    return full, fast


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["inference", "training"])
@pytest.mark.parametrize("model_id", ["llama-2-7b", "gpt2", "bert-base-uncased", "mistral-7b"])
def test_copied_layers_give_the_graph_the_whole_trace_gives(model_id, phase):
    full, fast = _both(model_id, phase)
    assert any("copies of layer 1" in n for n in fast.notes)  # the fast path was taken
    key = [(n.op, n.target, n.flops, n.bytes_read, n.bytes_written, n.params, n.module_path) for n in full.nodes]
    assert key == [
        (n.op, n.target, n.flops, n.bytes_read, n.bytes_written, n.params, n.module_path) for n in fast.nodes
    ]
    assert set(full.edges) == set(fast.edges)
    assert full.keep_alive == fast.keep_alive and full.grad_outputs == fast.grad_outputs
    for field in ("param_count", "param_bytes", "trainable_param_count", "trainable_param_bytes", "input_bytes"):
        assert getattr(full, field) == getattr(fast, field), field
    h100 = get_device("H100-SXM")
    a, b = (AnalyticalPredictor().predict(g, h100, RunConfig(phase=phase)) for g in (full, fast))
    assert a.latency_ms.value == pytest.approx(b.latency_ms.value, rel=1e-12)
    assert a.peak_memory_bytes.value == b.peak_memory_bytes.value
    assert len({n.name for n in fast.nodes}) == len(fast.nodes)  # copies are told apart


def test_a_stack_whose_first_layer_differs_is_traced_whole():
    # T5's first block carries the relative attention bias: its ops differ from block 1's, so nothing is copied
    full, fast = _both("t5-base", "inference")
    assert not any("copies of layer 1" in n for n in fast.notes)
    assert [(n.op, n.flops) for n in full.nodes] == [(n.op, n.flops) for n in fast.nodes]


def test_layer_indices_are_read_from_module_paths():
    assert lr.layer_of("L['args'][0].model.layers.17.mlp.up_proj") == 17
    assert lr.layer_of("L['self'].encoder.layer.3.attention") == 3
    assert lr.layer_of("L['self'].lm_head") is None


def test_stacks_that_are_not_one_layer_repeated_are_traced_whole():
    import torch

    from perfpredict.compiler_hooks.hf_capture import layers_alike

    class Stack(torch.nn.Module):
        def __init__(self, widths):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, w) for w in widths)

    assert layers_alike(Stack([8, 8, 8, 8]))
    assert not layers_alike(Stack([8, 8, 16, 16]))  # dense first layers, then others (DeepSeek-style)
    # Swin's "num_hidden_layers" counts stages of different sizes; ConvNeXt will not run with two of them
    for model_id in ("microsoft/swin-tiny-patch4-window7-224", "facebook/convnext-tiny-224"):
        config = hf.load_config(model_id)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast, _ = hf_capture.capture(config, batch_size=1, seq_len=None, dtype="float32", phase="inference")
            model, inputs, name = hf.model_from_hf(config, batch_size=1)
            full = featurize(model, inputs, name=name)
        assert not any("copies of layer 1" in n for n in fast.notes), model_id
        assert fast.total_flops == full.total_flops and len(fast.nodes) == len(full.nodes), model_id
