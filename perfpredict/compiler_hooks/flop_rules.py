"""FLOPs of one fx node: pick the right arguments for each op name, then apply the formula in ops.py.

Argument positions differ between spellings of the same op (``linear(x, w)``, ``addmm(bias, a, b)``,
``convolution(x, w, b, stride, padding, dilation, transposed, ...)``); this module knows them, ops.py does the
arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from perfpredict.compiler_hooks import op_table
from perfpredict.core import ops
from perfpredict.core.graph import TensorMeta

Metas = Sequence[TensorMeta | None]


def node_flops(
    name: str, kind: str, arg_metas: Metas, args: Sequence[Any], kwargs: dict[str, Any], outputs: Sequence[TensorMeta]
) -> int:
    """FLOPs for one node of canonical ``kind`` whose bare name is ``name``; 0 when the shapes are missing."""
    rule = _RULES.get(kind)
    if rule is None:
        return 0
    try:
        return int(rule(name, list(arg_metas), args, kwargs, outputs))
    except (IndexError, TypeError, ValueError, AttributeError):
        return 0  # NB: a spelling we do not know the argument layout of; counted as free rather than guessed


def _shape(meta: TensorMeta | None) -> tuple[int, ...]:
    if meta is None:
        raise ValueError("missing tensor argument")
    return meta.shape


def _matmul(name: str, a: Metas, args: Sequence[Any], kwargs: dict, outputs: Sequence[TensorMeta]) -> int:
    if name == "linear":
        return ops.linear_flops(_shape(a[0]), _shape(a[1]))
    if name == "bilinear":
        # x1 (..., in1), x2 (..., in2), weight (out, in1, in2): every output is in1*in2 multiply-adds.
        rows = math.prod(_shape(a[0])[:-1])
        return 2 * rows * math.prod(_shape(a[2]))
    if name in ("addmm", "baddbmm", "addbmm", "addmv"):
        return ops.matmul_flops(_shape(a[1]), _shape(a[2]))
    if name == "einsum":
        return _einsum(args, a)
    if name == "_grouped_mm" and len(_shape(a[0])) == 2 and len(_shape(a[1])) == 3:
        # MoE experts: rows (tokens x top-k) of mat_a [M, K], each multiplied by its group's [K, N] of mat_b
        rows, inner = _shape(a[0])
        return 2 * rows * inner * _shape(a[1])[2]
    if name == "tensordot":
        # NB: prod(a) * prod(b) * prod(out) = (M*K)(K*N)(M*N) for a pure contraction, so its root is M*N*K.
        return int(2 * math.sqrt(math.prod(_shape(a[0])) * math.prod(_shape(a[1])) * outputs[0].numel))
    return ops.matmul_flops(_shape(a[0]), _shape(a[1]))


def _einsum(args: Sequence[Any], a: Metas) -> int:
    """2 x the product of every index size, as a chain of bmm calls counts it (two operands)."""
    equation = str(args[0]).replace(" ", "")
    operands = [m for m in a[1:] if m is not None]
    if not operands and len(args) > 1:
        raise ValueError("einsum operands given as a list")
    lhs = equation.split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for term, meta in zip(lhs, operands):
        letters = term.replace("...", "")
        offset = len(meta.shape) - len(letters)  # dims covered by the ellipsis come first
        for i, letter in enumerate(letters):
            sizes[letter] = meta.shape[offset + i]
        if offset:
            sizes[f"...{offset}"] = math.prod(meta.shape[:offset])
    if len(operands) == 1:
        return operands[0].numel
    return 2 * math.prod(sizes.values())


def _conv(name: str, a: Metas, args: Sequence[Any], kwargs: dict, outputs: Sequence[TensorMeta]) -> int:
    if name == "convolution_backward":
        mask = args[10] if len(args) > 10 else kwargs.get("output_mask", (True, True, False))
        return ops.conv_backward_flops(
            _shape(a[0]), _shape(a[1]), _shape(a[2]), bool(args[7]), bool(mask[0]), bool(mask[1])
        )
    if name.startswith("conv_transpose"):
        transposed = True
    elif name in ("convolution", "_convolution"):
        transposed = bool(args[6]) if len(args) > 6 else bool(kwargs.get("transposed", False))
    else:
        transposed = False
    return ops.conv_flops(_shape(a[0]), _shape(a[1]), outputs[0].shape, transposed)


def _attention(name: str, a: Metas, args: Sequence[Any], kwargs: dict, outputs: Sequence[TensorMeta]) -> int:
    if op_table.is_attention_backward(name):
        return ops.attention_backward_flops(_shape(a[1]), _shape(a[2]), _shape(a[3]))
    if name == "multi_head_attention_forward":
        # (L, N, E) query and (S, N, E) key/value: input projections, attention, one output projection.
        seq_q, batch, embed = _shape(a[0])
        seq_k = _shape(a[1])[0] if len(a) > 1 and a[1] is not None else seq_q
        proj = 2 * batch * embed * embed * (2 * seq_q + 2 * seq_k)  # q and out over L, k and v over S
        return proj + ops.attention_flops((batch, seq_q, embed), (batch, seq_k, embed), (batch, seq_k, embed))
    return ops.attention_flops(_shape(a[0]), _shape(a[1]), _shape(a[2]))


def _first_numel(a: Metas, outputs: Sequence[TensorMeta]) -> int:
    first = next((m for m in a if m is not None), None)
    return first.numel if first is not None else (outputs[0].numel if outputs else 0)


def _pooling(name: str, a: Metas, args: Sequence[Any], kwargs: dict, outputs: Sequence[TensorMeta]) -> int:
    out = outputs[0].numel if outputs else 0
    if name.startswith("adaptive") or name.startswith("_adaptive"):
        return _first_numel(a, outputs)  # every input element is read into one window
    if "pool" not in name:
        return 4 * out  # NB: resampling (interpolate, upsample, grid_sample, fold): a few FLOPs per output
    position = 2 if name.startswith("lp_pool") else 1  # lp_pool2d(x, norm_type, kernel_size)
    kernel = args[position] if len(args) > position else kwargs.get("kernel_size", 1)
    if isinstance(kernel, int):
        spatial = max(1, len(outputs[0].shape) - 2) if outputs else 2
        kernel = [kernel] * spatial
    if isinstance(kernel, (list, tuple)) and all(isinstance(k, int) for k in kernel):
        return ops.pooling_flops(out, kernel)
    return out


_RULES = {
    ops.MATMUL: _matmul,
    ops.CONV: _conv,
    ops.ATTENTION: _attention,
    ops.POOLING: _pooling,
    ops.NORM: lambda n, a, args, kw, out: ops.norm_flops(_first_numel(a, out)),
    ops.SOFTMAX: lambda n, a, args, kw, out: ops.softmax_flops(_first_numel(a, out)),
    ops.REDUCTION: lambda n, a, args, kw, out: ops.reduction_flops(_first_numel(a, out)),
    ops.ELEMENTWISE: lambda n, a, args, kw, out: ops.elementwise_flops(
        op_table.elementwise_kind(n), max((t.numel for t in out), default=0)
    ),
    ops.LOSS: lambda n, a, args, kw, out: 4 * _first_numel(a, out),  # NB: log-softmax, gather, mean
    ops.OPTIMIZER: lambda n, a, args, kw, out: 10 * sum(t.numel for t in out),  # NB: AdamW's per-element update
}
