"""The attention implementation is chosen, not assumed: sdpa (one fused op), eager (the scores materialised) and
flash_attention_2 (one FlashAttention-2 op, no scores, no mask) give three graphs, at every door that captures a
HuggingFace model: the API, the CLI's configs, generation; and the CLI builds NeuSight's programs as its Python path
does once it asks for eager attention."""

from __future__ import annotations

import json
import warnings

import pytest

from perfpredict.core.errors import InvalidInputError

transformers = pytest.importorskip("transformers")

# a two-layer Llama: hidden 64, 4 query heads and 2 key/value heads of 16 (grouped-query attention)
TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
}
BATCH, SEQ = 2, 32


@pytest.fixture(scope="module")
def llama():
    import torch

    from perfpredict.compiler_hooks.hf_frontend import config_from_dict

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config_from_dict(TINY, "tiny-llama"))
    return model, torch.zeros(BATCH, SEQ, dtype=torch.long, device="meta")


def _scores(graph) -> list:
    """Ops that write a (batch, heads, seq, seq) tensor: materialised attention scores."""
    return [n for n in graph.nodes if any(t.shape[-2:] == (SEQ, SEQ) and len(t.shape) == 4 for t in n.outputs)]


def _attention_ops(graph) -> list[str]:
    return [n.target for n in graph.nodes if n.op == "attention"]


def test_each_implementation_is_its_own_graph_through_the_api(llama):
    import perfpredict

    model, ids = llama
    graphs = {
        a: perfpredict.featurize(model, (ids,), attn_implementation=a) for a in ("sdpa", "eager", "flash_attention_2")
    }
    assert _attention_ops(graphs["sdpa"]) == ["scaled_dot_product_attention"] * 2 and not _scores(graphs["sdpa"])
    assert _attention_ops(graphs["eager"]) == [] and _scores(graphs["eager"])  # q k^T, the mask, softmax, p v
    assert sum(n.op == "softmax" for n in graphs["eager"].nodes) == 2
    flash = graphs["flash_attention_2"]
    assert _attention_ops(flash) == ["_scaled_dot_product_flash_attention"] * 2
    assert not _scores(flash) and not any(n.op == "softmax" for n in flash.nodes)
    op = next(n for n in flash.nodes if n.op == "attention")
    # the key/value heads are read as they are (2 of 16), not repeated to the 4 query heads
    assert [t.shape for t in op.inputs] == [(BATCH, 4, SEQ, 16), (BATCH, 2, SEQ, 16), (BATCH, 2, SEQ, 16)]
    # Q K^T and P V: 2 x (batch x heads) x seq x seq x head_dim each = 2 x 2 x 8 x 32 x 32 x 16 x 2
    assert op.flops == 2 * 2 * (BATCH * 4) * SEQ * SEQ * 16 and op.attrs["is_causal"]
    assert model.config._attn_implementation == "sdpa"  # the model in hand is left as it was
    report = perfpredict.predict(model, (ids,), device="L4", attn_implementation="flash_attention_2")
    assert report.assumptions["attention"].startswith("flash_attention_2 (as asked): captured as one fused")
    own = perfpredict.predict(model, (ids,), device="L4")
    assert own.assumptions["attention"].startswith("sdpa (the model's own")


def test_the_fused_attention_has_its_backward_kernel_in_a_training_step():
    import torch

    import perfpredict
    from perfpredict.compiler_hooks.attention_choice import fused_attention_forward

    class Attention(torch.nn.Module):  # what a layer hands transformers' attention function: (batch, heads, seq, dim)
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(16, 48)

        def forward(self, x):
            q, k, v = self.qkv(x).unflatten(-1, (3, 1, 16)).permute(2, 0, 3, 1, 4)
            return fused_attention_forward(self, q, k, v, None)[0]

    graph = perfpredict.featurize(Attention(), (torch.randn(2, 8, 16),), phase="training")
    assert _attention_ops(graph) == [
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
    ]


def test_an_implementation_the_model_lacks_is_refused_in_one_line():
    import torch

    import perfpredict

    with torch.device("meta"):
        model = transformers.AutoModel.from_config(
            transformers.T5Config(num_layers=1, d_model=32, d_ff=64, num_heads=2)
        )
    ids = torch.zeros(1, 8, dtype=torch.long, device="meta")
    with pytest.raises(
        InvalidInputError,
        match="T5Stack does not support flash_attention_2 in transformers; use --attn-implementation sdpa or eager",
    ):
        perfpredict.featurize(model.get_encoder(), (ids,), attn_implementation="flash_attention_2")


def test_the_cli_flag_reaches_the_config_capture(tmp_path):
    from perfpredict.cli.args import UsageError
    from perfpredict.cli.entry import build_parser
    from perfpredict.cli.model_args import request_from_args
    from perfpredict.hardware.devices import get_device
    from perfpredict.pipeline import capture

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "architectures": ["LlamaForCausalLM"]}))
    ask = ["predict", "--config", str(path), "--seq", str(SEQ), "--batch", str(BATCH), "--no-cache"]
    graphs = {}
    for attn in ("eager", "flash_attention_2"):
        args = build_parser().parse_args([*ask, "--attn-implementation", attn])
        graphs[attn] = capture(request_from_args(args), get_device("L4")).graph
    assert _attention_ops(graphs["eager"]) == [] and _scores(graphs["eager"])
    assert _attention_ops(graphs["flash_attention_2"]) == ["_scaled_dot_product_flash_attention"] * 2
    with pytest.raises(UsageError, match="choose from 'sdpa', 'eager', 'flash_attention_2'"):
        build_parser().parse_args([*ask, "--attn-implementation", "flash"])


def test_generation_traces_the_attention_asked_for():
    from perfpredict.compiler_hooks.attention_choice import configured
    from perfpredict.compiler_hooks.hf_frontend import config_from_dict
    from perfpredict.llm.decode_trace import decode_graph
    from perfpredict.llm.generation import predict_generation

    config = configured(config_from_dict(TINY, "tiny-llama"), "flash_attention_2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = decode_graph(config, batch=1, context=16, dtype="bfloat16", replicate=False)
    op = next(n for n in step.nodes if n.op == "attention")
    # one new token attends to the 16 cached and itself: not causal, the keys are the cache's 17 positions
    assert op.target == "_scaled_dot_product_flash_attention" and not op.attrs["is_causal"]
    assert op.inputs[1].shape == (1, 2, 17, 16)
    with pytest.raises(InvalidInputError, match="--attn-implementation describe transformers' generate"):
        predict_generation("gpt2", device="H100-SXM", engine="vllm", attn_implementation="eager")


def test_the_cli_gives_neusights_python_graph_with_eager_attention():
    """NeuSight measured HuggingFace models built with attn_implementation="eager"; ``--config <its config>
    --attn-implementation eager`` now captures the very graph the Python path (external/neusight_models) does."""
    from perfpredict.external import neusight_models
    from perfpredict.model_sources import HFSource
    from perfpredict.request import Request

    config = neusight_models.CONFIGS / "opt_13.json"
    python = neusight_models.capture("opt_13", 1, 64, "inference")
    ask = Request(batch=1, seq=64, dtype="float32", attn_implementation="eager")
    cli = HFSource(str(config), use_cache=False).graph_for(ask, None).graph
    assert cli.structure_hash() == python.structure_hash() and not _attention_ops(cli)
    assert (cli.param_count, cli.total_flops) == (python.param_count, python.total_flops)


def test_generate_and_the_web_page_pass_the_attention_on(monkeypatch):
    from perfpredict.cli import main
    from perfpredict.web.app import _question
    from perfpredict.web.compare import Question

    asked = {}

    def answer(source, generation=None, **question):  # generate hands over one Generation value
        asked.update(vars(generation) if generation is not None else question)
        raise InvalidInputError("stop")

    monkeypatch.setattr("perfpredict.llm.answer_cache.cached_generation", answer)
    assert main(["generate", "--hf", "gpt2", "--engine", "hf", "--attn-implementation", "eager"]) == 2
    assert asked["attn_implementation"] == "eager"
    page = dict(model="gpt2", upload=None, phase="inference", batch=1, seq=0, dtype="default", precision="default",
                devices=["L4"], mig=[], max_latency=0, min_throughput=0, dp=1, tp=1, pp=1, fsdp=False, engine="auto",
                mode="eager", host="default", new_tokens=128, weights="default", generation_mode="default",
                attn_implementation="flash_attention_2", engine_version="default", frontend="offline")  # fmt: skip
    assert _question(page).request("L4").attn_implementation == "flash_attention_2"
    assert Question(model="gpt2").request("L4").attn_implementation is None
