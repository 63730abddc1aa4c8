"""One Generation value (with its EngineOptions) built once at each door and handed down whole."""

from __future__ import annotations

import argparse

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.llm.generation_options import EngineOptions, Generation, field_help


def test_keywords_build_one_generation_with_the_engines_options_inside():
    g = Generation.of(batch=8, device="A100-40GB", engine="vllm", engine_version="0.6", frontend="openai-server",
                      scheduler_steps=4)  # fmt: skip
    assert g.batch == 8 and g.engine == EngineOptions("vllm", "0.6", "openai-server", scheduler_steps=4)
    assert g.but(version="0.10", tp=2).engine.version == "0.10" and g.but(tp=2).tp == 2
    assert Generation.of(engine=EngineOptions("sglang"), frontend="openai-server").engine.engine == "sglang"
    with pytest.raises(InvalidInputError, match=r"unknown generation option 'beam'; valid: .*engine_version"):
        Generation.of(beam=4)
    with pytest.raises(InvalidInputError, match="engine 'tgi' is not one of auto, hf, vllm, sglang"):
        EngineOptions(engine="tgi")
    with pytest.raises(InvalidInputError, match="--batch 0 must be a whole number of at least 1"):
        Generation(batch=0)


def test_the_cli_flags_take_their_choices_and_help_from_the_fields_and_build_the_same_question():
    from perfpredict.cli import generate as cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["generate", "--hf", "llama-3-8b", "--engine", "vllm", "--engine-version", "0.6",
                              "--frontend", "openai-server", "--num-scheduler-steps", "8", "--batch", "32"])  # fmt: skip
    built = cli.generation(args)
    assert built == Generation.of(batch=32, engine="vllm", engine_version="0.6", frontend="openai-server",
                                  scheduler_steps=8)  # fmt: skip
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["generate"]
    engine = next(a for a in sub._actions if a.dest == "engine")
    assert tuple(engine.choices) == field_help(EngineOptions)["engine"]["choices"]
    assert engine.help == field_help(EngineOptions)["engine"]["help"]


def test_every_door_asks_the_answer_cache_with_the_same_key():
    from perfpredict.llm.answer_cache import key

    api = Generation.of(engine="vllm", frontend="openai-server", device="H100")
    assert key("llama-3-8b", api) == key("llama-3-8b", Generation(engine=EngineOptions("vllm", frontend="openai-server"),
                                                                  device="H100"))  # fmt: skip
    assert key("llama-3-8b", api) != key("llama-3-8b", api.but(frontend="offline"))
    assert key("llama-3-8b", api) != key("llama-3-8b", api.but(version="0.6"))


def test_the_report_names_the_engine_its_version_and_frontend_and_hf_refuses_server_options():
    from perfpredict.llm.generation import predict_generation
    from perfpredict.llm.render_generation import _engine_name

    r = predict_generation("Qwen/Qwen2-0.5B", prompt_tokens=64, new_tokens=8, device="H100", engine="sglang",
                           frontend="openai-server")  # fmt: skip
    assert (r.engine, r.engine_version, r.frontend) == ("sglang", "0.4", "openai-server")
    assert _engine_name(r) == "SGLang 0.4, behind its OpenAI server"
    assert "SGLang 0.4, overlap scheduler" in r.assumptions["engine"]
    assert "in its own process" in r.assumptions["frontend"]
    with pytest.raises(InvalidInputError, match="--engine-version and --frontend describe a serving engine"):
        predict_generation("gpt2", engine="hf", engine_version="0.6")
    with pytest.raises(InvalidInputError, match="is a llama.cpp GGUF format; use --engine llamacpp"):
        predict_generation("llama-3-8b", engine="vllm", weights="q4_k_m")


def test_llama_cpp_runs_gguf_weights_and_leaves_the_layers_it_is_told_to_on_the_cpu():
    from perfpredict.llm.generation import predict_generation
    from perfpredict.llm.vllm_config import EngineConfig
    from perfpredict.llm.weight_formats import FORMATS

    ask = dict(device="L4", engine="llamacpp", prompt_tokens=64, new_tokens=8)
    q4 = predict_generation("Qwen/Qwen2-0.5B", weights="q4_k_m", **ask)
    half = predict_generation("Qwen/Qwen2-0.5B", weights="q4_k_m", engine_config=EngineConfig(n_gpu_layers=12), **ask)
    # Q4_K_M: 4.85 bits per layer weight; half the 24 layers on the CPU: the GPU holds half the layer weights
    assert FORMATS["q4_k_m"].bytes_per_weight == pytest.approx(4.85 / 8)
    assert half.weights_bytes < q4.weights_bytes and "12 of 24 layers" in half.assumptions["layer offload"]
    assert half.tpot_mean_ms > q4.tpot_mean_ms  # host memory streams the other half, slower than the GPU's
    with pytest.raises(InvalidInputError, match="--n-gpu-layers is llama.cpp's"):
        predict_generation("Qwen/Qwen2-0.5B", engine="vllm", engine_config=EngineConfig(n_gpu_layers=4))
    with pytest.raises(InvalidInputError, match="llama.cpp runs GGUF weights: --weights int4 is not one of"):
        predict_generation("Qwen/Qwen2-0.5B", engine="llamacpp", weights="int4", device="L4")
