"""A model and example inputs to one OpGraph, without running the model's arithmetic.

Three captures (``capture=``):

- ``"meta"`` (the default): an inference forward is recorded on meta stand-ins (``meta_trace``): milliseconds, no
  memory, nothing of the caller's touched. A training step goes through dynamo and AOTAutograd (forward and backward
  at the aten level), on a meta twin of the model: its structure copied, its weights and inputs meta tensors in the
  run dtype, so no arithmetic runs and no weight is copied.
- ``"dynamo"``: the same dynamo capture on the meta twin for inference too (the graph the ``torch.compile`` backend
  sees, graph breaks included; about a second for a small model).
- ``"real"``: dynamo on the real model and inputs. It runs the model's arithmetic on the CPU at the inputs' size,
  and warns so; it is for a forward that reads tensor values (``.item()``), which meta tensors cannot answer.

Any error a capture meets leaves as a :class:`~perfpredict.core.errors.FrontendError` of one line that says what to do.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import warnings
from collections.abc import Mapping
from typing import Any

from perfpredict.core.errors import FrontendError, InvalidInputError, PerfPredictError
from perfpredict.core.graph import OpGraph, merge_graphs

CAPTURES = ("meta", "dynamo", "real")


def capture_graph(
    model: Any,
    args: tuple,
    kwargs: Mapping[str, Any],
    *,
    phase: str,
    dtype: str | None,
    name: str,
    capture: str = "meta",
    reuse: Any = None,
    attn_implementation: str | None = None,
) -> OpGraph:
    """The OpGraph of ``model(*args, **kwargs)`` in ``phase``, in ``dtype`` (None: as built), by ``capture``.
    ``reuse`` (a ``block_reuse.BlockCache``) replays blocks seen in earlier captures of a meta inference forward.
    ``attn_implementation``: the attention a HuggingFace model runs (``attention_choice``; None: its own). An MoE
    layer routes statically and balanced (``moe_routing``); the graph's notes say both."""
    from perfpredict.compiler_hooks import attention_choice, moe_routing

    if capture not in CAPTURES:
        raise InvalidInputError(f"capture {capture!r} is not one of {', '.join(map(repr, CAPTURES))}")
    if capture == "real" and attn_implementation == "flash_attention_2":
        raise InvalidInputError(
            "attn_implementation='flash_attention_2' cannot run on this CPU: capture it on meta tensors "
            "(capture='meta' or 'dynamo')"
        )
    label = name or type(model).__name__
    batch = next((a.shape[0] for a in args if getattr(a, "ndim", 0)), 1)
    with (
        attention_choice.applied(model, attn_implementation) as attention,
        moe_routing.static_routing(model, int(batch)) as moe,
    ):
        graph = _captured(model, args, kwargs, phase, dtype, label, capture, reuse)
    notes = [attention_choice.note(attention, attn_implementation is not None)] if attention else []
    notes += [moe_routing.ROUTING_NOTE] if moe else []
    return graph.with_run(notes=(*graph.notes, *notes)) if notes else graph


def _captured(
    model: Any, args: tuple, kwargs: Mapping[str, Any], phase: str, dtype: str | None, label: str, capture: str, reuse
) -> OpGraph:
    try:
        if capture == "meta" and phase == "inference":
            graph = _meta_forward(model, args, kwargs, dtype, label, reuse)
        elif capture == "meta":
            graph = _meta_training(model, args, kwargs, dtype, label)
        elif capture == "real":
            graph = _real(model, args, kwargs, phase, dtype, label)
        else:
            twin, meta_args, meta_kwargs = meta_twin(model, args, kwargs, dtype)
            graph = dynamo_graph(twin, meta_args, meta_kwargs, phase, label)
        return _without_wrapper(graph, model)
    except PerfPredictError:
        raise
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0][:300]
        raise FrontendError(
            f"perfpredict could not capture {label!r} ({type(err).__name__}: {first}); check that "
            "model(*example_inputs) runs eagerly with these inputs, or try capture='dynamo' or capture='real'"
        ) from err


def _without_wrapper(graph: OpGraph, model: Any) -> OpGraph:
    """Module paths as the wrapped model names them, when ``model`` is a wrapper (``meta_trace.WRAPS``); the meta
    capture names them so already, dynamo's nn_module_stack does not."""
    from perfpredict.compiler_hooks.meta_trace import WRAPS, unwrapped

    inner = getattr(model, WRAPS, "")
    if not inner or not any(n.module_path.split(".")[0] == inner for n in graph.nodes):
        return graph
    nodes = tuple(dataclasses.replace(n, module_path=unwrapped(n.module_path, inner)) for n in graph.nodes)
    return dataclasses.replace(graph, nodes=nodes)


def _meta_forward(
    model: Any, args: tuple, kwargs: Mapping[str, Any], dtype: str | None, name: str, reuse: Any = None
) -> OpGraph:
    from perfpredict.compiler_hooks.fx_frontend import graph_from_fx

    # A capture makes thousands of short-lived objects that point at each other (fx nodes and their users);
    # Python's cyclic collector, triggered every 700 allocations, scanned them and every long-lived object for
    # 40% of a capture's time. It is paused for the capture and collects afterwards, as usual.
    paused = gc.isenabled()
    gc.disable()
    try:
        traced = _recorded(model, args, kwargs, dtype, training=False, blocks=reuse)
        return graph_from_fx(traced, name=name, reuse=reuse.op_nodes if reuse is not None else None)
    finally:
        if paused:
            gc.enable()


def _meta_training(model: Any, args: tuple, kwargs: Mapping[str, Any], dtype: str | None, name: str) -> OpGraph:
    """A training step: the forward recorded on meta stand-ins in train mode, then AOTAutograd's joint forward and
    backward of that recording, as the torch.compile backend observes a training step (no dynamo: its bytecode
    tracing is the slow part, and it stumbles on tensors a forward makes on the meta device)."""
    from perfpredict.compiler_hooks import meta_trace
    from perfpredict.compiler_hooks.aot_observe import observe_training

    gm, inputs = meta_trace.to_graph_module(_recorded(model, args, kwargs, dtype, training=True))
    graphs: list[OpGraph] = []
    observe_training(gm, inputs, name=name, on_graph=graphs.append)
    if not graphs:
        raise FrontendError(f"AOTAutograd traced no training graph from {name!r}; try capture='dynamo'")
    return graphs[0]


def _recorded(
    model: Any, args: tuple, kwargs: Mapping[str, Any], dtype: str | None, *, training: bool, blocks: Any = None
) -> Any:
    """The forward recorded on meta stand-ins, with the model in train or eval mode for the recording only."""
    import torch

    from perfpredict.compiler_hooks import meta_trace

    was_training = getattr(model, "training", None)
    try:
        if was_training is not None and was_training != training:
            model.train(training)
        target = getattr(torch, dtype) if dtype else None
        return meta_trace.trace(model, args, kwargs, dtype=target, grad=training, blocks=blocks)
    finally:
        if was_training is not None and was_training != training:
            model.train(was_training)


def meta_twin(model: Any, args: tuple, kwargs: Mapping[str, Any], dtype: str | None) -> tuple[Any, tuple, dict]:
    """A copy of the model whose parameters and buffers are meta tensors (in ``dtype`` where floating), and the
    inputs as meta tensors: the structure is copied, no weight is. The caller's model is left as it was."""
    import torch

    target = getattr(torch, dtype) if dtype else None
    memo: dict[int, Any] = {}
    if isinstance(model, torch.nn.Module):
        for tensor in [*model.parameters(), *model.buffers()]:
            if id(tensor) not in memo:
                memo[id(tensor)] = _meta_like(tensor, target)
    try:
        twin = copy.deepcopy(model, memo)
    except Exception as err:
        raise FrontendError(
            f"{type(model).__name__} cannot be copied to trace it on meta tensors ({type(err).__name__}: "
            f"{str(err)[:200]}); pass capture='meta' (inference) or capture='real'"
        ) from err
    meta = _meta_values(target)
    return twin, tuple(meta(a) for a in args), {k: meta(v) for k, v in kwargs.items()}


def _meta_like(tensor: Any, dtype: Any) -> Any:
    import torch

    floating = tensor.is_floating_point()
    meta = torch.empty_strided(
        tensor.shape, tensor.stride(), dtype=dtype if dtype is not None and floating else tensor.dtype, device="meta"
    )
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(meta, requires_grad=tensor.requires_grad and meta.is_floating_point())
    return meta


def _meta_values(dtype: Any) -> Any:
    import torch

    def meta(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return _meta_like(value, dtype).requires_grad_(value.requires_grad and value.is_floating_point())
        if isinstance(value, (tuple, list)):
            return type(value)(meta(v) for v in value)
        if isinstance(value, dict):
            return {k: meta(v) for k, v in value.items()}
        return value

    return meta


def dynamo_graph(model: Any, args: tuple, kwargs: Mapping[str, Any], phase: str, name: str) -> OpGraph:
    """torch.compile's capture (dynamo, and AOTAutograd's joint graph for a training step), subgraphs merged."""
    import torch

    from perfpredict.compiler_hooks.aot_observe import observe_training
    from perfpredict.compiler_hooks.fx_frontend import graph_from_fx

    graphs: list[OpGraph] = []
    if phase == "training":

        def backend(gm: Any, ex: list) -> Any:
            observe_training(gm, ex, name=name, on_graph=graphs.append)
            return gm.forward
    else:

        def backend(gm: Any, ex: list) -> Any:
            graphs.append(graph_from_fx(gm, ex, name=name))
            return gm.forward

    was_training = getattr(model, "training", None)
    limits = {"recompile_limit": 1_000_000, "accumulated_recompile_limit": 1_000_000}
    try:
        if hasattr(model, "train"):
            model.train(phase == "training")
        with torch._dynamo.config.patch(**limits), torch.set_grad_enabled(phase == "training"):
            torch.compile(model, backend=backend, dynamic=False)(*args, **kwargs)
    finally:
        if was_training is not None:
            model.train(was_training)
    if not graphs:
        raise FrontendError(
            f"torch.compile captured no graph from {name!r}; check that it runs eagerly with these inputs"
        )
    return merge_graphs(graphs, name=name)


def _real(model: Any, args: tuple, kwargs: Mapping[str, Any], phase: str, dtype: str | None, name: str) -> OpGraph:
    """The model run for real by dynamo: a copy cast to ``dtype`` where one is asked for."""
    import torch

    warnings.warn(
        f"capture='real' runs {name}'s arithmetic on the CPU at the inputs' size (and copies its weights to cast "
        "them where a dtype is given); keep the batch small and use predict_many for other batch sizes",
        RuntimeWarning,
        stacklevel=4,
    )
    if dtype is not None:
        target = getattr(torch, dtype)

        def cast(x: Any) -> Any:
            return x.to(target) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

        model = copy.deepcopy(model).to(target)
        args, kwargs = tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
    return dynamo_graph(model, args, kwargs, phase, name)
