"""The attention implementation a HuggingFace model is captured with: ``sdpa``, ``eager`` or ``flash_attention_2``.

transformers runs one of several attention functions (``config._attn_implementation``); each is a different graph:

- ``sdpa`` (transformers' default where the model supports it): one ``scaled_dot_product_attention`` op, which a
  GPU dispatches to its flash, memory-efficient or cuDNN kernel; a mask is built where the model needs one.
- ``eager``: the scores materialised, ``matmul(q, k^T)``, the mask added, ``softmax``, ``matmul(p, v)``: what
  NeuSight measured, and what many users run.
- ``flash_attention_2``: the ``flash_attn`` package's kernel, which cannot be imported without a CUDA GPU. It is
  captured as the fused op it is: one ``_scaled_dot_product_flash_attention`` per layer (torch's FlashAttention-2
  kernel: no scores and no mask materialised, grouped key/value heads read as they are), through a function
  registered with transformers' ``AttentionInterface`` under a name of its own, so that nothing else in the process
  that uses the real ``flash_attention_2`` is touched. Padding is not modelled (every sequence full length), as for
  the other two.

``None`` everywhere means the model's own: transformers' default for a config, what a module in hand was built with.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from perfpredict.core.errors import InvalidInputError

ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
#: the name the fused stand-in is registered under in transformers (no "flash" in it: transformers would try to
#: import the flash_attn package for any name holding that word)
FUSED_NAME = "perfpredict_fused_fa2"
#: the prefix of the graph note that records the implementation captured (the report states it among its assumptions)
NOTE_PREFIX = "attention: "


def check(name: str | None) -> None:
    """Refuse a name that is not one of :data:`ATTN_IMPLEMENTATIONS` (None: the model's own)."""
    if name is not None and name not in ATTN_IMPLEMENTATIONS:
        raise InvalidInputError(
            f"attn_implementation {name!r} is not one of {', '.join(ATTN_IMPLEMENTATIONS)} (None: the model's own)"
        )


def transformers_name(model_class: Any, name: str) -> str:
    """The ``attn_implementation`` to hand transformers for ``name`` on a model of ``model_class``; refuses an
    implementation the class does not support, as transformers would."""
    check(name)
    label = getattr(model_class, "__name__", str(model_class))
    if name == "flash_attention_2":
        if not getattr(model_class, "_supports_flash_attn", False):
            raise InvalidInputError(
                f"{label} does not support flash_attention_2 in transformers; use --attn-implementation sdpa or eager"
            )
        _register_fused()
        return FUSED_NAME
    if name == "sdpa" and not getattr(model_class, "_supports_sdpa", False):
        raise InvalidInputError(f"{label} does not support sdpa in transformers; use --attn-implementation eager")
    return name


def user_name(transformers_impl: str | None) -> str | None:
    """The user's name for what a transformers model runs (the fused stand-in is flash_attention_2)."""
    return "flash_attention_2" if transformers_impl == FUSED_NAME else transformers_impl


def note(name: str | None, asked: bool) -> str:
    """The graph note that says which implementation was captured (``asked``: the user chose it)."""
    why = "as asked" if asked else "the model's own; --attn-implementation / attn_implementation= picks another"
    if name == "flash_attention_2":
        return (
            f"{NOTE_PREFIX}flash_attention_2 ({why}): captured as one fused attention op per layer, torch's "
            "FlashAttention-2 kernel (no scores or mask materialised; flash_attn itself needs a CUDA GPU), on a "
            "Hopper GPU no faster than FlashAttention-2's published rates (predictors/attention_kernels.py)"
        )
    if name == "eager":
        return f"{NOTE_PREFIX}eager ({why}): the scores materialised (matmul, softmax, matmul)"
    return f"{NOTE_PREFIX}{name} ({why}): one scaled_dot_product_attention op per layer"


def configured(config: Any, name: str | None) -> Any:
    """A copy of a transformers ``config`` that asks for attention ``name`` (None: the config as it is, with the
    implementation it may already ask for): :func:`build_with` honours it."""
    check(name)
    if name is None:
        return config
    config = copy.deepcopy(config)
    config._attn_implementation = name
    return config


def asked_of(config: Any) -> str | None:
    """The attention a config asks for (``configured``, or ``attn_implementation=`` when it was made), or None."""
    return user_name(getattr(config, "_attn_implementation", None))


def build_with(build: Any, config: Any) -> Any:
    """``build(config)`` running the attention ``config`` asks for: built with transformers' default, then switched
    (transformers would import flash_attn for flash_attention_2, which needs a CUDA GPU)."""
    name = asked_of(config)
    if name is None:
        return build(config)
    config = copy.deepcopy(config)
    config._attn_implementation = None
    model = build(config)
    wanted = transformers_name(type(model), name)
    model.set_attn_implementation(wanted)
    _check_switched(model, name, wanted)
    return model


def _check_switched(model: Any, name: str, wanted: str) -> None:
    if model.config._attn_implementation != wanted:  # transformers only warns where a class cannot switch
        raise InvalidInputError(
            f"{type(model).__name__} cannot switch its attention implementation after it is built; build it with "
            f"attn_implementation={name!r} (from_config(..., attn_implementation=...)) and leave the option out"
        )


@contextlib.contextmanager
def applied(model: Any, name: str | None) -> Iterator[str | None]:
    """While inside, a HuggingFace model in hand runs attention ``name`` (None: its own); yields the implementation
    it runs (None for a module that is not a HuggingFace model). Its config is restored on the way out."""
    config = getattr(model, "config", None)
    own = getattr(config, "_attn_implementation", None) if config is not None else None
    if name is None or not hasattr(model, "set_attn_implementation"):
        if name is not None:
            raise InvalidInputError(
                f"attn_implementation={name!r} applies to a HuggingFace model; {type(model).__name__} is not one "
                "(its attention is what its forward calls): leave attn_implementation out"
            )
        yield user_name(own) if config is not None and own is not None else None
        return
    wanted = transformers_name(type(model), name)
    if wanted == own:
        yield name
        return
    model.set_attn_implementation(wanted)
    try:
        _check_switched(model, name, wanted)
        yield name
    finally:
        model.set_attn_implementation(own)


def _register_fused() -> None:
    from transformers import AttentionInterface

    if FUSED_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(FUSED_NAME, fused_attention_forward)


def fused_attention_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function signature, run as torch's FlashAttention-2 op: ``(batch, heads, seq,
    dim)`` in, ``(batch, seq, heads, dim)`` out. Causal where the layer is and more than one query is asked (a
    decode step attends to the whole cache), as flash_attn's own wrapper decides."""
    import torch

    causal = query.shape[2] > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
    value_dim = value.shape[-1]
    if value_dim != query.shape[-1]:  # MLA (DeepSeek): the values padded to the query's size, as transformers does
        value = torch.nn.functional.pad(value, [0, query.shape[-1] - value_dim])
    out = torch.ops.aten._scaled_dot_product_flash_attention(
        query, key, value, dropout_p=float(dropout), is_causal=bool(causal), scale=scaling
    )[0]
    return out.transpose(1, 2)[..., :value_dim], None
