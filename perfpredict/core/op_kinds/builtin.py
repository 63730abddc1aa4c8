"""The built-in op kinds, each registered once: its FLOP rule, byte rule, tensor-core use, fusibility and host probe.

The FLOP rules pick the right arguments for each torch spelling (``linear(x, w)``, ``addmm(bias, a, b)``,
``convolution(x, w, b, stride, padding, dilation, transposed, ...)``) and leave the arithmetic to ops.py.
The host probes are the tiny CPU calls ``perfpredict calibrate-host`` times for each kind's dispatch cost
(:mod:`perfpredict.learning.host_calibration`); torch is imported inside them.

Adding a kind: one ``register_op_kind(OpKind(...))`` here (or anywhere, before the graph is built), plus the names
that map to it in each frontend that emits it (``compiler_hooks/op_table.py``, ``op_names.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from perfpredict.core import ops
from perfpredict.core.op_kinds.elementwise_costs import cost_class
from perfpredict.core.op_kinds.registry import OpKind, TensorMeta, register_op_kind

Metas = Sequence[TensorMeta | None]
Outputs = Sequence[TensorMeta]

# The bare names of embedding lookups, as against their backward (which writes the whole table).
EMBEDDING_LOOKUPS = frozenset({"embedding", "embedding_bag", "_embedding_bag"})
# ``dest.index_copy_(dim, index, source)`` moves the source's rows into place (a static KV cache's update).
INDEX_COPIES = frozenset({"index_copy", "index_copy_"})


def _shape(meta: TensorMeta | None) -> tuple[int, ...]:
    if meta is None:
        raise ValueError("missing tensor argument")
    return meta.shape


def _first_numel(a: Metas, outputs: Outputs) -> int:
    first = next((m for m in a if m is not None), None)
    return first.numel if first is not None else (outputs[0].numel if outputs else 0)


def _per_first_element(flops_of_numel: Callable[[int], int]) -> Callable[..., int]:
    """A FLOP rule that applies ``flops_of_numel`` to the first tensor's element count: norms, softmax and
    reductions do a fixed amount of work per element they read."""

    def flops(name: str, a: Metas, args: Sequence[Any], kwargs: dict, outputs: Outputs) -> int:
        return flops_of_numel(_first_numel(a, outputs))

    return flops


def attention_is_backward(name: str) -> bool:
    """Whether the attention op ``name`` is a backward (``_flash_attention_backward``); every such aten name ends so."""
    return name.endswith("_backward")


# ---- FLOP rules ----------------------------------------------------------------------------------------------


def _matmul_flops(name: str, a: Metas, args: Sequence[Any], kwargs: dict, outputs: Outputs) -> int:
    if name == "linear":
        return ops.linear_flops(_shape(a[0]), _shape(a[1]))
    if name == "bilinear":
        # x1 (..., in1), x2 (..., in2), weight (out, in1, in2): every output is in1*in2 multiply-adds.
        rows = math.prod(_shape(a[0])[:-1])
        return 2 * rows * math.prod(_shape(a[2]))
    if name in ("addmm", "baddbmm", "addbmm", "addmv"):
        return ops.matmul_flops(_shape(a[1]), _shape(a[2]))
    if name == "einsum":
        return _einsum_flops(args, a)
    if name in ("_grouped_mm", "grouped_mm_fallback") and len(_shape(a[0])) == 2 and len(_shape(a[1])) == 3:
        # MoE experts: rows (tokens x top-k) of mat_a [M, K], each multiplied by its group's [K, N] of mat_b
        rows, inner = _shape(a[0])
        return 2 * rows * inner * _shape(a[1])[2]
    if name == "tensordot":
        # NB: prod(a) * prod(b) * prod(out) = (M*K)(K*N)(M*N) for a pure contraction, so its root is M*N*K.
        return int(2 * math.sqrt(math.prod(_shape(a[0])) * math.prod(_shape(a[1])) * outputs[0].numel))
    return ops.matmul_flops(_shape(a[0]), _shape(a[1]))


def _einsum_flops(args: Sequence[Any], a: Metas) -> int:
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


def _conv_flops(name: str, a: Metas, args: Sequence[Any], kwargs: dict, outputs: Outputs) -> int:
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


def _attention_flops(name: str, a: Metas, args: Sequence[Any], kwargs: dict, outputs: Outputs) -> int:
    if attention_is_backward(name):
        return ops.attention_backward_flops(_shape(a[1]), _shape(a[2]), _shape(a[3]))
    if name == "multi_head_attention_forward":
        # (L, N, E) query and (S, N, E) key/value: input projections, attention, one output projection.
        seq_q, batch, embed = _shape(a[0])
        seq_k = _shape(a[1])[0] if len(a) > 1 and a[1] is not None else seq_q
        proj = 2 * batch * embed * embed * (2 * seq_q + 2 * seq_k)  # q and out over L, k and v over S
        return proj + ops.attention_flops((batch, seq_q, embed), (batch, seq_k, embed), (batch, seq_k, embed))
    return ops.attention_flops(_shape(a[0]), _shape(a[1]), _shape(a[2]))


def _pooling_flops(name: str, a: Metas, args: Sequence[Any], kwargs: dict, outputs: Outputs) -> int:
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


# ---- byte rules (the default, every input read once and every output written once, is registry.unfused_bytes) -


def _no_bytes(name: str, inputs: Outputs, outputs: Outputs, arg_metas: Metas) -> tuple[int, int]:
    return 0, 0


def _written_only(name: str, inputs: Outputs, outputs: Outputs, arg_metas: Metas) -> tuple[int, int]:
    return 0, sum(t.nbytes for t in outputs)


def embedding_lookup_read_bytes(written: int, index_bytes: int) -> int:
    """What an embedding lookup reads: only the rows it gathers (about the output's size) plus its indices, not
    the whole table. Shared with the training rows, whose collector recorded the whole table as read."""
    return written + index_bytes


def _embedding_bytes(name: str, inputs: Outputs, outputs: Outputs, arg_metas: Metas) -> tuple[int, int]:
    written = sum(t.nbytes for t in outputs)
    if name not in EMBEDDING_LOOKUPS:  # a backward (embedding_dense_backward) writes the whole table
        return sum(t.nbytes for t in inputs), written
    # the indices are the integer argument (first in F.embedding, second in aten.embedding)
    indices = [m for m in arg_metas if m is not None and not m.dtype.startswith(("float", "bfloat"))]
    return embedding_lookup_read_bytes(written, sum(m.nbytes for m in indices[:1])), written


def _copy_bytes(name: str, inputs: Outputs, outputs: Outputs, arg_metas: Metas) -> tuple[int, int]:
    if name in INDEX_COPIES and len(inputs) >= 2:
        # the index and the source are read, the source's size written; the rest of the destination is untouched
        source = max(inputs[1:], key=lambda t: t.nbytes)
        return sum(t.nbytes for t in inputs[1:]), source.nbytes
    return sum(t.nbytes for t in inputs), sum(t.nbytes for t in outputs)


# ---- host probes: tiny CPU calls, where the framework's cost of one call is all there is to time --------------


def _probe_matmul():
    import torch

    x, m = torch.randn(1, 8), torch.randn(8, 8)
    return lambda: torch.mm(x, m)


def _probe_conv():
    import torch
    import torch.nn.functional as F

    img, k = torch.randn(1, 1, 4, 4), torch.randn(1, 1, 1, 1)
    return lambda: F.conv2d(img, k)


def _probe_attention():
    import torch
    import torch.nn.functional as F

    q = torch.randn(1, 1, 2, 8)
    return lambda: F.scaled_dot_product_attention(q, q, q)


def _probe_norm():
    import torch
    import torch.nn.functional as F

    x = torch.randn(1, 8)
    return lambda: F.layer_norm(x, (8,))


def _probe_softmax():
    import torch

    x = torch.randn(1, 8)
    return lambda: x.softmax(-1)


def _probe_elementwise():
    import torch

    x, y = torch.randn(1, 8), torch.randn(1, 8)
    return lambda: x + y


def _probe_reduction():
    import torch

    x = torch.randn(1, 8)
    return lambda: x.sum()


def _probe_embedding():
    import torch
    import torch.nn.functional as F

    idx, table = torch.zeros(1, 2, dtype=torch.long), torch.randn(4, 8)
    return lambda: F.embedding(idx, table)


def _probe_pooling():
    import torch
    import torch.nn.functional as F

    img = torch.randn(1, 1, 4, 4)
    return lambda: F.max_pool2d(img, 2)


def _probe_view():
    import torch

    x = torch.randn(1, 8)
    return lambda: x.view(-1)


def _probe_copy():
    import torch

    x, y = torch.randn(1, 8), torch.randn(1, 8)
    return lambda: torch.cat([x, y])


def _probe_creation():
    import torch

    return lambda: torch.zeros(8)


def _probe_loss():
    import torch
    import torch.nn.functional as F

    x, target = torch.randn(1, 8), torch.zeros(1, dtype=torch.long)
    return lambda: F.cross_entropy(x, target)


def _probe_optimizer():
    import torch

    params, grads = [torch.randn(8)], [torch.randn(8)]
    return lambda: torch._foreach_add(params, grads)


# ---- the registrations (this order is calibrate-host's probe order) -----------------------------------------

register_op_kind(OpKind(ops.MATMUL, _matmul_flops, tensor_cores=True, tf32_switch="matmul", host_probe=_probe_matmul))
register_op_kind(OpKind(ops.CONV, _conv_flops, tensor_cores=True, tf32_switch="cudnn", host_probe=_probe_conv))
register_op_kind(
    OpKind(ops.ATTENTION, _attention_flops, tensor_cores=True, tf32_switch="matmul", host_probe=_probe_attention)
)
register_op_kind(OpKind(ops.NORM, _per_first_element(ops.norm_flops), fusible=True, host_probe=_probe_norm))
register_op_kind(OpKind(ops.SOFTMAX, _per_first_element(ops.softmax_flops), fusible=True, host_probe=_probe_softmax))
register_op_kind(
    OpKind(
        ops.ELEMENTWISE,
        lambda n, a, args, kw, out: ops.elementwise_flops(cost_class(n), max((t.numel for t in out), default=0)),
        fusible=True,
        host_probe=_probe_elementwise,
    )
)
register_op_kind(
    OpKind(ops.REDUCTION, _per_first_element(ops.reduction_flops), fusible=True, host_probe=_probe_reduction)
)
register_op_kind(OpKind(ops.EMBEDDING, bytes=_embedding_bytes, host_probe=_probe_embedding))
register_op_kind(OpKind(ops.POOLING, _pooling_flops, host_probe=_probe_pooling))
register_op_kind(OpKind(ops.VIEW, bytes=_no_bytes, is_view=True, host_probe=_probe_view))
register_op_kind(OpKind(ops.COPY, bytes=_copy_bytes, fusible=True, host_probe=_probe_copy))
register_op_kind(OpKind(ops.CREATION, bytes=_written_only, host_probe=_probe_creation))
register_op_kind(
    OpKind(
        ops.LOSS,
        lambda n, a, args, kw, out: 4 * _first_numel(a, out),  # NB: log-softmax, gather, mean
        host_probe=_probe_loss,
    )
)
register_op_kind(
    OpKind(
        ops.OPTIMIZER,
        lambda n, a, args, kw, out: 10 * sum(t.numel for t in out),  # NB: AdamW's per-element update
        host_probe=_probe_optimizer,
    )
)

#: the kinds the shipped artifacts were trained on (their one-hot feature columns), ``unknown`` included, sorted;
#: a kind registered later is not among them and is featurized as no known kind until the artifacts are retrained
BUILTIN_KINDS = (
    ops.ATTENTION,
    ops.CONV,
    ops.COPY,
    ops.CREATION,
    ops.ELEMENTWISE,
    ops.EMBEDDING,
    ops.LOSS,
    ops.MATMUL,
    ops.NORM,
    ops.OPTIMIZER,
    ops.POOLING,
    ops.REDUCTION,
    ops.SOFTMAX,
    ops.UNKNOWN,
    ops.VIEW,
)
