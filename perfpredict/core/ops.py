"""The canonical op kinds' names, dtype sizes, and the FLOP formulas the op kinds' rules apply.

Everything else about a kind (which rule picks its arguments, its bytes, tensor-core use, fusibility, host probe)
is registered once in :mod:`perfpredict.core.op_kinds`.

The matmul, convolution and attention formulas follow ``torch.utils.flop_counter`` exactly (a test compares
whole models with ``FlopCounterMode``): a multiply-add counts 2 FLOPs, bias adds are not counted. The other
formulas are our own per-element estimates; they matter little for time (those ops are memory-bound) and each
carries an "NB:" comment where it approximates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Shape = Sequence[int]

# Canonical op kinds. "unknown" is the one kind without a cost model.
MATMUL = "matmul"
CONV = "conv"
ATTENTION = "attention"
NORM = "norm"
SOFTMAX = "softmax"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
EMBEDDING = "embedding"
POOLING = "pooling"
VIEW = "view"
COPY = "copy"  # concat, contiguous, clone, pad, gather/scatter style data movement
CREATION = "creation"  # zeros, ones, arange, full, rand: writes only
LOSS = "loss"
OPTIMIZER = "optimizer"
UNKNOWN = "unknown"

DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")

# NB: per-element FLOP estimates for non-matmul ops. Transcendentals (exp, tanh, erf) cost several FLOPs on
# the SFU; we count them as a handful so compute-heavy activations are not free, but these ops stay
# memory-bound on every GPU in the catalog either way.
ELEMENTWISE_FLOPS_PER_ELEMENT = {
    "add": 1,
    "sub": 1,
    "mul": 1,
    "div": 1,
    "neg": 1,
    "relu": 1,
    "abs": 1,
    "where": 1,
    "clamp": 1,
    "maximum": 1,
    "minimum": 1,
    "pow": 2,
    "sqrt": 2,
    "rsqrt": 2,
    "exp": 4,
    "log": 4,
    "sigmoid": 5,
    "tanh": 6,
    "silu": 6,
    "gelu": 8,
    "erf": 6,
    "softplus": 6,
    "hardswish": 4,
    "dropout": 2,
}
NORM_FLOPS_PER_ELEMENT = 8  # NB: mean, variance, normalise, scale, shift
SOFTMAX_FLOPS_PER_ELEMENT = 5  # NB: max, subtract, exp, sum, divide


def matmul_flops(a_shape: Shape, b_shape: Shape) -> int:
    """(..., M, K) @ (..., K, N): 2*M*N*K per broadcast batch element. 1-D operands are promoted as torch does."""
    a = list(a_shape) if len(a_shape) > 1 else [1, a_shape[0]]
    b = list(b_shape) if len(b_shape) > 1 else [b_shape[0], 1]
    m, k = a[-2], a[-1]
    n = b[-1]
    batch = _broadcast(a[:-2], b[:-2])
    return 2 * math.prod(batch) * m * n * k


def linear_flops(x_shape: Shape, weight_shape: Shape) -> int:
    """x (..., K) times weight (N, K)^T: 2 * rows * N * K, the same count as aten.addmm/mm."""
    n, k = weight_shape[0], weight_shape[-1]
    return 2 * math.prod(x_shape[:-1]) * n * k


def conv_flops(x_shape: Shape, w_shape: Shape, out_shape: Shape, transposed: bool = False) -> int:
    """Convolution: 2 * batch * prod(spatial) * prod(kernel) * C_out * C_in_per_group.

    As in torch's counter, the spatial extent is the output's for a forward conv and the input's for a
    transposed one, and ``w_shape`` already holds C_in / groups.
    """
    batch = x_shape[0]
    spatial = (x_shape if transposed else out_shape)[2:]
    c_out, c_in, *kernel = w_shape
    return 2 * batch * math.prod(spatial) * math.prod(kernel) * c_out * c_in


def conv_backward_flops(
    grad_out_shape: Shape,
    x_shape: Shape,
    w_shape: Shape,
    transposed: bool,
    need_input_grad: bool,
    need_weight_grad: bool,
) -> int:
    """Backward of a convolution: one conv-sized product per gradient asked for, counted as torch counts it.

    The input gradient is a convolution of the output gradient with the weight in the other direction; the
    weight gradient one of the input with the output gradient, batch and channel axes swapped.
    """

    def swap(shape: Shape) -> list[int]:
        return [shape[1], shape[0], *shape[2:]]

    flops = 0
    if need_input_grad:
        flops += conv_flops(grad_out_shape, w_shape, x_shape, not transposed)
    if need_weight_grad:
        first, second = (grad_out_shape, x_shape) if transposed else (x_shape, grad_out_shape)
        flops += conv_flops(swap(first), swap(second), swap(w_shape), False)
    return flops


def attention_flops(q_shape: Shape, k_shape: Shape, v_shape: Shape) -> int:
    """Scaled dot-product attention: Q K^T plus P V. Causal masks are not discounted (torch counts the same)."""
    *bq, s_q, d_q = q_shape
    *_, s_k, _ = k_shape
    d_v = v_shape[-1]
    bh = math.prod(bq)
    return 2 * bh * s_q * s_k * d_q + 2 * bh * s_q * s_k * d_v


def attention_backward_flops(q_shape: Shape, k_shape: Shape, v_shape: Shape) -> int:
    """Attention backward as torch counts it: the recomputed scores Q K^T, then dP, dV, dQ and dK (five matmuls)."""
    *bq, s_q, d_q = q_shape
    *_, s_k, _ = k_shape
    d_v = v_shape[-1]
    bh = math.prod(bq)
    return 2 * bh * s_q * s_k * (3 * d_q + 2 * d_v)


def elementwise_flops(kind: str, out_numel: int) -> int:
    return ELEMENTWISE_FLOPS_PER_ELEMENT.get(kind, 1) * out_numel


def norm_flops(numel: int) -> int:
    return NORM_FLOPS_PER_ELEMENT * numel


def softmax_flops(numel: int) -> int:
    return SOFTMAX_FLOPS_PER_ELEMENT * numel


def reduction_flops(in_numel: int) -> int:
    return in_numel


def pooling_flops(out_numel: int, kernel: Shape) -> int:
    return out_numel * max(1, math.prod(kernel))


def _broadcast(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """Broadcast two batch shapes (numpy rules, sizes of 1 stretch)."""
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + list(a)
    b = [1] * (n - len(b)) + list(b)
    return [max(x, y) for x, y in zip(a, b)]
