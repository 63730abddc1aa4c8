"""torch.fx GraphModule -> OpGraph, for dynamo graphs (torch level) and AOTAutograd graphs (aten level).

Shapes come from each node's fake value: ``meta["example_value"]`` in dynamo graphs, ``meta["val"]`` in AOT
graphs. Parameters reach a dynamo graph as placeholders (dynamo inlines built-in modules), so a placeholder is a
parameter when its example input is an ``nn.Parameter`` or dynamo named it ``..._parameters_...``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from perfpredict.compiler_hooks import op_table
from perfpredict.core import op_kinds, ops
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.core.op_kinds import elementwise_costs
from perfpredict.core.op_kinds.builtin import attention_is_backward


@dataclass
class _Walk:
    """What the walk has learnt so far: tensor metas per fx node, op indices, and dynamic-shape notes."""

    metas: dict[Any, tuple[TensorMeta, ...]] = field(default_factory=dict)
    index: dict[Any, int] = field(default_factory=dict)
    params: set[Any] = field(default_factory=set)
    frozen: set[Any] = field(default_factory=set)  # parameters and buffers that do not train
    symbols: dict[str, int] = field(default_factory=dict)


def graph_from_fx(
    gm: Any,
    example_inputs: Sequence[Any] | None = None,
    *,
    phase: str = "inference",
    param_indices: set[int] | None = None,
    trainable_indices: set[int] | None = None,
    grad_param_indices: set[int] | None = None,
    batch_size: int | None = None,
    seq_len: int | None = None,
    source: str = "fx",
    name: str = "",
    reuse: dict | None = None,
) -> OpGraph:
    """Turn one fx GraphModule into an OpGraph.

    ``param_indices`` marks placeholders that are parameters or buffers when the caller knows (AOT joint
    graphs), ``trainable_indices`` those of them that train; otherwise example inputs and dynamo's placeholder
    names tell. ``grad_param_indices`` are the dynamo input indices whose gradients the joint graph returns.
    ``reuse`` maps the key a replayed node carries (``node.meta["reuse"]``, see ``block_reuse``) to the OpNode made
    for it before, which is taken again under the node's own name and module path.
    """
    walk = _Walk()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    param_count, param_bytes, trainable_count, trainable_bytes, input_bytes = 0, 0, 0, 0, 0
    user_inputs: list[TensorMeta] = []
    for i, node in enumerate(placeholders):
        example = example_inputs[i] if example_inputs is not None and i < len(example_inputs) else None
        metas = _metas(node.meta.get("example_value", node.meta.get("val", example)), walk)
        walk.metas[node] = metas
        if _is_param(node, example, i, param_indices):
            walk.params.add(node)
            size = sum(m.numel for m in metas)
            param_count += size
            param_bytes += sum(m.nbytes for m in metas)
            if _is_trainable(node, example, i, trainable_indices):
                trainable_count += size
                trainable_bytes += sum(m.nbytes for m in metas)
            elif phase == "training":  # a frozen weight of a training step (a LoRA run's base): QLoRA's NF4
                walk.frozen.add(node)
        elif metas:
            input_bytes += sum(m.nbytes for m in metas)
            user_inputs.extend(metas)

    nodes: list[OpNode] = []
    edges: list[tuple[int, int]] = []
    keep: set[int] = set()
    grads: set[int] = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            _record_attr(gm, node, walk)
        elif node.op in ("call_function", "call_method", "call_module"):
            op_node = _reused(node, walk, reuse) if reuse is not None else None
            op_node = op_node or _op_node(gm, node, walk)
            if reuse is not None and "reuse" in node.meta:
                reuse.setdefault(node.meta["reuse"], op_node)
            if op_node is None:
                continue
            idx = len(nodes)
            nodes.append(op_node)
            walk.index[node] = idx
            edges.extend((walk.index[src], idx) for src in _input_nodes(node) if src in walk.index)
        elif node.op == "output":
            keep, grads = _outputs(node, walk, grad_param_indices)

    batch, seq = _guess_batch_and_seq(user_inputs)
    notes = ()
    if walk.symbols:
        resolved = ", ".join(f"{k}={v}" for k, v in sorted(walk.symbols.items()))
        notes = (
            f"dynamic shapes: symbolic sizes resolved with dynamo's size hints ({resolved}); "
            "the prediction holds for these sizes",
        )
    return OpGraph(
        nodes=tuple(nodes),
        edges=tuple(edges),
        phase=phase,
        batch_size=batch_size if batch_size is not None else batch,
        seq_len=seq_len if seq_len is not None else seq,
        dtype=_dominant_dtype(nodes),
        source=source,
        param_count=param_count,
        param_bytes=param_bytes,
        trainable_param_count=trainable_count,
        trainable_param_bytes=trainable_bytes,
        input_bytes=input_bytes,
        keep_alive=frozenset(keep),
        grad_outputs=frozenset(grads),
        notes=notes,
        name=name,
    )


def _reused(node: Any, walk: _Walk, reuse: dict) -> OpNode | None:
    """The OpNode made for an earlier node of the same key, renamed; None where there is none yet."""
    known = reuse.get(node.meta.get("reuse"))
    if known is None:
        return None
    walk.metas[node] = known.outputs
    return replace(known, name=node.name, module_path=_module_path(node))


def _is_param(node: Any, example: Any, i: int, param_indices: set[int] | None) -> bool:
    if param_indices is not None:
        return i in param_indices
    try:
        import torch

        if isinstance(example, torch.nn.Parameter):
            return True
    except ImportError:  # pragma: no cover - torch is present whenever an fx graph exists
        pass
    return "_parameters_" in node.name or "_buffers_" in node.name


def _is_trainable(node: Any, example: Any, i: int, trainable_indices: set[int] | None) -> bool:
    if trainable_indices is not None:
        return i in trainable_indices
    return getattr(example, "requires_grad", True) and "_buffers_" not in node.name


def _record_attr(gm: Any, node: Any, walk: _Walk) -> None:
    """get_attr nodes hold constants or (in non-inlined graphs) parameters: keep their metas for consumers."""
    import torch

    value: Any = gm
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    walk.metas[node] = _metas(node.meta.get("val", value), walk)
    if isinstance(value, torch.nn.Parameter):
        walk.params.add(node)


def _op_node(gm: Any, node: Any, walk: _Walk) -> OpNode | None:
    outputs = _metas(node.meta.get("example_value", node.meta.get("val")), walk)
    walk.metas[node] = outputs
    if not outputs:
        return None  # size(), sym arithmetic and other non-tensor nodes carry no cost
    name, module = _name_and_module(gm, node)
    kind = _kind(name, node, outputs)
    arg_metas = [_arg_meta(a, walk) for a in node.args]
    if module is not None:
        arg_metas = _module_arg_metas(module, arg_metas)
    inputs = tuple(m for m in _flat_input_metas(node, walk))
    flops = op_kinds.op_flops(kind, name, arg_metas, node.args, node.kwargs, outputs)
    read, written = op_kinds.op_bytes(kind, name, inputs, outputs, arg_metas)
    params = sum(m.numel for src in _input_nodes(node) if src in walk.params for m in walk.metas.get(src, ()))
    frozen = sum(m.numel for src in _input_nodes(node) if src in walk.frozen for m in walk.metas.get(src, ()))
    if module is not None:
        params += sum(p.numel() for p in module.parameters(recurse=False))
    return OpNode(
        name=node.name,
        op=kind,
        target=name if module is None else type(module).__name__,
        inputs=inputs,
        outputs=outputs,
        flops=int(flops),
        bytes_read=read,
        bytes_written=written,
        params=params,
        attrs=MappingProxyType({**_attrs(kind, name, node), **({"frozen_params": frozen} if frozen else {})}),
        module_path=_module_path(node),
    )


_CASTS = {"to", "type_as", "float", "half", "bfloat16", "double", "int", "long", "bool", "type"}


def _kind(name: str, node: Any, outputs: tuple[TensorMeta, ...]) -> str:
    """The canonical kind, refined where the name alone cannot tell a free view from a copy."""
    kind = op_table.classify(name)
    if name == "contiguous" and _already_contiguous(node):
        return ops.VIEW
    if name in _CASTS and node.op == "call_method":  # x.to(x.dtype) and friends return x itself
        source = _arg_meta_of(node.args[0] if node.args else None)
        if source is not None and source == outputs[0]:
            return ops.VIEW
    if name in _DROPOUTS and not _dropout_active(name, node):
        return ops.VIEW  # eval-mode dropout returns its input
    if name == "unfold" and node.op == "call_function" and "functional" in getattr(node.target, "__module__", ""):
        return ops.POOLING  # F.unfold is im2col (a copy); Tensor.unfold is a view
    return kind


_DROPOUTS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "feature_dropout", "alpha_dropout", "native_dropout"}


def _dropout_active(name: str, node: Any) -> bool:
    """F.dropout(x, p, training, inplace): only training mode with p > 0 does any work."""
    if name == "native_dropout":  # aten.native_dropout(x, p, train)
        train, p = (node.args[2] if len(node.args) > 2 else True), (node.args[1] if len(node.args) > 1 else 0.5)
    else:
        train = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
        p = node.kwargs.get("p", node.args[1] if len(node.args) > 1 else 0.5)
    return bool(train) and not (isinstance(p, (int, float)) and p == 0)


def _arg_meta_of(src: Any) -> TensorMeta | None:
    value = getattr(src, "meta", {}).get("example_value", getattr(src, "meta", {}).get("val"))
    try:
        return TensorMeta(tuple(int(d) for d in value.shape), _dtype_name(value.dtype))
    except (AttributeError, TypeError):
        return None


def _name_and_module(gm: Any, node: Any) -> tuple[str, Any]:
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        cls = type(module).__name__
        return op_table.MODULE_FUNCTIONS.get(cls, cls), module
    return op_table.bare_name(node.target), None


def _module_arg_metas(module: Any, arg_metas: list) -> list:
    """A call_module node's weight is a module attribute, not an argument: add it as the second argument."""
    weight = getattr(module, "weight", None)
    if weight is not None and hasattr(weight, "shape"):
        w = TensorMeta(tuple(int(d) for d in weight.shape), _dtype_name(weight.dtype))
        return [arg_metas[0] if arg_metas else None, w, *arg_metas[1:]]
    return arg_metas


def _attrs(kind: str, name: str, node: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if kind == ops.ELEMENTWISE:
        attrs["kind"] = elementwise_costs.cost_class(name)
    if kind == ops.ATTENTION:
        attrs["backward"] = attention_is_backward(name)
        causal = _attention_causal(name, node)
        if causal is not None:
            attrs["is_causal"] = causal
        dropout = _attention_dropout(name, node)
        if dropout:
            attrs["dropout_p"] = dropout
    if kind == ops.CONV and node.op != "call_module":
        groups = node.kwargs.get("groups")
        if groups is None and name in ("conv1d", "conv2d", "conv3d") and len(node.args) > 6:
            groups = node.args[6]
        if isinstance(groups, int):
            attrs["groups"] = groups
    if "backward" in name:
        attrs["backward"] = True
    region = node.meta.get("ac_graph_id")
    if region is not None and node.meta.get("recompute") is not None:  # a torch.utils.checkpoint region's op
        attrs["checkpoint"] = int(region)
        if getattr(node.meta["recompute"], "name", "") in ("MUST_SAVE", "PREFER_SAVE"):
            attrs["checkpoint_save"] = True
    return attrs


# Where each SDPA-level op takes dropout_p when it is passed by position.
_DROPOUT_ARG = {
    "scaled_dot_product_attention": 4,
    "_scaled_dot_product_efficient_attention": 5,
    "_scaled_dot_product_flash_attention": 3,
    "_scaled_dot_product_flash_attention_for_cpu": 3,
}


#: where each attention overload takes ``is_causal`` positionally (an AOT graph passes every argument so): a causal
#: kernel skips the masked half of the score tiles, which a kernel library's published rate counts (attention_kernels)
_CAUSAL_ARG = {
    "scaled_dot_product_attention": 5,
    "_scaled_dot_product_efficient_attention": 6,
    "_scaled_dot_product_efficient_attention_backward": 11,
    "_scaled_dot_product_flash_attention": 4,
    "_scaled_dot_product_flash_attention_backward": 11,
    "_scaled_dot_product_flash_attention_for_cpu": 4,
    "_scaled_dot_product_cudnn_attention": 6,
}


def _attention_causal(name: str, node: Any) -> bool | None:
    """Whether the attention is causal (None when the op does not say)."""
    value = node.kwargs.get("is_causal")
    pos = _CAUSAL_ARG.get(name)
    if value is None and pos is not None and len(node.args) > pos:
        value = node.args[pos]
    return value if isinstance(value, bool) else None


def _attention_dropout(name: str, node: Any) -> float:
    """The attention's dropout probability (0.0 when it has none or the op does not say)."""
    value = node.kwargs.get("dropout_p")
    pos = _DROPOUT_ARG.get(name)
    if value is None and pos is not None and len(node.args) > pos:
        value = node.args[pos]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _outputs(node: Any, walk: _Walk, grad_param_indices: set[int] | None) -> tuple[set[int], set[int]]:
    """Graph outputs stay live to the end; in a joint graph, outputs that are parameter gradients are marked."""
    keep = {walk.index[src] for src in _input_nodes(node) if src in walk.index}
    grads: set[int] = set()
    descs = node.meta.get("desc")
    outs = node.args[0] if node.args else ()
    if grad_param_indices and isinstance(descs, (list, tuple)) and isinstance(outs, (list, tuple)):
        for desc, out in zip(descs, outs):
            grad_of = getattr(desc, "grad_of", None)
            if getattr(grad_of, "idx", None) in grad_param_indices and out in walk.index:
                grads.add(walk.index[out])
    return keep, grads


def _input_nodes(node: Any) -> list[Any]:
    from torch.fx.node import map_arg

    found: list[Any] = []
    map_arg((node.args, node.kwargs), found.append)
    return found


def _flat_input_metas(node: Any, walk: _Walk) -> list[TensorMeta]:
    return [m for src in _input_nodes(node) for m in walk.metas.get(src, ())]


def _arg_meta(arg: Any, walk: _Walk) -> TensorMeta | None:
    metas = walk.metas.get(arg) if hasattr(arg, "op") else None
    return metas[0] if metas and len(metas) == 1 else None


def _metas(value: Any, walk: _Walk) -> tuple[TensorMeta, ...]:
    """Flatten a fake value (tensor, or nested tuples and lists of them) into TensorMetas."""
    import torch

    if isinstance(value, torch.Tensor):
        shape = tuple(_concrete(d, walk) for d in value.shape)
        return (TensorMeta(shape, _dtype_name(value.dtype)),)
    if isinstance(value, (list, tuple)):
        return tuple(m for v in value for m in _metas(v, walk))
    return ()


def _concrete(dim: Any, walk: _Walk) -> int:
    """An int for a (possibly symbolic) size: dynamo's size hint, recorded so the report can say so."""
    if isinstance(dim, int):
        return dim
    node = getattr(dim, "node", None)
    hint = getattr(node, "hint", None)
    if hint is None and node is not None:
        try:
            hint = node.shape_env.size_hint(node.expr)
        except Exception:  # noqa: BLE001 - an unbacked size has no hint; 1 keeps the graph usable
            hint = 1
    value = int(hint if hint is not None else 1)
    walk.symbols[str(getattr(node, "expr", dim))] = value
    return value


def _already_contiguous(node: Any) -> bool:
    """``x.contiguous()`` on a contiguous tensor is free; only a strided input costs a copy."""
    src = node.args[0] if node.args else None
    value = getattr(src, "meta", {}).get("example_value", getattr(src, "meta", {}).get("val"))
    try:
        return bool(value.is_contiguous())
    except Exception:  # noqa: BLE001 - unknown strides: assume the copy happens
        return False


def _module_path(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    if not stack:
        return ""
    return clean_module_path(str(list(stack.values())[-1][0]))


# dynamo's root for the traced module or an argument: L['self'].encoder, L['args'][0].lm_head, L['mod'], self.x
_DYNAMO_ROOT = re.compile(r"^(?:L(?:\[[^\]]*\])+\.?|self\.)")


def clean_module_path(path: str) -> str:
    """``lm_head`` from dynamo's ``L['args'][0].lm_head`` (or ``L['self'].lm_head``, ``self.lm_head``); a path
    with dynamo's ``._modules['x']`` spelling reads ``.x``."""
    path = re.sub(r"\._modules\['([^']*)'\]", r".\1", path)
    return _DYNAMO_ROOT.sub("", path).lstrip(".")


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _dominant_dtype(nodes: Sequence[OpNode]) -> str:
    """The float dtype that carries the most FLOPs (the model's compute dtype)."""
    by_dtype: dict[str, int] = {}
    for n in nodes:
        for t in n.outputs[:1]:
            if t.dtype in ops.FLOAT_DTYPES:
                by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + max(n.flops, 1)
    return max(by_dtype, key=by_dtype.get) if by_dtype else "float32"


def _guess_batch_and_seq(user_inputs: Sequence[TensorMeta]) -> tuple[int, int | None]:
    """Batch = leading dim of the first real input; sequence = dim 1 of an integer (token id) input."""
    if not user_inputs:
        return 1, None
    first = next((t for t in user_inputs if len(t.shape) >= 1), None)
    batch = first.shape[0] if first is not None else 1
    seq = next((t.shape[1] for t in user_inputs if t.dtype.startswith("int") and len(t.shape) == 2), None)
    return max(1, batch), seq
