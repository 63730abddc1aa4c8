"""The OpGraph of a HuggingFace config, captured the fast way where the model is a deep stack of identical layers.

A transformer of L layers is traced with two of them and the rest copied (``layer_replication``); the parameter
totals come from the full model, built on the meta device (no memory). Where the copy cannot be trusted (layers of
different kinds, a graph whose layers do not line up, a config that refuses two layers), the whole model is traced,
as before. ``cached`` adds the on-disk graph cache (``graph_store``): the CLI and the web page capture through it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from perfpredict.core.graph import OpGraph


def cached(
    id_or_path: Any,
    *,
    batch_size: int,
    seq_len: int | None,
    dtype: str,
    phase: str,
    use_cache: bool = True,
    attn_implementation: str | None = None,
    lora: tuple[int, str | None] | None = None,
    model_class: str | None = None,
) -> tuple[OpGraph, str]:
    """``capture``, answered from the on-disk graph cache when the same question was captured before. A config
    given as a dict (an uploaded config.json) is keyed by its fields. ``lora``: (rank, targets) of LoRA adapters
    (``compiler_hooks.lora``)."""
    from perfpredict.caching import graph_store
    from perfpredict.compiler_hooks.hf_frontend import raw_config

    fields, name = (
        (id_or_path, str(id_or_path.get("_name_or_path") or id_or_path.get("model_type", "config")))
        if isinstance(id_or_path, dict)
        else raw_config(id_or_path)
    )
    question = {"batch": batch_size, "seq": seq_len, "phase": phase, "dtype": dtype, "attn": attn_implementation}
    extra = {"lora": list(lora)} if lora else {}
    if model_class:
        extra["model_class"] = model_class
    key = graph_store.key(config=fields, name=name, **question, **extra)
    graph = graph_store.load(key) if use_cache else None
    if graph is None:
        source = _config_of(fields, name) if isinstance(id_or_path, dict) else id_or_path
        graph, name = capture(
            source,
            batch_size=batch_size,
            seq_len=seq_len,
            dtype=dtype,
            phase=phase,
            attn_implementation=attn_implementation,
            lora=lora,
            model_class=model_class,
        )
        graph_store.save(key, graph)
    return graph, graph.name or name


def _config_of(fields: dict, name: str) -> Any:
    from perfpredict.compiler_hooks.hf_frontend import config_from_dict

    return config_from_dict(fields, name=name)


def capture(
    id_or_path: Any,
    *,
    batch_size: int,
    seq_len: int | None,
    dtype: str,
    phase: str,
    attn_implementation: str | None = None,
    lora: tuple[int, str | None] | None = None,
    model_class: str | None = None,
) -> tuple[OpGraph, str]:
    """(the OpGraph, the model's name) for a shipped id, alias or config.json, built on the meta device, with
    ``attn_implementation`` (None: transformers' default for it), ``lora``'s (rank, targets) adapters and
    ``model_class`` (a transformers class name; None: the config's deployed head or its base model), where given;
    an MoE routes statically (``moe_routing``)."""
    from perfpredict.compiler_hooks import hf_frontend as hf
    from perfpredict.compiler_hooks.featurize import featurize
    from perfpredict.compiler_hooks.lora import describe, with_lora

    config = hf.load_config(id_or_path)
    name = config.name_or_path or config.model_type

    def trace(model: Any, cfg: Any) -> OpGraph:
        inputs = hf.example_inputs(config, batch_size, seq_len, device="meta", dtype=dtype)
        if hf.needs_decoder_inputs(model):  # a seq2seq head: its decoder runs on as many tokens as the encoder
            inputs = hf.with_decoder_inputs(config, inputs)
        return featurize(model, inputs, phase=phase, name=name, attn_implementation=attn_implementation)

    def build(cfg: Any) -> Any:
        model = hf.build_model(cfg, dtype=dtype, model_class=model_class)
        return with_lora(model, *lora) if lora else model

    graph = traced_stack(config, build, trace)
    if lora:
        graph = graph.with_run(notes=(*graph.notes, describe(*lora, graph.trainable_param_count, graph.param_count)))
    return graph, name


def traced_stack(
    config: Any, build: Callable[[Any], Any], trace: Callable[[Any, Any], OpGraph], copy_layers: bool = True
) -> OpGraph:
    """``trace(build(config), config)``: for a deep stack of identical layers, on a two-layer copy of the config
    with the other layers copied (``layer_replication``); on the whole model where that cannot be trusted (layers of
    different kinds or parameters, a model that will not run with two layers, regions that do not line up)."""
    from perfpredict.compiler_hooks import layer_replication as lr

    full = build(config)  # meta: no memory; its parameters say whether the layers are alike, and their totals
    field = lr.layer_field(config)
    layers = getattr(config, field) if field else 0
    kinds = getattr(config, "layer_types", None)
    if copy_layers and layers > lr.TRACE_LAYERS and (not kinds or len(set(kinds)) == 1) and layers_alike(full):
        small = copy.deepcopy(config)
        setattr(small, field, lr.TRACE_LAYERS)
        if kinds:
            small.layer_types = kinds[: lr.TRACE_LAYERS]
        try:
            model = build(small)
            graph = trace(model, small)
        except Exception:  # noqa: BLE001 - a model that will not run with two layers (ConvNeXt's stages): whole
            graph = None
        if graph is not None:
            added = tuple(a - b for a, b in zip(param_totals(full), param_totals(model)))  # the copied layers'
            copied = lr.replicate(graph, layers, added)
            if copied is not None:
                return copied
    return trace(full, config)


def layers_alike(model: Any) -> bool:
    """Whether every layer of the model's stack from layer 1 on holds the same parameters (names and shapes) as
    layer 1: a stack whose first layers are dense and the rest MoE (DeepSeek's ``first_k_dense_replace``,
    Qwen-MoE's sparse steps) is not one layer repeated."""
    from perfpredict.compiler_hooks import layer_replication as lr

    layers: dict[int, set] = {}
    for name, p in model.named_parameters():
        index = lr.layer_of(name)
        if index is not None:
            rest = name.split(f".{index}.", 1)[-1]
            layers.setdefault(index, set()).add((rest, tuple(p.shape)))
    return len(layers) > lr.TRACE_LAYERS and all(layers[i] == layers[1] for i in layers if i >= 1)


def param_totals(model: Any) -> tuple[int, int, int, int]:
    """(parameters, their bytes, trainable ones, their bytes) of a model."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    return (
        sum(p.numel() for p in params),
        sum(p.numel() * p.element_size() for p in params),
        sum(p.numel() for p in trainable),
        sum(p.numel() * p.element_size() for p in trainable),
    )
