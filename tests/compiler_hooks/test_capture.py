"""Capture never runs the model: graphs equal dynamo's, the caller's model, inputs and RNG are untouched, and what
cannot be captured on meta tensors is refused in one line."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from robustness_models import build_case
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import perfpredict
from perfpredict.compiler_hooks.capture import capture_graph
from perfpredict.core.errors import FrontendError, InvalidInputError
from perfpredict.nas import fbnet

_ROOT = re.compile(r"^L\[[^\]]*\](\[\d+\])?\.?")


class _NoRealCompute(TorchDispatchMode):
    """Fails the test if any aten op runs on a real (non-meta) tensor holding data."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        flat = [*args, *(kwargs or {}).values()]
        flat = [t for a in flat for t in (a if isinstance(a, (list, tuple)) else (a,))]
        real = [t for t in flat if isinstance(t, torch.Tensor) and not t.is_meta and t.numel() > 1]
        assert not real, f"{func} ran on real tensors {[tuple(t.shape) for t in real]}"
        return func(*args, **(kwargs or {}))


class _Tripwire(nn.Module):
    """Raises if its forward ever sees a real tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(0.5))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        if x.device.type != "meta" or self.head.weight.device.type != "meta":
            raise RuntimeError("the forward ran on real tensors")
        return self.head(self.body(x).mean((2, 3)))


@pytest.mark.parametrize("phase", ["inference", "training"])
def test_the_forward_never_sees_a_real_tensor_and_no_op_runs_on_one(phase):
    model = _Tripwire()
    with pytest.raises(RuntimeError, match="real tensors"):
        model(torch.randn(2, 3, 8, 8))  # the tripwire works
    with _NoRealCompute():
        graph = perfpredict.featurize(model, (torch.randn(2, 3, 8, 8),), phase=phase)
    assert graph.batch_size == 2 and graph.total_flops > 0


@pytest.mark.parametrize("phase", ["inference", "training"])
def test_weights_buffers_rng_and_mode_are_untouched(phase):
    torch.manual_seed(0)
    model = _Tripwire().train()
    x = torch.randn(4, 3, 8, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pointers = {k: v.data_ptr() for k, v in model.state_dict().items()}
    rng, x_before = torch.get_rng_state(), x.clone()
    perfpredict.predict(model, (x,), device="T4", phase=phase, dtype="float16")
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # BatchNorm's running stats included
    assert {k: v.data_ptr() for k, v in after.items()} == pointers and after["head.weight"].dtype == torch.float32
    assert torch.equal(rng, torch.get_rng_state()) and torch.equal(x, x_before)
    assert model.training and all(m.training for m in model.modules())


def test_a_huge_batch_costs_what_batch_one_costs():
    net = nn.Sequential(nn.Linear(8, 4096), nn.ReLU(), nn.Linear(4096, 8))
    graph = perfpredict.featurize(net, (torch.randn(65536, 8),), dtype="bfloat16")
    # matmuls 2*65536*8*4096 + 2*65536*4096*8 = 8,589,934,592 FLOPs on 65536x4096 bf16 activations, none allocated
    matmul = sum(n.flops for n in graph.nodes if n.op == "matmul")
    assert graph.batch_size == 65536 and matmul == 8_589_934_592 and graph.dtype == "bfloat16"


def test_a_model_built_on_meta_is_predicted_70b_llama():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        vocab_size=128256,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    report = perfpredict.predict(model, (torch.randint(0, 100, (1, 256)),), device="H100-SXM", dtype="bfloat16")
    params = report.graph.param_count
    assert 70.0e9 < params < 71.0e9 and report.dtype == "bfloat16"
    # 2 FLOPs per weight per token over 256 tokens (the embedding lookup's 1.05e9 weights do no FLOPs, attention
    # adds ~0.5%): 2 x 70.55e9 x 256 = 36.1 TFLOP
    assert 0.97 < report.graph.total_flops / (2 * params * 256) < 1.01
    # no faster than the H100's bf16 datasheet rate or its bandwidth allow: 35.8 TFLOP / 989 TFLOP/s = 36 ms, and
    # 141 GB of weights / 3.35 TB/s = 42 ms; a prefill of 256 tokens runs its GEMMs at well over a third of peak
    assert 42.0 < report.latency_ms.value < 3 * 42.0


def test_meta_gpt2_with_its_default_cache_is_predicted():
    transformers = pytest.importorskip("transformers")
    reports = {}
    for phase in ("inference", "training"):
        with torch.device("meta"):
            model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2))  # use_cache=True by default
        reports[phase] = perfpredict.predict(model, (torch.randint(0, 100, (1, 64)),), device="A100-40GB", phase=phase)
        assert reports[phase].phase == phase
    inference, training = reports["inference"], reports["training"]
    # a training step is the forward pass, and a backward pass of twice its FLOPs (the input and weight gradients)
    assert 2.9 < training.graph.total_flops / inference.graph.total_flops < 3.1
    # the forward's time plus a backward that costs about as much again as twice the forward, give or take launches
    assert 2.0 < training.latency_ms.value / inference.latency_ms.value < 4.0


def _comparable(graph):
    return [(n.op, n.flops, n.bytes_read, n.bytes_written, n.params, n.outputs, dict(n.attrs)) for n in graph.nodes]


def _same_as_dynamo(model, args, kwargs=None, phase="inference"):
    torch._dynamo.reset()
    meta = capture_graph(model, args, kwargs or {}, phase=phase, dtype=None, name="m", capture="meta")
    dynamo = capture_graph(model, args, kwargs or {}, phase=phase, dtype=None, name="m", capture="dynamo")
    assert _comparable(meta) == _comparable(dynamo)
    assert sorted(meta.edges) == sorted(dynamo.edges) and meta.keep_alive == dynamo.keep_alive
    assert (meta.param_count, meta.input_bytes, meta.batch_size) == (
        dynamo.param_count,
        dynamo.input_bytes,
        dynamo.batch_size,
    )
    assert [n.module_path for n in meta.nodes] == [_ROOT.sub("", n.module_path) for n in dynamo.nodes]
    return meta


# random models of every block kind, none with a graph break or a value read (those differ by design)
@pytest.mark.parametrize("seed", [0, 4, 5, 9, 10, 14, 28, 37, 38, 42, 47, 52, 56, 57])
def test_the_graph_is_dynamos_node_for_node(seed):
    case = build_case(seed)
    assert not case.has_break
    _same_as_dynamo(case.model, tuple(case.inputs))


def test_fbnet_and_bert_graphs_are_dynamos():
    transformers = pytest.importorskip("transformers")
    _same_as_dynamo(fbnet.build(list(range(9)) * 2 + [8, 0, 1, 2]), (torch.randn(2, 3, 32, 32),))
    bert = transformers.BertModel(transformers.BertConfig(num_hidden_layers=2)).eval()
    graph = _same_as_dynamo(bert, (torch.randint(0, 100, (2, 32)),))
    assert "embeddings.word_embeddings" in {n.module_path for n in graph.nodes}


def test_fbnet_training_step_is_the_real_capture():
    # every one of FBNet's nine layer choices once (grouped pointwise convs and their shuffle, kernels 3 and 5,
    # expansions 1, 3 and 6), then skips: a strided skip is a 1x1 conv, the others the identity
    model = fbnet.build(list(range(9)) + [8] * 13)
    x = torch.randn(2, 3, 32, 32)
    meta = capture_graph(model, (x,), {}, phase="training", dtype=None, name="m", capture="meta")
    with pytest.warns(RuntimeWarning, match="runs"):
        real = capture_graph(model, (x,), {}, phase="training", dtype=None, name="m", capture="real")
    assert _comparable(meta) == _comparable(real) and meta.trainable_param_count == real.trainable_param_count


class _ReadsValues(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(4, 4)

    def forward(self, x):
        y = self.gate(x)
        return y * 2 if y.mean().item() > 0 else y


def test_a_value_read_is_refused_in_one_line_naming_the_op_and_module():
    model = nn.Sequential(nn.Linear(4, 4), _ReadsValues())
    with pytest.raises(FrontendError) as info:
        perfpredict.featurize(model, (torch.randn(2, 4),))
    message = str(info.value)
    assert "\n" not in message and "item()" in message and "'1'" in message and "capture='real'" in message


def test_capture_real_runs_the_model_and_says_so():
    model = nn.Sequential(nn.Linear(4, 4), _ReadsValues())
    with pytest.warns(RuntimeWarning, match="runs Sequential's arithmetic"):
        graph = perfpredict.featurize(model, (torch.randn(2, 4),), capture="real")
    assert any(n.op == "matmul" for n in graph.nodes)


def test_a_custom_op_without_a_meta_kernel_is_named():
    @torch.library.custom_op("perfpredict_test::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    class UsesIt(nn.Module):
        def forward(self, x):
            return double(x)

    with pytest.raises(FrontendError, match="no meta kernel") as info:
        perfpredict.featurize(UsesIt(), (torch.randn(2, 4),))
    assert "\n" not in str(info.value)


def test_any_other_failure_is_one_actionable_line():
    broken = nn.Sequential(nn.Linear(4, 8), nn.Linear(4, 2))  # 8 features into a layer that takes 4
    with pytest.raises(FrontendError) as info:
        perfpredict.featurize(broken, (torch.randn(2, 4),))
    assert "\n" not in str(info.value) and "capture=" in str(info.value)
    with pytest.raises(InvalidInputError, match="capture 'fast'"):
        perfpredict.featurize(broken, (torch.randn(2, 4),), capture="fast")


def test_device_moves_and_factories_stay_on_meta():
    class Moves(nn.Module):
        def forward(self, x):
            mask = torch.ones(x.shape[0], x.shape[1])  # a factory with no device: made on meta
            return (x.to("cpu").half() * mask.to(x.device)).float()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        graph = perfpredict.featurize(Moves(), (torch.randn(3, 5),))
    kinds = [(n.target, n.op) for n in graph.nodes]
    assert ("ones", "creation") in kinds and ("half", "copy") in kinds and graph.nodes[-1].outputs[0].dtype == "float32"


@pytest.mark.parametrize("capture", ["meta", "dynamo"])
def test_module_paths_are_the_models_own_without_dynamos_root(capture):
    torch._dynamo.reset()
    graph = capture_graph(
        _Tripwire(), (torch.randn(2, 3, 8, 8),), {}, phase="inference", dtype=None, name="m", capture=capture
    )
    paths = {n.module_path for n in graph.nodes}
    assert "head" in paths and "body.0" in paths
    assert not any(p.startswith(("L[", "self.", ".")) or "_modules[" in p for p in paths), paths


class _Wrapper(nn.Module):
    """Calls the model it holds, as generation's prefill and decode step do: its attribute is not in the paths."""

    perfpredict_wraps = "m"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, x):
        return self.m(x)


@pytest.mark.parametrize("capture", ["meta", "dynamo"])
def test_a_wrappers_attribute_is_not_in_the_module_paths_or_the_errors(capture):
    torch._dynamo.reset()
    graph = capture_graph(
        _Wrapper(_Tripwire()), (torch.randn(2, 3, 8, 8),), {}, phase="inference", dtype=None, name="w", capture=capture
    )
    paths = {n.module_path for n in graph.nodes}
    assert "head" in paths and "body.0" in paths and not any(p == "m" or p.startswith("m.") for p in paths), paths
    if capture == "meta":  # a capture error names the module as the model names it
        with pytest.raises(FrontendError, match=r"item\(\) in '1' reads"):
            capture_graph(_Wrapper(nn.Sequential(nn.Linear(4, 4), _ReadsValues())), (torch.randn(2, 4),), {},
                          phase="inference", dtype=None, name="w")  # fmt: skip


def test_dynamo_spellings_of_a_module_path_are_cleaned():
    from perfpredict.compiler_hooks.fx_frontend import clean_module_path

    assert clean_module_path("L['args'][0].lm_head") == "lm_head"
    assert clean_module_path("L['self'].encoder.layer.0") == "encoder.layer.0"
    assert clean_module_path("L['fn']._modules['lm_head']") == "lm_head"
    assert clean_module_path("self.fc") == "fc" and clean_module_path("lm_head") == "lm_head"
