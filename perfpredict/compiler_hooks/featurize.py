"""A model and example inputs to one OpGraph, without running the model (``capture.py``), cached per model, input
shapes, phase, dtype and capture: asking about another device, batch of predictors or report costs no new trace.

Every caller that turns a torch module into a graph goes through here: the Python API, HF configs
(``hf_capture.py``), generation's decode steps, the zoo's graph features and the training data.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import DTYPES, PHASES, OpGraph

_CACHE: OrderedDict[tuple, tuple[Any, OpGraph]] = OrderedDict()
_CACHE_SIZE = 32


def featurize(
    model: Any,
    example_inputs: Any = (),
    *,
    phase: str = "inference",
    dtype: str | None = None,
    example_kwargs: Mapping[str, Any] | None = None,
    name: str = "",
    capture: str = "meta",
    attn_implementation: str | None = None,
) -> OpGraph:
    """Capture ``model`` into one OpGraph without running it (``capture``: see :func:`perfpredict.api.predict`), cached by model,
    input shapes, phase, dtype, capture and attention implementation (a HuggingFace model's; None: its own)."""
    from perfpredict.compiler_hooks.capture import capture_graph

    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    kwargs = dict(example_kwargs or {})
    check_phase_and_dtype(phase, dtype)
    key = (
        id(model),
        _signature(args),
        _signature(tuple(sorted(kwargs.items()))),
        phase,
        dtype,
        capture,
        name,
        attn_implementation,
        getattr(getattr(model, "config", None), "_attn_implementation", None),  # the model's own, which may change
        _checkpointing(model),  # gradient_checkpointing_enable() after a first capture changes the training graph
    )
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is model:
        _CACHE.move_to_end(key)
        return hit[1]
    graph = capture_graph(
        model,
        args,
        kwargs,
        phase=phase,
        dtype=dtype,
        name=name,
        capture=capture,
        attn_implementation=attn_implementation,
    )
    _CACHE[key] = (weakref.ref(model) if _weakrefable(model) else (lambda: None), graph)
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return graph


def check_phase_and_dtype(phase: str, dtype: str | None) -> None:
    if phase not in PHASES:
        raise InvalidInputError(f"phase {phase!r} is not one of 'inference', 'training'")
    if dtype is not None and dtype not in DTYPES:
        raise InvalidInputError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")


def _signature(values: Any) -> tuple:
    out = []
    for v in values:
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
            out.append((v[0], *_signature((v[1],))))
        elif hasattr(v, "shape") and hasattr(v, "dtype"):
            out.append((tuple(v.shape), str(v.dtype), str(getattr(v, "device", ""))))
        else:
            out.append(repr(v)[:64])
    return tuple(out)


def _checkpointing(model: Any) -> tuple[str, ...]:
    """The modules whose HF gradient checkpointing is on (their ``gradient_checkpointing`` flag)."""
    modules = model.named_modules() if hasattr(model, "named_modules") else ()
    return tuple(name for name, m in modules if getattr(m, "gradient_checkpointing", False) is True)


def _weakrefable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
        return True
    except TypeError:
        return False
