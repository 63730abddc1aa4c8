"""The graphs of generation: the prefill (one forward over the prompt) and one decode step with a real KV cache.

A decode step is the causal LM's forward on one new token per sequence, with a HuggingFace cache object holding
``context`` tokens already: ``DynamicCache`` (what ``generate`` uses by default: each step concatenates the new K
and V onto the cache, so the step copies the cache too) or ``StaticCache`` (preallocated to ``max_cache_len``; the
step writes one slot in place, and attention runs over the whole preallocated length under a mask, which is what
the kernels do). The cache is filled with meta tensors, so no memory is used at any context length. Like the
prefill (``hf_capture``), a deep stack is traced with two layers and copied, checked op by op by a test.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpGraph

CACHES = ("dynamic", "static")


def decode_graph(
    config: Any,
    *,
    batch: int,
    context: int,
    dtype: str,
    cache: str = "dynamic",
    max_cache_len: int | None = None,
    replicate: bool = True,
) -> OpGraph:
    """The OpGraph of one decode step at ``context`` tokens of cache (the new token is number context + 1)."""
    if cache not in CACHES:
        raise InvalidInputError(f"cache {cache!r} is not one of {', '.join(CACHES)}")

    def trace(model: Any, cfg: Any) -> OpGraph:
        return _trace_decode(model, cfg, batch, context, dtype, cache, max_cache_len)

    key = {"step": "decode", "batch": batch, "context": context, "cache": cache, "max_cache_len": max_cache_len}
    return _captured(config, dtype, trace, replicate, key)


def prefill_graph(config: Any, *, batch: int, prompt: int, dtype: str, replicate: bool = True) -> OpGraph:
    """The OpGraph of the prefill: one forward over ``prompt`` tokens per sequence. As ``generate`` does, only the
    last position's logits are computed (``logits_to_keep=1``) where the model takes it."""

    def trace(model: Any, cfg: Any) -> OpGraph:
        import inspect

        import torch

        from perfpredict.compiler_hooks.capture import capture_graph

        ids = torch.zeros(batch, prompt, dtype=torch.long, device="meta")
        keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        step = _Prefill(model, keep)
        name = f"{cfg.name_or_path or cfg.model_type} prefill"
        return capture_graph(step, (ids,), {}, phase="inference", dtype=None, name=name)

    return _captured(config, dtype, trace, replicate, {"step": "prefill", "batch": batch, "prompt": prompt})


def _captured(config: Any, dtype: str, trace, replicate: bool, question: dict) -> OpGraph:
    """``trace(model, config)`` on the causal LM, its layers copied from two where they can be
    (``hf_capture.traced_stack``), answered from the on-disk graph cache (``graph_store``) when the same step of
    the same config was traced before: a repeated ``generate --engine hf`` question traces nothing."""
    from perfpredict.caching import graph_store
    from perfpredict.compiler_hooks.attention_choice import asked_of
    from perfpredict.compiler_hooks.hf_capture import traced_stack

    attn = asked_of(config)  # the attention the config asks for (attention_choice.configured), None: its default
    key = graph_store.key(config=config.to_dict(), dtype=dtype, replicate=replicate, attn=attn, **question)
    graph = graph_store.load(key)
    if graph is None:
        graph = traced_stack(config, lambda cfg: _causal_lm(cfg, dtype), trace, copy_layers=replicate)
        graph_store.save(key, graph)
    return graph


def check_decoder(source: Any) -> None:
    """Refuse, in one line, a model that cannot generate: one with no causal LM in transformers (a vision model,
    T5's encoder), or an encoder-only one (BERT, RoBERTa) whose causal-LM class would attend both ways unless its
    config says ``is_decoder`` (transformers warns about it on every layer, and the answer would mean nothing).

    ``source``: what ``hf_frontend.load_config`` takes (a shipped id, a config.json path, a ``PretrainedConfig``).
    A config.json whose ``model_type`` is a decoder-only LLM the serving engines build (``decoder_spec.SUPPORTED``:
    each is a causal LM in transformers) is taken from its raw fields alone: importing transformers (and torch
    under it) to ask its mappings cost a fresh ``generate`` process 7-12 s of CPU for an engine that needs
    neither. Anything else is asked of transformers' auto mappings."""
    from perfpredict.compiler_hooks.hf_frontend import load_config, raw_config
    from perfpredict.llm.decoder_spec import SUPPORTED

    if isinstance(source, (str, os.PathLike)):
        fields, _ = raw_config(source)
        if fields.get("model_type") in SUPPORTED and not fields.get("is_encoder_decoder"):
            return
    config = load_config(source)
    from transformers.models.auto import modeling_auto as auto

    kind = config.model_type
    causal, masked = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if kind in causal and not (kind in masked and not config.is_decoder and not config.is_encoder_decoder):
        return
    what = "an encoder-only model" if kind in masked else "not a decoder with a causal LM head"
    raise InvalidInputError(
        f"{config.name_or_path or kind} ({kind}) is {what}: generate takes a decoder-only LLM ({shipped_decoders()} "
        "are shipped: `perfpredict models`); `perfpredict predict` predicts this model's forward pass"
    )


def shipped_decoders() -> str:
    """The model types of the shipped decoder-only LLMs ("gpt2, llama, ..."): what ``generate`` takes."""
    from perfpredict.compiler_hooks.hf_frontend import known_models, raw_config, shipped_entry

    decoders = [m for m in known_models() if shipped_entry(m)["model_class"].endswith(("ForCausalLM", "LMHeadModel"))]
    return ", ".join(sorted({raw_config(m)[0]["model_type"] for m in decoders}))


def _causal_lm(config: Any, dtype: str):
    """The config's causal LM (its LM head included) on the meta device, with its cache on, running the attention
    the config asks for (``attention_choice.configured``)."""
    import torch

    from perfpredict.compiler_hooks.attention_choice import build_with
    from perfpredict.compiler_hooks.hf_frontend import torch_dtype
    from perfpredict.core.errors import UnknownModelError, require

    transformers = require("transformers", "hf")
    config = copy.deepcopy(config)
    config.use_cache = True

    def build(cfg: Any) -> Any:
        try:
            with torch.device("meta"):
                return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype(dtype))
        except ValueError as err:  # not a decoder with an LM head (an encoder, a vision model)
            raise UnknownModelError(
                f"{cfg.model_type} has no causal LM in transformers: generation needs a decoder with an LM head"
            ) from err

    return build_with(build, config).eval()


def _trace_decode(
    model: Any, config: Any, batch: int, context: int, dtype: str, cache: str, max_cache_len: int | None
) -> OpGraph:
    import torch

    from perfpredict.compiler_hooks.capture import capture_graph
    from perfpredict.compiler_hooks.hf_frontend import torch_dtype

    kv = _filled_cache(config, batch, context, torch_dtype(dtype), cache, max_cache_len)
    ids = torch.zeros(batch, 1, dtype=torch.long, device="meta")
    position = torch.full((batch, 1), context, dtype=torch.long, device="meta")
    step = _Step(model, kv, static=cache == "static")
    name = f"{config.name_or_path or config.model_type} decode"
    return capture_graph(step, (ids, position), {}, phase="inference", dtype=None, name=name)


def _filled_cache(config: Any, batch: int, context: int, dtype: Any, cache: str, max_cache_len: int | None):
    """A cache object holding ``context`` tokens of meta K and V per layer (its own layers: sliding or full)."""
    import torch
    from transformers import DynamicCache, StaticCache

    from perfpredict.llm.kv_cache import kv_geometry

    geometry = kv_geometry(config)
    if cache == "static":
        with torch.device("meta"):
            kv = StaticCache(config=config, max_cache_len=max_cache_len or context + 1)
        # generate() allocates the static cache once, before the first step: allocated here, its zeros are not
        # part of every step's trace (transformers >= 4.56 allocates lazily, on the first update)
        if hasattr(kv, "early_initialization"):
            kv.early_initialization(batch, geometry.kv_heads, geometry.head_dim, dtype, torch.device("meta"))
        return kv
    kv = DynamicCache(config=config)
    shape = (batch, geometry.kv_heads, context, geometry.head_dim)
    for layer in range(geometry.layers):
        kv.update(torch.zeros(shape, dtype=dtype, device="meta"), torch.zeros(shape, dtype=dtype, device="meta"), layer)
    return kv


class _Prefill:
    """Builds (lazily) the module that runs the prefill, keeping the last position's logits where it can."""

    def __new__(cls, model: Any, keep_last: bool):
        import torch

        class Prefill(torch.nn.Module):
            perfpredict_wraps = "m"  # module paths are the model's own (compiler_hooks.meta_trace.WRAPS)

            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, ids):
                if keep_last:
                    return self.m(input_ids=ids, logits_to_keep=1, use_cache=False).logits
                return self.m(input_ids=ids, use_cache=False).logits

        return Prefill()


class _Step:
    """Builds (lazily, so torch loads only when tracing) the module that runs one decode step."""

    def __new__(cls, model: Any, kv: Any, static: bool):
        import torch

        class DecodeStep(torch.nn.Module):
            perfpredict_wraps = "m"  # module paths are the model's own (compiler_hooks.meta_trace.WRAPS)

            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, ids, position):
                if static:  # the new token's slot in the preallocated cache
                    return self.m(input_ids=ids, past_key_values=kv, cache_position=position[0], use_cache=True).logits
                return self.m(input_ids=ids, past_key_values=kv, position_ids=position, use_cache=True).logits

        return DecodeStep()
