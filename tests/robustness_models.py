"""A seeded generator of small, odd, random architectures for the torch.compile robustness test.

``build_case(seed)`` returns a :class:`Case`: an ``nn.Module`` in eval mode, its example inputs, and what it
exercises. Each model is a stem, a handful of blocks drawn from a catalogue, optional graph breaks, and a head.
The block at ``seed % len(BLOCKS)`` is always included, so any run of at least ``len(BLOCKS)`` consecutive seeds
covers the whole catalogue. Dtype and graph-break kind also cycle with the seed, so those are covered too.

Streams between blocks:
- ``image``: (B, C, H, W); ``signal``: (B, C, L); ``seq``: (B, L, D) with D divisible by every head count used.

Not a test file: ``tests/test_robustness.py`` imports it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------------------------------------- building blocks


class _Act(nn.Module):
    """One activation, as a functional call (so the graph holds the torch function, not a module)."""

    NAMES = ("relu", "gelu", "silu", "hardswish", "tanh", "sigmoid", "gelu_tanh", "leaky_relu")

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.name == "gelu_tanh":
            return F.gelu(x, approximate="tanh")
        if self.name == "leaky_relu":
            return F.leaky_relu(x, 0.1)
        return getattr(F, self.name)(x)


class _RMSNorm(nn.Module):
    """The hand-written RMSNorm of LLaMA-style code (pow, mean, rsqrt, mul)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.01 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + 1e-6) * self.weight


def _seq_norm(rng: random.Random, dim: int) -> nn.Module:
    kind = rng.choice(["layer", "rms", "rms_hand", "none"])
    if kind == "layer":
        return nn.LayerNorm(dim, elementwise_affine=rng.random() < 0.8)
    if kind == "rms":
        return nn.RMSNorm(dim)
    if kind == "rms_hand":
        return _RMSNorm(dim)
    return nn.Identity()


def _groups_dividing(rng: random.Random, *sizes: int) -> int:
    choices = [g for g in (1, 2, 3, 4) if all(s % g == 0 for s in sizes)]
    return rng.choice(choices)


def _channel_norm(rng: random.Random, channels: int, dims: int) -> nn.Module:
    kind = rng.choice(["batch", "group", "none"])
    if kind == "batch":
        bn = (nn.BatchNorm1d if dims == 1 else nn.BatchNorm2d)(channels)
        with torch.no_grad():  # non-trivial running statistics, so eval mode really normalises
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        return bn
    if kind == "group":
        return nn.GroupNorm(_groups_dividing(rng, channels), channels)
    return nn.Identity()


class ConvBlock(nn.Module):
    """Conv (1d/2d; plain, grouped, depthwise, dilated, strided) + norm + activation, maybe residual."""

    def __init__(self, rng: random.Random, channels: int, dims: int, spatial: tuple[int, ...]) -> None:
        super().__init__()
        mode = rng.choice(["plain", "grouped", "depthwise", "dilated", "strided"])
        k = rng.choice([1, 3, 5]) if mode != "depthwise" else 3
        dilation = rng.choice([2, 3]) if mode == "dilated" else 1
        stride = 2 if mode == "strided" and min(spatial) >= 4 else 1
        if mode == "depthwise":
            out, groups = channels * rng.choice([1, 2]), channels
        elif mode == "grouped":
            out = rng.choice([4, 6, 8, 12])
            groups = _groups_dividing(rng, channels, out)
        else:
            out, groups = rng.choice([4, 5, 8, 16]), 1
        pad = dilation * (k - 1) // 2
        conv = nn.Conv1d if dims == 1 else nn.Conv2d
        self.conv = conv(
            channels,
            out,
            k,
            stride=stride,
            padding=pad,
            dilation=dilation,
            groups=groups,
            bias=rng.random() < 0.5,
            padding_mode=rng.choice(["zeros", "zeros", "reflect"]) if pad and min(spatial) > pad else "zeros",
        )
        self.norm = _channel_norm(rng, out, dims)
        self.act = _Act(rng.choice(_Act.NAMES))
        self.residual = out == channels and stride == 1 and rng.random() < 0.6
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.norm(self.conv(x)))
        return x + y if self.residual else y


class ConvTransposeBlock(nn.Module):
    """Transposed conv (1d/2d, maybe grouped, maybe output_padding) then a strided conv back down."""

    def __init__(self, rng: random.Random, channels: int, dims: int, spatial: tuple[int, ...]) -> None:
        super().__init__()
        out = rng.choice([4, 6, 8])
        groups = _groups_dividing(rng, channels, out)
        k = rng.choice([2, 3, 4])
        stride = rng.choice([1, 2])
        output_padding = 1 if stride == 2 and k >= 3 and rng.random() < 0.5 else 0
        tconv = nn.ConvTranspose1d if dims == 1 else nn.ConvTranspose2d
        self.up = tconv(
            channels,
            out,
            k,
            stride=stride,
            padding=rng.choice([0, 1]) if k > 2 else 0,
            output_padding=output_padding,
            groups=groups,
            dilation=1,
        )
        conv = nn.Conv1d if dims == 1 else nn.Conv2d
        self.down = conv(out, channels, 3, stride=stride, padding=1)
        self.act = _Act(rng.choice(_Act.NAMES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class PoolBlock(nn.Module):
    """Max / avg / adaptive pooling (1d or 2d), as modules or functions."""

    def __init__(self, rng: random.Random, channels: int, dims: int, spatial: tuple[int, ...]) -> None:
        super().__init__()
        small = min(spatial) < 2
        kind = rng.choice(
            ["avg_same", "adaptive_avg", "adaptive_max"]
            if small
            else ["max", "avg", "avg_same", "adaptive_avg", "adaptive_max", "max_fn", "avg_fn"]
        )
        self.kind, self.dims = kind, dims
        two = dims == 2
        if kind == "max":
            self.pool = (nn.MaxPool2d if two else nn.MaxPool1d)(2, ceil_mode=rng.random() < 0.5)
        elif kind == "avg":
            self.pool = (nn.AvgPool2d if two else nn.AvgPool1d)(2, count_include_pad=False)
        elif kind == "avg_same":
            self.pool = (nn.AvgPool2d if two else nn.AvgPool1d)(3, stride=1, padding=1)
        elif kind == "adaptive_avg":
            size = tuple(max(1, s // rng.choice([1, 2, 3])) for s in spatial)
            self.pool = nn.AdaptiveAvgPool2d(size) if two else nn.AdaptiveAvgPool1d(size[0])
        elif kind == "adaptive_max":
            size = tuple(max(1, s // rng.choice([1, 2])) for s in spatial)
            self.pool = nn.AdaptiveMaxPool2d(size) if two else nn.AdaptiveMaxPool1d(size[0])
        else:
            self.pool = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "max_fn":
            return (F.max_pool2d if self.dims == 2 else F.max_pool1d)(x, 3, stride=2, padding=1)
        if self.kind == "avg_fn":
            return (F.avg_pool2d if self.dims == 2 else F.avg_pool1d)(x, 2, stride=1)
        return self.pool(x)


class ChannelSplitBlock(nn.Module):
    """chunk / split along channels, different paths, then cat (channels-first streams)."""

    def __init__(self, rng: random.Random, channels: int, dims: int, spatial: tuple[int, ...]) -> None:
        super().__init__()
        self.first = channels // 2 if channels >= 2 else channels
        self.rest = channels - self.first
        conv = nn.Conv1d if dims == 1 else nn.Conv2d
        self.proj = conv(self.rest, self.rest, 1) if self.rest else nn.Identity()
        self.use_chunk = channels % 2 == 0 and rng.random() < 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rest == 0:
            return torch.cat([x, torch.relu(x)], dim=1)[:, : x.shape[1]]
        a, b = x.chunk(2, dim=1) if self.use_chunk else x.split([self.first, self.rest], dim=1)
        return torch.cat([F.relu(a), self.proj(b)], dim=1)


class ResampleBlock(nn.Module):
    """interpolate (nearest / linear), F.pad, pixel_shuffle / unshuffle, torch.where."""

    def __init__(self, rng: random.Random, channels: int, dims: int, spatial: tuple[int, ...]) -> None:
        super().__init__()
        modes = ["nearest", "linear", "pad_constant", "where"]
        if min(spatial) >= 2:
            modes.append("pad_reflect")
        if dims == 2 and channels % 4 == 0:
            modes.append("pixel_shuffle")
        if dims == 2 and all(s % 2 == 0 for s in spatial):
            modes.append("pixel_unshuffle")
        self.mode, self.dims = rng.choice(modes), dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "nearest":
            return F.interpolate(x, scale_factor=2, mode="nearest")
        if self.mode == "linear":
            return F.interpolate(
                x, scale_factor=1.5, mode="bilinear" if self.dims == 2 else "linear", align_corners=False
            )
        if self.mode == "pad_constant":
            return F.pad(x, (1, 2) * self.dims, value=0.5)
        if self.mode == "pad_reflect":
            return F.pad(x, (1, 1) * self.dims, mode="reflect")
        if self.mode == "pixel_shuffle":
            return F.pixel_shuffle(x, 2)
        if self.mode == "pixel_unshuffle":
            return F.pixel_unshuffle(x, 2)
        return torch.where(x > 0, x, 0.1 * x)


class AttentionBlock(nn.Module):
    """Pre-norm self-attention with F.scaled_dot_product_attention (causal, masked, or plain) + residual."""

    def __init__(self, rng: random.Random, dim: int, length: int) -> None:
        super().__init__()
        self.heads = rng.choice([h for h in (1, 2, 4) if dim % h == 0])
        self.norm = _seq_norm(rng, dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=rng.random() < 0.5)
        self.out = nn.Linear(dim, dim)
        self.mode = rng.choice(["causal", "plain", "bool_mask", "float_mask", "scale"])
        self.split_style = rng.choice(["chunk", "unbind"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h = self.heads
        if self.split_style == "chunk":
            q, k, v = (t.reshape(b, n, h, d // h).transpose(1, 2) for t in self.qkv(self.norm(x)).chunk(3, dim=-1))
        else:
            q, k, v = self.qkv(self.norm(x)).view(b, n, 3, h, d // h).permute(2, 0, 3, 1, 4).unbind(0)
        if self.mode == "causal":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.mode == "bool_mask":
            mask = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif self.mode == "float_mask":
            mask = torch.zeros(n, n, dtype=x.dtype, device=x.device)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask - 0.5 * torch.arange(n, device=x.device))
        elif self.mode == "scale":
            y = F.scaled_dot_product_attention(q, k, v, scale=0.3)
        else:
            y = F.scaled_dot_product_attention(q, k, v)
        return x + self.out(y.transpose(1, 2).reshape(b, n, d))


class MHABlock(nn.Module):
    """nn.MultiheadAttention (batch_first or not, with or without weights, maybe a causal mask)."""

    def __init__(self, rng: random.Random, dim: int, length: int) -> None:
        super().__init__()
        heads = rng.choice([h for h in (1, 2, 4) if dim % h == 0])
        self.batch_first = rng.random() < 0.5
        self.mha = nn.MultiheadAttention(dim, heads, batch_first=self.batch_first, bias=rng.random() < 0.7)
        self.need_weights = rng.random() < 0.5
        self.causal = rng.random() < 0.5
        self.norm = _seq_norm(rng, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        if not self.batch_first:
            y = y.transpose(0, 1)
        mask = None
        if self.causal:
            n = x.shape[1]
            mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), diagonal=1)
        out, weights = self.mha(y, y, y, need_weights=self.need_weights, attn_mask=mask)
        if not self.batch_first:
            out = out.transpose(0, 1)
        if weights is not None:
            out = out + weights.mean(dim=-1, keepdim=True)
        return x + out


class MLPBlock(nn.Module):
    """Linear-act-Linear with a residual; sometimes a gated (SwiGLU-style) variant."""

    def __init__(self, rng: random.Random, dim: int, length: int) -> None:
        super().__init__()
        hidden = rng.choice([dim, 2 * dim, 3 * dim + 1])
        self.gated = rng.random() < 0.4
        self.up = nn.Linear(dim, hidden * (2 if self.gated else 1))
        self.down = nn.Linear(hidden, dim, bias=rng.random() < 0.5)
        self.act = _Act(rng.choice(_Act.NAMES))
        self.norm = _seq_norm(rng, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(self.norm(x))
        if self.gated:
            a, g = h.chunk(2, dim=-1)
            h = self.act(a) * g
        else:
            h = self.act(h)
        return x + self.down(h)


class EinsumBlock(nn.Module):
    """einsum projections and a gram-matrix mixing, with softmax."""

    def __init__(self, rng: random.Random, dim: int, length: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, dim) / dim**0.5)
        self.mode = rng.choice(["proj", "gram", "ellipsis", "outer_sum", "matmul", "bmm"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "proj":
            return torch.einsum("bld,de->ble", x, self.weight)
        if self.mode == "ellipsis":
            return torch.einsum("...d,de->...e", x, self.weight) + x
        if self.mode == "matmul":
            return x @ self.weight
        if self.mode == "bmm":
            return torch.bmm(torch.bmm(x, x.transpose(1, 2)).softmax(-1), x)
        if self.mode == "outer_sum":
            return x + torch.einsum("bld->bd", x).unsqueeze(1) * 0.1
        scores = torch.einsum("bld,bmd->blm", x, x) / x.shape[-1] ** 0.5
        return torch.einsum("blm,bmd->bld", scores.softmax(dim=-1), x)


class SplitStackBlock(nn.Module):
    """split / chunk / unbind along features, stack, reduce; cat back."""

    def __init__(self, rng: random.Random, dim: int, length: int) -> None:
        super().__init__()
        self.mode = rng.choice(["split_stack", "chunk_cat", "unbind_stack", "tensor_split"])
        self.lin = nn.Linear(dim // 2, dim // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1]
        if self.mode == "split_stack":
            parts = x.split(d // 2, dim=-1)
            return torch.cat([torch.stack(parts, dim=0).sum(0), self.lin(parts[1])], dim=-1)
        if self.mode == "chunk_cat":
            a, b = x.chunk(2, dim=-1)
            return torch.cat((self.lin(b), a * torch.sigmoid(b)), dim=-1)
        if self.mode == "unbind_stack":
            rows = x.unbind(dim=1)
            return torch.stack([r * (i + 1) for i, r in enumerate(rows)], dim=1)
        a, b = torch.tensor_split(x, 2, dim=-1)
        return torch.hstack([a, b]).reshape(x.shape) + torch.cat([self.lin(a), b], dim=-1)


class IndexBlock(nn.Module):
    """Slicing, strided slicing, integer-tensor indexing, gather, flip, roll, masked_fill."""

    def __init__(self, rng: random.Random, dim: int, length: int) -> None:
        super().__init__()
        modes = ["gather", "flip_roll", "masked_fill", "index_select", "last_token", "narrow"]
        if length >= 2:
            modes.append("stride2")
        self.mode = rng.choice(modes)
        gen = torch.Generator().manual_seed(rng.randrange(2**31))
        self.register_buffer("perm", torch.randperm(length, generator=gen), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "stride2":
            return x[:, ::2, :] * 2.0
        if self.mode == "last_token":
            return x[:, -1:, :] + x.mean(dim=1, keepdim=True)
        if self.mode == "gather":
            idx = self.perm.view(1, -1, 1).expand(x.shape[0], -1, x.shape[2])
            return torch.gather(x, 1, idx) + x
        if self.mode == "index_select":
            return x.index_select(1, self.perm) - x[:, self.perm]
        if self.mode == "flip_roll":
            return x.flip(1) + torch.roll(x, shifts=1, dims=-1).masked_fill(x > 1.0, 1.0)
        if self.mode == "narrow":
            d = x.shape[-1]
            return torch.cat([x.narrow(-1, 0, d // 2), x[..., d // 2 :] * 0.5], dim=-1)
        return x.masked_fill(x > 0.5, 0.5)


class SoftmaxBlock(nn.Module):
    """softmax / log_softmax gating and reductions (amax, var, cumsum, norm)."""

    def __init__(self, rng: random.Random, dim: int, length: int) -> None:
        super().__init__()
        self.mode = rng.choice(["gate", "log", "stats", "cumsum"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "gate":
            return x * torch.softmax(x, dim=-1)
        if self.mode == "log":
            return F.log_softmax(x, dim=-1) + x
        if self.mode == "stats":
            return (x - x.amax(dim=-1, keepdim=True)) / (x.var(dim=-1, keepdim=True, unbiased=False) + 1).sqrt()
        return torch.cumsum(x, dim=1) / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(1e-3)


# ------------------------------------------------------------------------------------------ stream transitions


class ImageToSeq(nn.Module):
    def __init__(self, channels: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(channels, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x.flatten(2).transpose(1, 2))


class SeqToSignal(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous()


class SignalToSeq(nn.Module):
    def __init__(self, channels: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(channels, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x.permute(0, 2, 1))


class TokenStem(nn.Module):
    """Embedding of integer ids plus a learned position embedding indexed with arange."""

    def __init__(self, vocab: int, length: int, dim: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(length, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.tok(ids) + self.pos(positions).unsqueeze(0)


class Head(nn.Module):
    """Pool to (B, features), classify; sometimes also return the pooled features (a tuple output)."""

    def __init__(self, stream: str, features: int, classes: int, tuple_out: bool) -> None:
        super().__init__()
        self.stream = stream
        self.fc = nn.Linear(features, classes)
        self.tuple_out = tuple_out

    def forward(self, x: torch.Tensor) -> Any:
        if self.stream == "image":
            pooled = F.adaptive_avg_pool2d(x, 1).flatten(1)
        elif self.stream == "signal":
            pooled = x.mean(dim=-1)
        else:
            pooled = x.mean(dim=1)
        logits = self.fc(pooled)
        return (logits, pooled) if self.tuple_out else logits


# ---------------------------------------------------------------------------------------------- graph breaks

BREAKS = ("none", "graph_break", "item_branch", "tolist", "none")


class Break(nn.Module):
    """Something dynamo cannot trace through, so the function compiles as several subgraphs."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "graph_break":
            torch._dynamo.graph_break()
            return x * 1.5
        if self.kind == "item_branch":
            if x.float().mean().item() > 0:  # data-dependent python branching
                return x - 0.25
            return x + 0.25
        # .tolist(): count positive values in python, use the count as a python int
        count = sum(1 for v in x.flatten()[:6].float().tolist() if v > 0)
        return x + count


# --------------------------------------------------------------------------------------------- the generator

# (name, stream it needs, factory(rng, stream_state) -> module)
_CHANNEL_BLOCKS = {
    "conv": ConvBlock,
    "conv_transpose": ConvTransposeBlock,
    "pool": PoolBlock,
    "channel_split": ChannelSplitBlock,
    "resample": ResampleBlock,
}
_SEQ_BLOCKS = {
    "sdpa": AttentionBlock,
    "mha": MHABlock,
    "mlp": MLPBlock,
    "einsum": EinsumBlock,
    "split_stack": SplitStackBlock,
    "index": IndexBlock,
    "softmax": SoftmaxBlock,
}
BLOCKS: tuple[tuple[str, str], ...] = (
    *((name, "image") for name in _CHANNEL_BLOCKS),
    *((name, "seq") for name in _SEQ_BLOCKS),
    *((name, "signal") for name in _CHANNEL_BLOCKS),
)
DTYPES = ("float32", "float32", "float64", "float32", "bfloat16", "float32", "float32")


@dataclass
class Case:
    seed: int
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    dtype: torch.dtype
    breaks: tuple[str, ...]
    blocks: tuple[str, ...]
    grad: bool
    notes: list[str] = field(default_factory=list)

    @property
    def has_break(self) -> bool:
        return any(b != "none" for b in self.breaks)

    def describe(self) -> str:
        shapes = ", ".join(f"{tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}" for t in self.inputs)
        return (
            f"seed={self.seed} dtype={str(self.dtype).replace('torch.', '')} inputs=[{shapes}] "
            f"blocks={list(self.blocks)} breaks={[b for b in self.breaks if b != 'none']} grad={self.grad}"
        )


class _Sequential(nn.Module):
    """nn.Sequential, but named so that graph-break tests can tell it is ours."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x


def _out_shape(layer: nn.Module, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[int, ...]:
    with torch.no_grad():
        probe = torch.zeros(1, *shape, dtype=dtype) if dtype.is_floating_point else torch.ones(1, *shape, dtype=dtype)
        return tuple(layer(probe).shape[1:])


def build_case(seed: int) -> Case:
    """The model, inputs and description for ``seed`` (the same seed always gives the same case)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    primary, primary_stream = BLOCKS[seed % len(BLOCKS)]
    dtype = getattr(torch, DTYPES[seed % len(DTYPES)])
    batch = rng.choice([1, 1, 2, 3, 4])
    dim = rng.choice([8, 12, 16])

    layers: list[nn.Module] = []
    names: list[str] = []
    # stem: what the model takes, converted to the primary block's stream
    if primary_stream == "image":
        channels = rng.choice([1, 3, 4])
        size = rng.choice([(7, 11), (8, 8), (13, 5), (16, 12), (5, 5), (1, 9)])
        inputs = (torch.randn(batch, channels, *size),)
        stream, shape = "image", (channels, *size)
    elif primary_stream == "signal":
        channels = rng.choice([1, 2, 3, 6])
        length = rng.choice([1, 7, 13, 32])
        inputs = (torch.randn(batch, channels, length),)
        stream, shape = "signal", (channels, length)
    else:
        length = rng.choice([1, 5, 7, 16])
        if rng.random() < 0.5:
            vocab = rng.choice([11, 50])
            ids_dtype = rng.choice([torch.int64, torch.int32])
            ids = torch.randint(0, vocab, (batch, length), dtype=ids_dtype)
            inputs = (ids,)
            layers.append(TokenStem(vocab, length, dim))
            names.append(f"embedding[{str(ids_dtype).replace('torch.', '')}]")
        else:
            inputs = (torch.randn(batch, length, dim),)
        stream, shape = "seq", (length, dim)

    def channel_block(kind: str, dims: int, shape: tuple[int, ...]) -> nn.Module:
        return _CHANNEL_BLOCKS[kind](rng, shape[0], dims, shape[1:])

    def add_block(kind: str) -> None:
        nonlocal shape
        if stream in ("image", "signal"):
            layer = channel_block(kind, 2 if stream == "image" else 1, shape)
        else:
            layer = _SEQ_BLOCKS[kind](rng, shape[1], shape[0])
        layers.append(layer)
        names.append(f"{stream}:{kind}")
        shape = _out_shape(_Sequential(layers[-1:]), shape, torch.float32)

    n_blocks = rng.randint(1, 3)
    where = rng.randrange(n_blocks)
    pool = list(_CHANNEL_BLOCKS) if stream != "seq" else list(_SEQ_BLOCKS)
    for i in range(n_blocks):
        add_block(primary if i == where else rng.choice(pool))

    # maybe move to another stream and add a block there
    if rng.random() < 0.5:
        if stream == "image":
            layers.append(ImageToSeq(shape[0], dim))
            stream, shape = "seq", (shape[1] * shape[2], dim)
        elif stream == "signal":
            layers.append(SignalToSeq(shape[0], dim))
            stream, shape = "seq", (shape[1], dim)
        else:
            layers.append(SeqToSignal())
            stream, shape = "signal", (shape[1], shape[0])
        names.append(f"->{stream}")
        add_block(rng.choice(list(_SEQ_BLOCKS) if stream == "seq" else list(_CHANNEL_BLOCKS)))

    # graph breaks: the kind cycles with the seed; sometimes two of them
    first_break = BREAKS[(seed // len(BLOCKS) + seed) % len(BREAKS)]
    breaks = [first_break]
    if first_break != "none" and rng.random() < 0.3:
        breaks.append(rng.choice([b for b in BREAKS if b != "none"]))
    for kind in breaks:
        if kind != "none":
            layers.insert(rng.randint(1, len(layers)), Break(kind))

    layers.append(Head(stream, shape[0] if stream != "seq" else shape[1], rng.choice([3, 10]), rng.random() < 0.3))
    model = _Sequential(layers).eval()
    if dtype != torch.float32:
        model = model.to(dtype)
        inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
    return Case(
        seed=seed,
        model=model,
        inputs=inputs,
        dtype=dtype,
        breaks=tuple(breaks),
        blocks=tuple(names),
        grad=rng.random() < 0.3,
    )


def build_cases(count: int = 60, start: int = 0) -> list[Case]:
    return [build_case(seed) for seed in range(start, start + count)]
