"""The output of the commonest torch calls on meta tensors, computed directly instead of by their meta kernels.

Many meta kernels are Python decompositions (``torch._refs``, ``torch._decomp``): on meta tensors ``F.relu`` takes
about 300 us, ``F.batch_norm`` 800 us and ``F.layer_norm`` 600 us, where a convolution takes 25 us. A candidate
network of 200 such calls then spends most of its capture there. The calls below keep their input's shape (an
activation, a norm, dropout) or broadcast two operands (``x + y``), so their output is an empty meta tensor of that
shape and dtype, made in about 2 us; an in-place call returns its input, as torch does. A rule answers only where
its output is certain (dense strides, a floating result, matching norm sizes); everything else returns
:data:`NO_RULE` and the caller runs the real meta kernel, so a rule never changes a graph, only its cost. A test
runs every rule beside the meta kernel it replaces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

NO_RULE = object()

#: unary calls whose output has the input's shape and dtype, and where their ``inplace`` argument sits
_UNARY_INPLACE_AT = {
    "relu": 1,
    "relu6": 1,
    "silu": 1,
    "mish": 1,
    "hardswish": 1,
    "hardsigmoid": 1,
    "selu": 1,
    "elu": 2,
    "celu": 2,
    "leaky_relu": 2,
    "hardtanh": 3,
    "threshold": 3,
    "dropout": 3,
    "dropout1d": 3,
    "dropout2d": 3,
    "dropout3d": 3,
    "alpha_dropout": 3,
    "feature_alpha_dropout": 3,
}
_UNARY = frozenset(
    {
        *_UNARY_INPLACE_AT,
        "gelu",
        "sigmoid",
        "tanh",
        "softplus",
        "softsign",
        "tanhshrink",
        "hardshrink",
        "softshrink",
        "logsigmoid",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "neg",
        "abs",
        "reciprocal",
        "erf",
        "sin",
        "cos",
        "square",
        "clone",
        "clamp",
        "clip",
        "clamp_min",
        "clamp_max",
    }
)
_NORMS = frozenset({"batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm"})
_SOFTMAX = frozenset({"softmax", "log_softmax"})
_BINARY = frozenset({"add", "sub", "mul", "div", "true_divide", "maximum", "minimum"})
_DUNDER = {
    "__add__": "add",
    "__radd__": "add",
    "__iadd__": "add",
    "__sub__": "sub",
    "__rsub__": "sub",
    "__isub__": "sub",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__imul__": "mul",
    "__truediv__": "div",
    "__rtruediv__": "div",
    "__itruediv__": "div",
}
_LIKE = frozenset({"empty_like", "zeros_like", "ones_like"})
_CONV_DIMS = {"conv1d": 1, "conv2d": 2, "conv3d": 3}
_CONV_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")


def output_of(func: Callable, name: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """The call's output on meta tensors where a rule knows it for certain, else :data:`NO_RULE`."""
    if not args or not isinstance(args[0], torch.Tensor):
        return _binary(name, args, kwargs) if name in _DUNDER or name in _BINARY else NO_RULE
    base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    if base in _UNARY:
        return _unary(name, base, args, kwargs)
    if base in _NORMS:
        return _norm(base, args, kwargs)
    if base in _SOFTMAX:
        return _softmax(args, kwargs)
    if base in _BINARY or name in _DUNDER:
        return _binary(name, args, kwargs)
    if name in _LIKE and set(kwargs) <= {"dtype", "device"}:
        return _like(args[0], kwargs.get("dtype") or args[0].dtype)
    if name in _CONV_DIMS:
        return _conv(_CONV_DIMS[name], args, kwargs)
    if name == "linear":
        return _linear(args, kwargs)
    if name == "adaptive_avg_pool2d":
        return _adaptive_pool(args, kwargs)
    if name == "scaled_dot_product_attention":
        return _attention(args, kwargs)
    if name == "multi_head_attention_forward":
        return _multi_head_attention(args, kwargs)
    return NO_RULE


def has_tensor(value: Any) -> bool:
    return next(tensors(value), None) is not None


def tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in a call's output (or a model's), depth first, through tuples, lists and dicts."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from tensors(v)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from tensors(v)


def _unary(name: str, base: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    x = args[0]
    if not x.is_floating_point() or any(isinstance(a, torch.Tensor) for a in (*args[1:], *kwargs.values())):
        return NO_RULE  # integer inputs may change dtype (exp), tensor bounds may broadcast (clamp)
    at = _UNARY_INPLACE_AT.get(base)
    inplace = name != base or kwargs.get("inplace") is True or (at is not None and len(args) > at and args[at] is True)
    if inplace:
        return x
    if base == "clone" and kwargs.get("memory_format") not in (None, torch.preserve_format):
        return NO_RULE
    return _like(x, x.dtype)


def _norm(base: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """A norm's output is its input's shape; the rule checks the sizes torch would check, or leaves it to torch."""
    x = args[0]
    if x.dim() < 2 and base != "layer_norm" and base != "rms_norm":
        return NO_RULE
    if base in ("batch_norm", "instance_norm"):
        stats = [a for a in (*args[1:5], *kwargs.values()) if isinstance(a, torch.Tensor)]
        if any(s.dim() != 1 or s.shape[0] != x.shape[1] for s in stats):
            return NO_RULE
    elif base in ("layer_norm", "rms_norm"):
        shape = args[1] if len(args) > 1 else kwargs.get("normalized_shape")
        shape = (shape,) if isinstance(shape, int) else tuple(shape or ())
        weight = args[2] if len(args) > 2 else kwargs.get("weight")
        if not shape or tuple(x.shape[-len(shape) :]) != shape:
            return NO_RULE
        if isinstance(weight, torch.Tensor) and tuple(weight.shape) != shape:
            return NO_RULE
    else:  # group_norm(x, num_groups, weight, bias, eps)
        groups = args[1] if len(args) > 1 else kwargs.get("num_groups")
        if not isinstance(groups, int) or groups <= 0 or x.shape[1] % groups:
            return NO_RULE
    return _like(x, x.dtype)


def _softmax(args: tuple, kwargs: Mapping[str, Any]) -> Any:
    if len(args) > 2 or kwargs.get("dtype") is not None:
        return NO_RULE  # softmax's dtype argument casts: leave it to the kernel
    return _like(args[0], args[0].dtype)


def _binary(name: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """Broadcast two operands (tensors or Python numbers); in place, the first operand is the output."""
    if len(args) != 2 or set(kwargs) - {"alpha"}:
        return NO_RULE
    a, b = args
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        return NO_RULE
    operands = [t for t in (a, b) if isinstance(t, torch.Tensor)]
    dtype = torch.result_type(a, b)
    op = _DUNDER.get(name, name.rstrip("_"))
    if op in ("div", "true_divide") and not dtype.is_floating_point:
        return NO_RULE  # true division of integers makes the default float dtype
    shape = operands[0].shape if len(operands) == 1 else torch.broadcast_shapes(a.shape, b.shape)
    if name.startswith("__i") or (name.endswith("_") and not name.startswith("_")):
        inplace_ok = isinstance(a, torch.Tensor) and a.shape == shape and torch.can_cast(dtype, a.dtype)
        return a if inplace_ok else NO_RULE
    if all(t.is_contiguous() for t in operands):
        return torch.empty(shape, dtype=dtype, device="meta")
    if len(operands) == 2 and a.shape == b.shape and a.stride() == b.stride() or len(operands) == 1:
        return _like(operands[0], dtype)
    return NO_RULE


def _like(x: torch.Tensor, dtype: torch.dtype) -> Any:
    """An empty meta tensor like ``x`` (its strides where they are dense, as ``empty_like`` keeps them)."""
    if x.is_contiguous():
        return torch.empty(x.shape, dtype=dtype, device="meta")
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        return torch.empty_strided(x.shape, x.stride(), dtype=dtype, device="meta")
    return NO_RULE


def _adaptive_pool(args: tuple, kwargs: Mapping[str, Any]) -> Any:
    x = args[0]
    size = args[1] if len(args) > 1 else kwargs.get("output_size")
    size = (size, size) if isinstance(size, int) else tuple(size or ())
    if x.dim() not in (3, 4) or len(size) != 2 or not x.is_contiguous():
        return NO_RULE
    out = tuple(x.shape[-2 + i] if s is None else s for i, s in enumerate(size))
    return torch.empty((*x.shape[:-2], *out), dtype=x.dtype, device="meta")


def _attention(args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """SDPA's output: the query's shape with the value's last dimension."""
    q, k, v = (list(args) + [kwargs.get(n) for n in ("query", "key", "value")[len(args) :]])[:3]
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or not (q.dim() == k.dim() == v.dim() >= 2):
        return NO_RULE
    if k.shape[-1] != q.shape[-1] or k.shape[-2] != v.shape[-2] or q.shape[:-3] != v.shape[:-3]:
        return NO_RULE
    return torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device="meta")


def _conv(dims: int, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """``conv{1,2,3}d``: out = floor((size + 2 padding - dilation (kernel - 1) - 1) / stride) + 1 per spatial dim."""
    given = dict(zip(_CONV_ARGS, args), **kwargs)
    x, w, bias = given.get("input"), given.get("weight"), given.get("bias")
    groups = given.get("groups", 1)
    if not isinstance(w, torch.Tensor) or x.dim() != dims + 2 or w.dim() != dims + 2 or not x.is_contiguous():
        return NO_RULE
    if w.dtype != x.dtype or not isinstance(groups, int) or x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        return NO_RULE
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (w.shape[0],)):
        return NO_RULE
    stride, padding, dilation = (
        _per_dim(given.get(k, d), dims) for k, d in (("stride", 1), ("padding", 0), ("dilation", 1))
    )
    if stride is None or padding is None or dilation is None:
        return NO_RULE  # "same" / "valid" padding strings: left to the kernel
    sizes = [
        (x.shape[2 + i] + 2 * padding[i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1 for i in range(dims)
    ]
    if min(sizes) < 1:
        return NO_RULE
    return torch.empty((x.shape[0], w.shape[0], *sizes), dtype=x.dtype, device="meta")


def _linear(args: tuple, kwargs: Mapping[str, Any]) -> Any:
    x = args[0]
    w = args[1] if len(args) > 1 else kwargs.get("weight")
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    if (
        not isinstance(w, torch.Tensor)
        or w.dim() != 2
        or x.dim() < 1
        or x.shape[-1] != w.shape[1]
        or w.dtype != x.dtype
    ):
        return NO_RULE
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (w.shape[0],)):
        return NO_RULE
    return torch.empty((*x.shape[:-1], w.shape[0]), dtype=x.dtype, device="meta")


def _per_dim(value: Any, dims: int) -> tuple[int, ...] | None:
    if isinstance(value, int):
        return (value,) * dims
    if isinstance(value, (tuple, list)) and len(value) == dims and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


_MHA_ARGS = (
    "query",
    "key",
    "value",
    "embed_dim_to_check",
    "num_heads",
    "in_proj_weight",
    "in_proj_bias",
    "bias_k",
    "bias_v",
    "add_zero_attn",
    "dropout_p",
    "out_proj_weight",
    "out_proj_bias",
    "training",
    "key_padding_mask",
    "need_weights",
)


def _multi_head_attention(args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """``F.multi_head_attention_forward`` (what ``nn.MultiheadAttention`` calls): its output has the query's shape
    (length, batch, embed) and the attention weights, where asked for, are (batch, [heads,] length, source). Only
    the plain case: no extra key/value biases, no zero attention, no static keys."""
    given = dict(zip(_MHA_ARGS, args), **kwargs)
    q, k, heads = given.get("query"), given.get("key"), given.get("num_heads")
    extras = ("bias_k", "bias_v", "static_k", "static_v")
    if any(given.get(e) is not None for e in extras) or given.get("add_zero_attn") or not isinstance(heads, int):
        return NO_RULE
    if not isinstance(k, torch.Tensor) or q.dim() not in (2, 3) or k.dim() != q.dim():
        return NO_RULE
    out = torch.empty(q.shape, dtype=q.dtype, device="meta")
    if not given.get("need_weights", True):
        return out, None
    length, source = q.shape[0], k.shape[0]
    batch = (q.shape[1],) if q.dim() == 3 else ()
    per_head = () if given.get("average_attn_weights", True) else (heads,)
    return out, torch.empty((*batch, *per_head, length, source), dtype=q.dtype, device="meta")
