"""float8 training: the blocks' linears run their three GEMMs (the output, the input's gradient and the weight's
gradient) on float8 tensor cores, each operand cast to float8 just before.

- ``tensorwise`` (torchao ``Float8LinearConfig``'s default, dynamic scaling): each operand's scale comes from its
  absolute maximum, a reduction over the whole tensor (amax), then a cast kernel scales and converts it;
- ``rowwise`` (torchao, dynamic scaling per row): the same two kernels, the amax per row;
- ``delayed`` (Transformer Engine's ``DelayedScaling``): the scale comes from the amax history, and the cast kernel
  records the new amax as it converts, so there is no separate reduction; TE keeps each weight's float8 copy and its
  transpose for the step (``hardware.precision.HeldOptions.float8_cached_params``).

Each converted GEMM gets, for each of its two operands, the amax (where the recipe has one) and the cast as ops of
their own before it; the GEMM then reads float8 operands (one byte each) and runs at the device's float8 tensor
rate (``attrs["float8"]``, ``attrs["compute_dtype"]``; the predictors read them). Its output stays in the compute
dtype. torchao saves the high-precision input for the backward and casts it again there, which these ops show.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from perfpredict.compiler_hooks.graph_edit import Editor
from perfpredict.compiler_hooks.linears import block_linear_paths
from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta

FLOAT8 = "float8_e4m3fn"
NONE = "none"
FUSED_AMAX = {"delayed"}  # recipes whose cast computes the amax itself


def check_device(recipe: str, device: Any) -> None:
    """Refuse float8 on a GPU without float8 tensor cores, in one line."""
    if recipe != NONE and not device.peak_flops_per_s.get("fp8_tensor"):
        raise InvalidInputError(
            f"float8={recipe!r} needs float8 tensor cores, which {device.name} does not have (Ada and Hopper onward: "
            "L4, L40S, RTX-4090, H100, H200, B200); drop --float8 or choose one of those devices"
        )


def apply(graph: OpGraph, recipe: str, device: Any) -> OpGraph:
    """``graph`` with its blocks' linears in float8 under ``recipe`` (see the module docstring)."""
    if recipe == NONE:
        return graph
    if graph.phase != "training":
        raise InvalidInputError(
            f"float8={recipe!r} is a training recipe (torchao, Transformer Engine): predict a training step "
            "(--training), or give a float8 weight format to `perfpredict generate` for inference"
        )
    check_device(recipe, device)
    if any(n.attrs.get("float8") for n in graph.nodes):
        return graph
    paths = block_linear_paths(graph)
    if not paths:
        raise InvalidInputError(
            f"float8={recipe!r} converts the linear layers of the model's repeated blocks, and "
            f"{graph.name or 'this model'!r} has none; drop --float8"
        )
    feeds: dict[int, list[int]] = {}
    for a, b in graph.edges:
        feeds.setdefault(b, []).append(a)
    edit = Editor(graph)
    converted = 0
    for b, node in enumerate(graph.nodes):
        if node.op != ops.MATMUL or node.module_path not in paths:
            continue
        operands = sorted(feeds.get(b, ()))[:2]
        metas = [node.inputs[k] if k < len(node.inputs) else graph.nodes[a].outputs[0] for k, a in enumerate(operands)]
        for a, meta in zip(operands, metas):
            edit.reroute(a, b, _cast(edit, a, b, meta, recipe))
        edit.replace(b, _float8_gemm(node, recipe))
        converted += 1
    note = (
        f"float8 training ({recipe}): {converted} GEMMs of the blocks' linears on float8 tensor cores, each operand "
        "cast to float8 before it" + ("" if recipe in FUSED_AMAX else " after an amax reduction")
    )
    return edit.build(note)


def _cast(edit: Editor, a: int, b: int, meta: TensorMeta, recipe: str) -> tuple[int, int]:
    """The amax (unless the recipe fuses it) and the cast of operand ``a`` of GEMM ``b``; returns the cast's handle."""
    path = edit.graph.nodes[b].module_path
    inputs: tuple[Any, ...] = (a,)
    scale = TensorMeta((meta.shape[0],) if recipe == "rowwise" and meta.shape else (), "float32")
    if recipe not in FUSED_AMAX:
        amax = OpNode(
            name=f"float8_amax_{b}_{a}",
            op=ops.REDUCTION,
            target="amax",
            inputs=(meta,),
            outputs=(scale,),
            flops=2 * meta.numel,  # abs and max per element
            bytes_read=meta.nbytes,
            bytes_written=scale.nbytes,
            attrs=MappingProxyType({"float8_cast": recipe}),
            module_path=path,
        )
        inputs = (a, edit.before(b, amax, (a,)))
    cast = OpNode(
        name=f"float8_cast_{b}_{a}",
        op=ops.ELEMENTWISE,
        target="to_float8",
        inputs=(meta, scale),
        outputs=(TensorMeta(meta.shape, FLOAT8),),
        flops=(3 if recipe in FUSED_AMAX else 2) * meta.numel,  # scale and saturate (and the amax, fused)
        bytes_read=meta.nbytes + scale.nbytes,
        bytes_written=meta.numel,
        attrs=MappingProxyType({"kind": "mul", "float8_cast": recipe}),
        module_path=path,
    )
    return edit.before(b, cast, inputs)


def _float8_gemm(node: OpNode, recipe: str) -> OpNode:
    from dataclasses import replace

    inputs = tuple(TensorMeta(t.shape, FLOAT8) for t in node.inputs)
    return replace(
        node,
        inputs=inputs,
        bytes_read=sum(t.numel for t in inputs),
        attrs=MappingProxyType({**node.attrs, "float8": recipe, "compute_dtype": FLOAT8}),
    )


def float8_share(node: OpNode, device: Any) -> float:
    """How a float8 GEMM's time compares with the same GEMM in its own dtype: the ratio of the two tensor-core
    peaks (an H100's 989 and 1,979 TFLOP/s: 0.5), each at the share of its datasheet the GPU is read at
    (``hardware/attainable.py``: the H100's roofline run reaches 83% of the bf16 peak and 74% of the float8 one, so
    0.56 on a Hopper GPU), assuming float8 GEMMs otherwise reach the share of their peak that half-precision GEMMs
    of the same shape reach. 1 for any other op."""
    from perfpredict.hardware.attainable import attained_peak

    if not node.attrs.get("float8"):
        return 1.0
    own = node.outputs[0].dtype if node.outputs else "bfloat16"
    _, half_key = device.peak_flops(own, True)
    _, fp8_key = device.peak_flops(FLOAT8, True)
    half, fp8 = attained_peak(device, half_key), attained_peak(device, fp8_key)
    return half / fp8 if fp8 else 1.0
