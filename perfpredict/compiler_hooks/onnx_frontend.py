"""ONNX model -> OpGraph.

Takes an ``onnx.ModelProto`` or a path (external data is loaded from the model's folder). Shapes come from
``onnx.shape_inference`` (strict mode off, data propagation on) after ``input_shapes`` has pinned the model's
dynamic input dimensions, e.g. ``{"input_ids": (1, 128)}``. ONNX op types map to the canonical vocabulary through
``op_names.ONNX_NAMES``; an op without a cost model is kept as ``unknown`` (coverage drops, nothing is dropped).

Any framework that exports ONNX (PyTorch, TensorFlow through tf2onnx, PaddlePaddle through paddle2onnx, JAX
through jax2onnx) reaches perfpredict this way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfpredict.compiler_hooks.dataflow_builder import DataflowBuilder, RawOp
from perfpredict.compiler_hooks.op_names import ONNX_FOLDED, ONNX_NAMES
from perfpredict.core import ops
from perfpredict.core.errors import FrontendError, InvalidInputError, require
from perfpredict.core.graph import OpGraph, TensorMeta

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

# onnx TensorProto.DataType -> canonical dtype name
_ONNX_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
    17: "float8_e4m3fn",
    19: "float8_e5m2",
}


def load_onnx(model: Any) -> Any:
    """An ``onnx.ModelProto`` from a ModelProto, a path or bytes; external data is loaded next to the file."""
    onnx = require("onnx", "onnx")
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise InvalidInputError(f"ONNX file {path!r} does not exist; pass the path of a .onnx model")
        try:
            return onnx.load(path, load_external_data=True)
        except Exception as err:
            raise FrontendError(
                f"{path!r} is not a readable ONNX model ({type(err).__name__}: {err}); "
                "export one with torch.onnx.export(model, args, 'model.onnx')"
            ) from err
    raise InvalidInputError(f"expected an onnx.ModelProto or a path, got {type(model).__name__!r}")


def dynamic_inputs(model: Any) -> dict[str, list[str | int | None]]:
    """Graph inputs (not initializers) with their dims; a str or None marks a dynamic dimension."""
    onnx = require("onnx", "onnx")
    proto = load_onnx(model)
    inits = {i.name for i in proto.graph.initializer}
    out: dict[str, list[str | int | None]] = {}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        dims = []
        for d in vi.type.tensor_type.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
        out[vi.name] = dims
    del onnx
    return out


def graph_from_onnx(
    model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    phase: str = "inference",
    name: str = "",
    fuse: bool = True,
    dtype: str | None = None,
) -> OpGraph:
    """Turn an ONNX model into an OpGraph.

    ``input_shapes`` fixes the shape of named graph inputs (required for every input with a dynamic dimension;
    a symbolic dimension name used by several inputs, such as ``batch``, is resolved consistently). ``dtype``
    costs every floating tensor, weights included, in that dtype (the file as a converter would rewrite it, e.g.
    onnxconverter-common's float16 pass); None keeps the file's own.
    """
    onnx = require("onnx", "onnx")
    proto = load_onnx(model)
    name = name or (proto.graph.name or "onnx_model")
    proto = _with_input_shapes(proto, dict(input_shapes or {}))
    if len(proto.functions):
        try:  # model-local functions (onnxscript exports): inline them so their ops are seen
            proto = onnx.inliner.inline_local_functions(proto)
        except Exception as err:  # noqa: BLE001 - keep the calls as unknown ops
            logger.info("could not inline the model's local functions: %s", err)
    inferred, folded = _inferred(onnx, proto, static=bool(input_shapes))
    graph = inferred.graph
    builder = DataflowBuilder(source="onnx")
    inits = {i.name: i for i in graph.initializer}

    def meta_of(vi: Any) -> TensorMeta | None:
        return _in_dtype(_meta(vi), dtype)

    for init in graph.initializer:
        shape = tuple(int(d) for d in init.dims)
        builder.add_param(init.name, _in_dtype(TensorMeta(shape, _ONNX_DTYPES.get(init.data_type, "float32")), dtype))
    value_info = {vi.name: vi for vi in [*graph.input, *graph.value_info, *graph.output]}
    missing: list[str] = []
    for vi in graph.input:
        if vi.name in inits:
            continue
        meta = meta_of(vi)
        if meta is None:
            missing.append(vi.name)
            continue
        builder.add_tensor(vi.name, meta)
        builder.graph_inputs.append(vi.name)
    if missing:
        dims = dynamic_inputs(proto)
        raise InvalidInputError(
            "ONNX input(s) "
            + ", ".join(f"{m!r} (dims {dims.get(m)!r})" for m in missing)
            + " have dynamic dimensions; give their shapes, e.g. input_shapes={"
            f"{missing[0]!r}: (1, 128)}} or --input-shape {missing[0]}=1x128"
        )
    unknown_shapes = 0
    for i, node in enumerate(graph.node):
        outputs = [o for o in node.output if o]
        for o in outputs:
            meta = meta_of(value_info.get(o))
            if meta is not None:
                builder.add_tensor(o, meta)
            else:
                unknown_shapes += 1
        inputs = [x for x in node.input if x]
        for x in inputs:
            if x in value_info and x not in builder.tensors:
                builder.add_tensor(x, meta_of(value_info[x]))
        attrs = {a.name: _attr_value(onnx, a) for a in node.attribute}
        op_type = node.op_type if node.domain in ("", "ai.onnx", "com.microsoft") else f"{node.domain}.{node.op_type}"
        raw = RawOp(
            name=node.name or f"{node.op_type}_{i}",
            target=op_type,
            bare=ONNX_NAMES.get(node.op_type, node.op_type)
            if node.domain in ("", "ai.onnx", "com.microsoft")
            else op_type,
            inputs=inputs,
            outputs=outputs,
            attrs=attrs,
        )
        if node.op_type in ONNX_FOLDED:
            raw.attrs["_folded"] = True
        _refine(raw, builder)
        builder.add_op(raw)
    builder.graph_outputs.extend(o.name for o in graph.output)
    notes = []
    if input_shapes:
        notes.append(
            "onnx: input shapes set to " + ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in input_shapes.items())
        )
    if dtype is not None:
        notes.append(f"onnx: every floating tensor and weight of the file costed in {dtype} (as asked)")
    if folded:
        notes.append(
            "onnx: constant-folded the shape arithmetic of a dynamic export (onnxscript's optimizer) so that shape "
            "inference could see every tensor at these input shapes"
        )
    if unknown_shapes:
        notes.append(
            f"onnx: shape inference left {unknown_shapes} tensor(s) without a static shape; the ops that "
            "produce them are costed from their known operands only"
        )
    return builder.build(name=name, phase=phase, notes=notes, fuse=fuse)


def _inferred(onnx: Any, proto: Any, static: bool) -> tuple[Any, bool]:
    """(the model with inferred shapes, whether its shape arithmetic was constant-folded first).

    A dynamic export computes shapes at run time (``Shape``, ``Gather``, ``Concat`` into ``Expand``); ONNX's
    inference cannot always follow that arithmetic, and loses every tensor after it where a broadcast is ambiguous:
    a BERT exported with a dynamic batch lost its whole graph at batch 1 (``Expand`` to ``[1, 128]`` of an operand
    of unknown shape may broadcast either way) and kept it at batch 2. With the input shapes fixed, the arithmetic
    is constant: onnxscript's optimizer folds it, and inference then sees every shape. The folded model is used
    only where it leaves fewer tensors unknown.
    """
    best = _infer(onnx, proto)
    missing = _unknown_count(best)
    if not static or not missing:
        return best, False
    try:
        import logging as _logging

        from onnxscript import optimizer

        quiet = _logging.getLogger("onnxscript.optimizer._constant_folding")
        level = quiet.level
        quiet.setLevel(_logging.ERROR)  # it warns for every constant it cannot evaluate
        try:
            folded = _infer(onnx, optimizer.optimize(proto))
        finally:
            quiet.setLevel(level)
    except Exception as err:  # noqa: BLE001 - folding is a second chance; the first answer stands without it
        logger.info("constant folding failed (%s); keeping onnx's own shape inference", err)
        return best, False
    return (folded, True) if _unknown_count(folded) < missing else (best, False)


def _infer(onnx: Any, proto: Any) -> Any:
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception as err:  # noqa: BLE001 - shape inference is best effort; our own walk fills gaps
        logger.info("onnx shape inference failed (%s); using the shapes stored in the model", err)
        return proto


def _unknown_count(proto: Any) -> int:
    """Node outputs whose shape inference left without a static shape."""
    graph = proto.graph
    info = {vi.name: vi for vi in [*graph.input, *graph.value_info, *graph.output]}
    return sum(1 for node in graph.node for o in node.output if o and _meta(info.get(o)) is None)


def _with_input_shapes(proto: Any, shapes: dict[str, Sequence[int]]) -> Any:
    """A copy of ``proto`` whose named inputs have the given static shapes (symbolic names resolved together)."""
    if not shapes:
        return proto
    onnx = require("onnx", "onnx")
    inputs = {vi.name: vi for vi in proto.graph.input}
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise InvalidInputError(
            f"input_shapes names {unknown!r}, but the model's inputs are {sorted(dynamic_inputs(proto))!r}"
        )
    symbols: dict[str, int] = {}
    for name, shape in shapes.items():
        dims = inputs[name].type.tensor_type.shape.dim
        if len(dims) and len(dims) != len(shape):
            raise InvalidInputError(
                f"input {name!r} has {len(dims)} dimensions, but input_shapes gives {tuple(shape)!r}"
            )
        for d, v in zip(dims, shape):
            if d.dim_param:
                symbols[d.dim_param] = int(v)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for vi in out.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in shapes:
            shape = [int(v) for v in shapes[vi.name]]
            del dims[:]
            for v in shape:
                dims.add().dim_value = v
        else:
            for d in dims:
                if d.dim_param in symbols:
                    d.dim_value = symbols[d.dim_param]
    # Stale value_info with symbolic dims would contradict the new shapes: let inference redo them.
    del out.graph.value_info[:]
    for o in out.graph.output:
        for d in o.type.tensor_type.shape.dim:
            if d.dim_param:
                d.Clear()
    return out


_FLOATING = frozenset({"float32", "float16", "bfloat16", "float64"})


def _in_dtype(meta: TensorMeta | None, dtype: str | None) -> TensorMeta | None:
    """``meta`` in ``dtype`` where it is floating (integer ids, masks and shapes keep theirs)."""
    if meta is None or dtype is None or meta.dtype not in _FLOATING:
        return meta
    return TensorMeta(meta.shape, dtype)


def _meta(vi: Any) -> TensorMeta | None:
    if vi is None or not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return TensorMeta(tuple(dims), _ONNX_DTYPES.get(tt.elem_type, "float32"))


def _attr_value(onnx: Any, attr: Any) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [
            v.decode(errors="replace") if isinstance(v, bytes) else v
            for v in value
            if isinstance(v, (bytes, int, float, str))
        ]
    if isinstance(value, (int, float, str)):
        return value
    return type(value).__name__  # tensors, graphs: not needed for costing


def _refine(op: RawOp, builder: DataflowBuilder) -> None:
    """ONNX spellings whose cost class depends on operands or attributes."""
    t = builder.tensors
    if op.target == "Gather" and op.inputs:
        table = t.get(op.inputs[0])
        if (
            op.inputs[0] in builder.params
            and table is not None
            and len(table.shape) == 2
            and int(op.attrs.get("axis", 0)) == 0
        ):
            op.bare = "embedding"
    elif op.target in ("MaxPool", "AveragePool", "LpPool") and "kernel_shape" in op.attrs:
        op.attrs["kernel"] = list(op.attrs["kernel_shape"])
    elif op.target == "Conv" or op.target == "ConvTranspose":
        op.attrs["transposed"] = op.target == "ConvTranspose"
    elif (
        op.target in ("Cast", "CastLike")
        and op.inputs
        and op.outputs
        and op.inputs[0] in t
        and op.outputs[0] in t
        and t[op.inputs[0]].dtype == t[op.outputs[0]].dtype
    ):
        op.bare = "identity"
    elif op.target in ("Attention", "MultiHeadAttention", "GroupQueryAttention") and op.inputs:
        q = t.get(op.inputs[0])
        if q is not None and len(q.shape) == 3:  # (B, S, hidden) with a head count attribute
            heads = int(op.attrs.get("q_num_heads", op.attrs.get("num_heads", 1)) or 1)
            op.attrs["layout"] = "BSHD"
            metas = [t.get(x) for x in op.inputs[:3]]
            if all(m is not None and len(m.shape) == 3 for m in metas):
                kv_heads = int(op.attrs.get("kv_num_heads", heads) or heads)
                split = [
                    TensorMeta((m.shape[0], m.shape[1], h, m.shape[2] // h), m.dtype)
                    for m, h in zip(metas, (heads, kv_heads, kv_heads))
                ]
                op.flops = ops.attention_flops(*((s.shape[0], s.shape[2], s.shape[1], s.shape[3]) for s in split))
    if op.bare not in ONNX_NAMES.values() and op.bare != "embedding":
        from perfpredict.compiler_hooks import op_table

        if op_table.classify(op.bare) == ops.UNKNOWN:
            op.attrs["_kind"] = ops.UNKNOWN


def onnx_tool_crosscheck(
    model: Any, graph: OpGraph | None = None, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> dict[str, Any]:
    """Compare our totals with onnx-tool's profile (MACs, params, memory), as the research did.

    Returns ``{"ours": {...}, "onnx_tool": {...}}``, or ``{"ours": {...}, "error": "..."}`` where onnx-tool
    cannot profile the model (it lacks shape rules for some dynamo-exported ops such as IsNaN, and for dynamic
    broadcasts); our own frontend is unaffected. MACs are compared on matmul, conv and attention work: ours is
    FLOPs / 2, onnx-tool's the MACs of MatMul, Gemm, Conv and ConvTranspose nodes. "memory" is onnx-tool's
    definition: parameter bytes plus every node output written once.
    """
    proto = load_onnx(model)
    graph = graph or graph_from_onnx(proto, input_shapes=input_shapes, fuse=False)
    heavy = (ops.MATMUL, ops.CONV, ops.ATTENTION)
    ours = {
        "macs": sum(n.flops for n in graph.nodes if n.op in heavy) // 2,
        "params": graph.param_count,
        "memory": graph.param_bytes + sum(n.output_bytes for n in graph.nodes),
    }
    try:
        import onnx_tool

        tool = onnx_tool.Model(proto)
        shapes = {k: np.zeros(tuple(v), dtype=_np_dtype(proto, k)) for k, v in (input_shapes or {}).items()}
        tool.graph.shape_infer(shapes or None)
        tool.graph.profile()
        if not tool.graph.valid_profile:
            raise FrontendError("onnx-tool produced no valid profile")
        macs = 0
        for node in tool.graph.nodemap.values():
            if node.op_type in ("MatMul", "Gemm", "Conv", "ConvTranspose"):
                macs += int(round(node.macs[0]))
                if len(node.input) > 2:  # onnx-tool adds one MAC per output for the bias; torch's counter does not
                    macs -= int(np.prod(tool.graph.tensormap[node.output[0]].get_shape()))
        theirs = {
            "macs": macs,
            "params": int(tool.graph.params),
            "memory": int(tool.graph.memory),
            "total_macs": int(round(tool.graph.macs[0])),
        }
    except Exception as err:  # noqa: BLE001 - onnx-tool gaps are reported, never raised
        return {"ours": ours, "error": f"{type(err).__name__}: {err}"}
    return {"ours": ours, "onnx_tool": theirs}


def _np_dtype(proto: Any, name: str) -> str:
    for vi in proto.graph.input:
        if vi.name == name:
            return {1: "float32", 6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64"}.get(
                vi.type.tensor_type.elem_type, "float32"
            )
    return "float32"
