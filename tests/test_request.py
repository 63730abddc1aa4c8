"""One Request, whatever the door: the API, the CLI, the torch.compile backend's options, the web page's inputs and
the parallel path accept every Request field, pass it on unchanged, and share one set of defaults."""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import pytest
import torch

import perfpredict
from perfpredict.core.errors import InvalidInputError
from perfpredict.request import AUTO, DEFAULT_DEVICE, Request, default, field_names

# a value for every field other than its default (the source is each door's own)
VALUES = {
    "device": "L4",
    "phase": "training",
    "dtype": "bfloat16",
    "batch": 4,
    "seq": 64,
    "predictor": "analytical",
    "mode": "cuda_graph",
    "precision": "bf16",
    "optimizer": "sgd",
    "tf32": True,
    "host": "dev-vm",
    "attn_implementation": "eager",
    "model_class": "AutoModelForSequenceClassification",
    "weights_built_in": "float16",
    # issue 46's plan keys ride on the same field through every door
    "parallel": {
        "dp": 2,
        "cp": 2,
        "fsdp": True,
        "fsdp_strategy": "shard_grad_op",
        "schedule": "gpipe",
        "global_batch": 8,
    },
    "activation_checkpointing": "full",
    "float8": "tensorwise",
    "optimizer_impl": "fused",
    "offload_optimizer": True,
    "lora_rank": 16,
    "lora_targets": "all-linear",
    "qlora": True,
    "power_limit_w": 500.0,
    "model_name": "m",
    "max_latency_ms": 5.0,
    "min_throughput_per_s": 100.0,
    "grid_g_per_kwh": 300.0,
    "workload_calls": 10,
    "top_ops": 7,
}
CLI_FLAGS = {
    "device": ["--device", "L4"],
    "phase": ["--training"],
    "dtype": ["--dtype", "bfloat16"],
    "batch": ["--batch", "4"],
    "seq": ["--seq", "64"],
    "predictor": ["--predictor", "analytical"],
    "mode": ["--mode", "cuda_graph"],
    "precision": ["--precision", "bf16"],
    "optimizer": ["--optimizer", "sgd"],
    "tf32": ["--tf32"],
    "host": ["--host", "dev-vm"],
    "attn_implementation": ["--attn-implementation", "eager"],
    "model_class": ["--model-class", "AutoModelForSequenceClassification"],
    "weights_built_in": ["--weights-built-in", "float16"],
    "parallel": ["--dp", "2", "--cp", "2", "--fsdp", "shard_grad_op", "--schedule", "gpipe", "--global-batch", "8"],
    "activation_checkpointing": ["--activation-checkpointing", "full"],
    "float8": ["--float8", "tensorwise"],
    "optimizer_impl": ["--optimizer-impl", "fused"],
    "offload_optimizer": ["--offload-optimizer"],
    "lora_rank": ["--lora-rank", "16"],
    "lora_targets": ["--lora-targets", "all-linear"],
    "qlora": ["--qlora"],
    "power_limit_w": ["--power-limit", "500"],
    "model_name": ["--model-name", "m"],
    "max_latency_ms": ["--max-latency-ms", "5"],
    "min_throughput_per_s": ["--min-throughput", "100"],
    "grid_g_per_kwh": ["--grid-g-per-kwh", "300"],
    "workload_calls": ["--workload-calls", "10"],
}
# what a door cannot take, and why (each refusal names its fix, checked below)
NOT_BY_DOOR = {
    "cli": {"top_ops": "--top picks the rows shown; the report keeps 25 (explain keeps all)"},
    "backend": {
        "dtype": "the compiled graph has its dtype",
        "batch": "the compiled graph has its batch",
        "seq": "the compiled graph has its shapes",
        "attn_implementation": "the compiled graph has its attention",
        "model_class": "the compiled graph has its head",
        "lora_rank": "the compiled graph has its trainable weights",
        "lora_targets": "the compiled graph has its trainable weights",
    },
}
# what a door always names itself: the CLI its phase (--training or not), the web page its phase, batch and device
OWN = {"cli": ("phase",), "web": ("phase", "batch", "device")}
RUN_FIELDS = tuple(n for n in field_names() if n != "source")


def test_every_field_has_a_test_value_and_a_cli_flag():
    assert set(VALUES) == set(RUN_FIELDS)
    assert set(CLI_FLAGS) | set(NOT_BY_DOOR["cli"]) == set(RUN_FIELDS)


class _Asked(Exception):
    """Raised by the stand-in pipeline with the Request it was given."""


def _stop(request, *_, **__):
    raise _Asked(request)


def _api(name, value, monkeypatch):
    monkeypatch.setattr("perfpredict.pipeline.predict", _stop)
    with pytest.raises(_Asked) as got:
        perfpredict.predict(torch.nn.Linear(4, 4), torch.randn(2, 4), **{name: value})
    return got.value.args[0]


def _cli(name, value, monkeypatch):
    from perfpredict.cli.entry import build_parser
    from perfpredict.cli.predict import predict_from_args

    monkeypatch.setattr("perfpredict.pipeline.predict_with_graph", _stop)
    args = build_parser().parse_args(["predict", "--hf", "gpt2", *CLI_FLAGS[name]])
    with pytest.raises(_Asked) as got:
        predict_from_args(args)
    return got.value.args[0]


def _backend(name, value, monkeypatch):
    from perfpredict.backends.torch_backend import BackendOptions

    return BackendOptions.parse({name: value}).request


def _web(name, value, monkeypatch):
    from perfpredict.web.compare import Question

    fields = {f.name for f in dataclasses.fields(Question)}
    question = Question(model="gpt2", **({name: value} if name in fields else {}))
    if name not in fields:  # not on the page: given as the page's run options
        question = dataclasses.replace(question, options={name: value})
    return question.request(value if name == "device" else DEFAULT_DEVICE)


def _parallel(name, value, monkeypatch):
    from perfpredict.parallel import parallel_report

    monkeypatch.setattr("perfpredict.parallel.api.parse_plan", lambda plan: _stop(seen["request"]))
    seen = {}
    real = Request.but

    def spy(self, **changes):
        seen["request"] = real(self, **changes)
        return seen["request"]

    monkeypatch.setattr(Request, "but", spy)
    with pytest.raises(_Asked) as got:
        if name == "parallel":  # the plan as a Request field, not the positional one
            parallel_report(object(), request=Request(parallel=value))
        else:
            parallel_report(object(), {"dp": 2}, **{name: value})
    return got.value.args[0]


DOORS = {"api": _api, "cli": _cli, "backend": _backend, "web": _web, "parallel": _parallel}


@pytest.mark.parametrize("name", RUN_FIELDS)
@pytest.mark.parametrize("door", DOORS)
def test_every_door_accepts_every_field_and_passes_it_on(door, name, monkeypatch):
    value = VALUES[name]
    why_not = NOT_BY_DOOR.get(door, {}).get(name)
    if why_not and door == "backend":
        with pytest.raises(InvalidInputError, match=f"option {name}=.*cannot change a graph.*:"):
            _backend(name, value, monkeypatch)
        return
    if why_not:
        pytest.skip(why_not)
    request = DOORS[door](name, value, monkeypatch)
    assert getattr(request, name) == value, (door, name)
    # and nothing else moved off the one default, but what the door always names itself
    for other in RUN_FIELDS:
        if other != name and other not in OWN.get(door, ()):
            assert getattr(request, other) == default(other), (door, name, other)


def test_a_new_field_needs_no_code_in_the_api_the_backend_or_the_web_page():
    """The API's signature, the backend's valid options and the web question's are generated from the fields."""
    from perfpredict.backends.torch_backend import BackendOptions

    params = inspect.signature(perfpredict.predict).parameters
    assert {n: params[n].default for n in RUN_FIELDS} == {n: default(n) for n in RUN_FIELDS}
    with pytest.raises(InvalidInputError, match="unknown perfpredict option.*'tf32'"):
        BackendOptions.parse({"tf_32": True})


def test_refusals_name_the_fix():
    from perfpredict.api import ModuleSource
    from perfpredict.hardware.devices import get_device
    from perfpredict.model_sources import HFSource, OnnxSource

    h100 = get_device("H100-SXM")
    with pytest.raises(InvalidInputError, match="pass example inputs of that length"):
        ModuleSource(torch.nn.Linear(2, 2), torch.randn(1, 2)).graph_for(Request(seq=8), None)
    with pytest.raises(InvalidInputError, match="cannot change an ONNX file's attention.*drop --attn-implementation"):
        OnnxSource("model.onnx").graph_for(Request(attn_implementation="eager"), None)
    with pytest.raises(InvalidInputError, match="an ONNX file's head is in it: drop --model-class"):
        OnnxSource("model.onnx").graph_for(Request(model_class="AutoModelForCausalLM"), None)
    with pytest.raises(InvalidInputError, match="a module in hand has its head: drop model_class"):
        perfpredict.predict(torch.nn.Linear(2, 2), torch.randn(1, 2), model_class="AutoModelForCausalLM")
    with pytest.raises(InvalidInputError, match="'BertForPretraining' is not a transformers model class"):
        HFSource("bert-base-uncased", use_cache=False).graph_for(Request(model_class="BertForPretraining"), h100)
    with pytest.raises(InvalidInputError, match="'LlamaForCausalLM' builds LlamaConfig models, not a 'bert' config"):
        HFSource("bert-base-uncased", use_cache=False).graph_for(Request(model_class="LlamaForCausalLM"), h100)
    with pytest.raises(InvalidInputError, match="attn_implementation 'flash' is not one of sdpa, eager, flash_att"):
        Request(attn_implementation="flash")
    with pytest.raises(InvalidInputError, match="applies to a HuggingFace model; Linear is not one"):
        perfpredict.predict(torch.nn.Linear(2, 2), torch.randn(1, 2), attn_implementation="eager")
    with pytest.raises(InvalidInputError, match="unknown option.*valid: .*device"):
        Request.of(devise="L4")
    with pytest.raises(InvalidInputError, match="phase 'train' is not one of"):
        Request(phase="train")
    with pytest.raises(InvalidInputError, match="not a model source"):
        from perfpredict.pipeline import predict

        predict(Request(source="bert"))


def test_a_captured_graph_refuses_what_it_has_already_fixed():
    from perfpredict.pipeline import predict

    graph = perfpredict.featurize(torch.nn.Linear(8, 8), torch.randn(4, 8))
    for asked in ({"dtype": "bfloat16"}, {"batch": 64}, {"seq": 16}):
        with pytest.raises(InvalidInputError, match="cannot change a graph already captured"):
            perfpredict.report_for_graph(graph, **asked)
        with pytest.raises(InvalidInputError, match="cannot change a graph already captured"):
            predict(Request(source=graph, **asked))
    with pytest.raises(InvalidInputError, match="parallel_report"):
        perfpredict.report_for_graph(graph, parallel={"dp": 2})
    assert perfpredict.report_for_graph(graph, device="L4").batch_size == 4  # the graph's own batch


def test_the_web_question_reads_an_empty_plan_as_one_gpu_and_keeps_an_options_mode():
    from perfpredict.web.compare import Question

    assert Question(model="bert", parallel={}).request("L4").parallel is None
    assert Question(model="bert", options={"mode": "cuda_graph"}).request("L4").mode == "cuda_graph"
    assert Question(model="bert", mode="compiled", options={"mode": "cuda_graph"}).request("L4").mode == "compiled"


def test_auto_weights_follow_the_source():
    """weights_built_in="auto": a module in hand was built in float32 (torch's default) before its cast; a config
    loads straight in its dtype. Both as before the Request, so no answer changed."""
    from perfpredict.api import ModuleSource
    from perfpredict.hardware.devices import get_device
    from perfpredict.model_sources import HFSource

    assert default("weights_built_in") == AUTO
    module = ModuleSource(torch.nn.Linear(8, 8), torch.randn(2, 8)).graph_for(Request(), get_device("L4"))
    config = HFSource("gpt2").graph_for(Request(seq=16), get_device("L4"))
    assert (module.weights_built_in, config.weights_built_in) == ("float32", None)
    assert Request().resolved_weights_built_in(module.weights_built_in) == "float32"
    assert Request(weights_built_in=None).resolved_weights_built_in("float32") is None


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)), torch.randn(8, 64)


@pytest.mark.parametrize(
    "run",
    [
        {"device": "L4", "mode": "cuda_graph", "tf32": True},
        {"phase": "training", "precision": "fp32", "optimizer": "sgd", "host": "dev-vm"},
        {"parallel": {"dp": 2}, "predictor": "analytical"},
    ],
)
def test_the_api_and_the_backend_give_the_same_answer(run, shipped_ceilings):
    model, x = _mlp()
    api = perfpredict.predict(model, (x,), **run)
    torch._dynamo.reset()
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(model, backend="perfpredict", options={**run, "report": got.append, "strict": True})(x)
    backend = got[-1]
    if "parallel" in run:
        assert type(api).__name__ == type(backend).__name__ == "ParallelReport"
        assert backend.step_ms == pytest.approx(api.step_ms, rel=0.05)
    else:
        assert backend.latency_ms.value == pytest.approx(api.latency_ms.value, rel=0.05)
        assert backend.assumptions["mode"].startswith(run.get("mode", "eager"))


def test_the_cli_and_the_web_page_give_the_same_answer(capsys):
    import json

    from perfpredict.cli import main
    from perfpredict.web.compare import Question, compare

    assert (
        main(["predict", "--hf", "bert", "--device", "L4", "--mode", "cuda_graph", "--host", "dev-vm", "--json", "-"])
        == 0
    )
    cli = json.loads(capsys.readouterr().out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        web = compare(Question(model="bert", devices=("L4",), mode="cuda_graph", host="dev-vm")).reports[0]
    assert (
        web.to_dict()["latency_ms"] == cli["latency_ms"]
        and web.peak_memory_bytes.value == cli["peak_memory_bytes"]["value"]
    )


def test_an_onnx_file_keeps_its_dtype_unless_a_precision_is_asked_for(monkeypatch):
    """One rule for an ONNX file at every door (the CLI, its multi-GPU flags, the web page): a training recipe
    given is applied; none given keeps the file's own dtype, rather than the device's default recipe."""
    from perfpredict.api import featurize
    from perfpredict.hardware.devices import get_device
    from perfpredict.model_sources import OnnxSource

    graph = featurize(torch.nn.Linear(8, 8), (torch.randn(2, 8),), phase="training")
    monkeypatch.setattr("perfpredict.compiler_hooks.onnx_file.graph_from_onnx_args", lambda *a, **k: graph)
    h100 = get_device("H100-SXM")
    assert OnnxSource("m.onnx").graph_for(Request(phase="training"), h100).precision is None
    assert OnnxSource("m.onnx").graph_for(Request(phase="training", precision="bf16"), h100).precision == "bf16"
    with pytest.raises(InvalidInputError, match="contradicts"):
        OnnxSource("m.onnx").graph_for(Request(phase="training", precision="bf16", dtype="float16"), h100)
