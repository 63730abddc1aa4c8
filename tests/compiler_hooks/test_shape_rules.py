"""Every shape rule gives what the meta kernel it replaces gives (shape, dtype, strides), and steps aside where
it is not certain."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from perfpredict.compiler_hooks import shape_rules


def _m(*shape, dtype=torch.float32):
    return torch.empty(*shape, device="meta", dtype=dtype)


def _mha(query, key, bias=False, dropout=0.0):
    """F.multi_head_attention_forward's 13 positional arguments: embed 16, 4 heads, no extra key/value bias."""
    in_bias, out_bias = (_m(48), _m(16)) if bias else (None, None)
    return (
        _m(*query),
        _m(*key),
        _m(*key),
        16,
        4,
        _m(48, 16),
        in_bias,
        None,
        None,
        False,
        dropout,
        _m(16, 16),
        out_bias,
    )


X = _m(2, 8, 6, 6)
CL = X.to(memory_format=torch.channels_last)
SEQ = _m(2, 5, 16)
STATS = _m(8)

CASES = [
    (F.relu, (X,), {}),
    (F.relu, (CL,), {}),
    (F.gelu, (SEQ,), {"approximate": "tanh"}),
    (F.silu, (SEQ,), {}),
    (torch.sigmoid, (SEQ,), {}),
    (F.dropout, (SEQ, 0.1, True), {}),
    (F.batch_norm, (X, STATS, STATS, STATS, STATS, False), {}),
    (F.batch_norm, (CL, STATS, STATS), {"training": True}),
    (F.layer_norm, (SEQ, (16,), _m(16), _m(16)), {}),
    (F.group_norm, (X, 4, STATS, STATS), {}),
    (F.softmax, (SEQ, -1), {}),
    (torch.Tensor.add, (X, _m(1, 8, 1, 1)), {}),
    (torch.Tensor.__add__, (X, 1.5), {}),
    (torch.Tensor.__mul__, (_m(3, 4, dtype=torch.int64), 2), {}),
    (torch.Tensor.__rsub__, (SEQ, 1), {}),
    (torch.Tensor.__truediv__, (SEQ, _m(16, dtype=torch.bfloat16)), {}),
    (torch.mul, (_m(4, 1, 3), _m(5, 1)), {}),
    (torch.Tensor.add, (CL, CL), {}),
    (torch.maximum, (SEQ, _m(1, 1, 16)), {}),
    (torch.empty_like, (CL,), {}),
    (torch.conv2d, (X, _m(16, 8, 3, 3), _m(16), 2, 1), {}),
    (torch.conv2d, (X, _m(8, 1, 5, 5), None, 1, 2, 1, 8), {}),
    (torch.conv1d, (_m(2, 4, 9), _m(6, 2, 3)), {"groups": 2, "dilation": 2}),
    (F.linear, (SEQ, _m(32, 16), _m(32)), {}),
    (F.adaptive_avg_pool2d, (X, (1, None)), {}),
    (F.scaled_dot_product_attention, (_m(2, 4, 5, 8), _m(2, 4, 7, 8), _m(2, 4, 7, 6)), {}),
    (F.multi_head_attention_forward, _mha((5, 2, 16), (7, 2, 16), bias=True), {"need_weights": False}),
    (F.multi_head_attention_forward, _mha((5, 16), (7, 16), dropout=0.1), {"average_attn_weights": False}),
    (F.multi_head_attention_forward, (*_mha((5, 2, 16), (7, 2, 16), bias=True), False), {}),  # eval: weights
]


@pytest.mark.parametrize("func,args,kwargs", CASES, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_rule_matches_the_meta_kernel(func, args, kwargs):
    fast = shape_rules.output_of(func, func.__name__, args, kwargs)
    assert fast is not shape_rules.NO_RULE, "the rule should answer this call"
    slow = func(*args, **kwargs)
    for f, s in zip(*((x,) if isinstance(x, torch.Tensor) else x for x in (fast, slow)), strict=True):
        assert (f is None) == (s is None)
        if f is not None:
            assert (f.shape, f.dtype, f.stride(), f.device) == (s.shape, s.dtype, s.stride(), s.device)


def test_in_place_calls_return_their_input():
    y = _m(2, 3)
    assert shape_rules.output_of(F.relu, "relu", (y,), {"inplace": True}) is y
    assert shape_rules.output_of(F.relu, "relu", (y, True), {}) is y
    assert shape_rules.output_of(torch.Tensor.add_, "add_", (y, 1.0), {}) is y
    assert shape_rules.output_of(torch.Tensor.__iadd__, "__iadd__", (y, _m(3)), {}) is y
    # dropout's third positional argument is `training`, not `inplace`
    assert shape_rules.output_of(F.dropout, "dropout", (y, 0.5, True), {}) is not y


@pytest.mark.parametrize(
    "func,args,kwargs",
    [
        (torch.exp, (_m(3, dtype=torch.int64),), {}),  # an integer input makes a float
        (torch.clamp, (SEQ, _m(16)), {}),  # a tensor bound broadcasts
        (F.batch_norm, (X, _m(4), _m(4)), {}),  # wrong channel count: torch's own error
        (F.layer_norm, (SEQ, (8,)), {}),
        (F.softmax, (SEQ, -1), {"dtype": torch.float64}),
        (torch.Tensor.__truediv__, (_m(3, dtype=torch.int64), 2), {}),  # integer true division makes a float
        (torch.Tensor.__iadd__, (_m(3), _m(2, 3)), {}),  # in place cannot broadcast the output
        (torch.Tensor.add, (SEQ.transpose(1, 2), _m(2, 16, 5)), {}),  # strided operands: torch picks the layout
        (torch.conv2d, (X, _m(16, 8, 3, 3)), {"padding": "same"}),
        (torch.conv2d, (CL, _m(16, 8, 3, 3)), {}),
        (F.linear, (SEQ, _m(32, 8)), {}),
    ],
)
def test_uncertain_calls_are_left_to_torch(func, args, kwargs):
    assert shape_rules.output_of(func, func.__name__, args, kwargs) is shape_rules.NO_RULE
