"""The GPU lease's op plan: the op shapes LLMs and vision models spend their GPU time in, most valuable first.

``perfpredict collect --ops`` times the ops the zoo's models happen to run. A 15-minute GPU lease needs a chosen
set instead, ordered so that a window cut short still holds every op kind (:func:`lease_plan`):

- GEMMs: the projections of five real LLM shapes (Llama-2-7B, Llama-3-8B, Qwen2-0.5B, Qwen2-1.5B, CodeLlama-34B:
  q, k, o, gate, down and lm_head as HF runs them, fused qkv and gate-up as serving engines run them) over 1-8,192
  tokens (not the 70B models': Vidur's profiles of Llama-2-70B, Llama-3-70B and Qwen-72B are the held-out test of
  issue 37, so their MLP shapes stay out of every training set); Vidur's fp16 Llama-2-7B projections at tensor parallel 1-8 (the same shapes as
  ``data/external/vidur``, so our rows and theirs meet on the H100); a seeded spread of M, N, K from 16 to 8,192,
  a third of them not multiples of 64; the attention score and value matmuls of eager attention;
- SDPA (``aten::scaled_dot_product_attention``, so the GPU picks its own kernel as a model's call would): causal
  prefill, decode against a KV cache (with and without a static cache's mask), and encoder attention;
- layer norm, RMS norm (fused, and the chain of elementwise ops HF's Llama/Qwen2 module runs), batch norm;
- softmax (attention scores and vocabulary logits, in the input dtype and upcast to float32);
- elementwise: add, mul, SiLU, GELU (erf and tanh), casts to and from float32; embedding with random token ids;
- convolutions of ResNet-50, ViT's patch embedding, ConvNeXt's 7x7 depthwise, MobileNetV2's and EfficientNet's
  depthwise layers, at batch 1, 8 and 32.

Every op is an :class:`~perfpredict.profiling.op_instances.OpInstance`, so its row has the op collector's schema
and its key rebuilds it. Ops are recorded on the meta device from the same torch calls a model makes (F.linear
becomes ``mm`` with the transposed weight view), except where the meta device would take another path than a GPU
(SDPA, fused RMS norm, softmax with a dtype, batch norm): those are planned as the composite call itself.

Order: tier 1 (bf16 at the most used shapes of every kind, and the fp16 projections that meet Vidur's rows), tier 2
(more token counts, fused projections, convolutions at batch 1 and 32, the GEMM spread, Vidur's tensor-parallel
shapes), tier 3 (odd token counts, Vidur's shapes at more token counts, GQA attention), tier 4 (fp16 twins of tiers 1
and 2), tier 5 (more of the GEMM spread, Vidur's whole token grid, longer prefills, convolutions at batch 4 and 64):
more than one lease measures, so the next one has work. Within a tier the groups take turns, one op each. The plan
is deterministic for a given torch, so a collection resumed in a later lease (rows already in the folder are
skipped) extends it rather than redoing it; new shapes go into a new tier at the end, never into an earlier one.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from perfpredict.core.units import GIB
from perfpredict.profiling.op_instances import OpInstance, record_ops

PLAN_VERSION = 1
SOURCE_PREFIX = "lease_plan"  # the op rows' source_key: "lease_plan/<tier>/<group>"
#: the largest op the plan holds (bytes of its tensor arguments); a dry run on a CPU passes much less
MAX_IO_BYTES = 2 * GIB


@dataclass(frozen=True)
class LLMShape:
    """The dimensions of one decoder LLM that its projections, attention and norms take."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    qkv_bias: bool = False


LLMS = (
    LLMShape("llama2_7b", 4096, 32, 32, 128, 11008, 32000),
    LLMShape("qwen2_0_5b", 896, 14, 2, 64, 4864, 151936, qkv_bias=True),
    LLMShape("llama3_8b", 4096, 32, 8, 128, 14336, 128256),
    LLMShape("qwen2_1_5b", 1536, 12, 2, 128, 8960, 151936, qkv_bias=True),
    LLMShape("codellama_34b", 8192, 64, 8, 128, 22016, 32000),
)
TOKENS_1 = (1, 16, 128, 512, 2048, 8192)  # decode, small batch, typical prefill, long prefill
TOKENS_2 = (2, 4, 8, 32, 64, 256, 1024, 4096)
TOKENS_3 = (3, 12, 24, 48, 100, 200, 384, 1000, 1536, 3000, 6144)
VIDUR_TOKENS_1 = (1, 16, 128, 512, 2048, 4096)  # all in Vidur's own token list
VIDUR_TOKENS_3 = (2, 8, 32, 64, 256, 1024)
SEQS_PREFILL = (128, 512, 2048, 8192)
DECODE_CONTEXTS = (512, 2048, 8192)
DECODE_BATCHES = (1, 8, 32)


@dataclass(frozen=True)
class PlannedOp:
    op: OpInstance
    group: str  # "gemm_llm", "sdpa_prefill", ...
    tier: int

    @property
    def source(self) -> str:
        return f"{SOURCE_PREFIX}/{self.tier}/{self.group}"


def _t(shape: Iterable[int], dtype: str, **extra: Any) -> dict[str, Any]:
    return {"t": [int(d) for d in shape], "d": dtype, **extra}


def _meta(shape: Iterable[int], dtype: str) -> Any:
    import torch

    return torch.empty(*[int(d) for d in shape], dtype=getattr(torch, dtype), device="meta")


def _recorded(fn: Callable[..., Any], *tensors: Any) -> list[OpInstance]:
    """The kernel ops of ``fn(*tensors)`` on meta tensors, creation ops left out."""
    return [op for op in record_ops(lambda: fn(*tensors)) if op.kind != "creation"]


def linear(tokens: int, k: int, n: int, dtype: str, bias: bool = False) -> list[OpInstance]:
    """``F.linear`` of ``[tokens, k]`` by an ``[n, k]`` weight: ``mm`` (``addmm`` with a bias), weight transposed."""
    import torch.nn.functional as F

    args = [_meta((tokens, k), dtype), _meta((n, k), dtype)] + ([_meta((n,), dtype)] if bias else [])
    return _recorded(F.linear, *args)


def matmul(a_shape: Iterable[int], b_shape: Iterable[int], dtype: str, transpose_b: bool = False) -> list[OpInstance]:
    """``torch.matmul(a, b)`` (``b`` given as its transpose's shape and transposed when ``transpose_b``)."""
    import torch

    b = _meta(b_shape, dtype)
    return _recorded(torch.matmul, _meta(a_shape, dtype), b.transpose(-1, -2) if transpose_b else b)


def sdpa(
    q: Iterable[int], kv: Iterable[int], dtype: str, *, causal: bool = False, mask: bool = False, gqa: bool = False
) -> list[OpInstance]:
    """The composite SDPA call, so the device picks flash, memory-efficient or cuDNN as it would for a model;
    ``mask``: an additive float mask ``[b, 1, q_len, kv_len]`` (a static KV cache's), random so nothing is
    masked out entirely."""
    q, kv = list(q), list(kv)
    args = [_t(q, dtype), _t(kv, dtype), _t(kv, dtype)]
    if mask:
        args.append(_t((q[0], 1, q[2], kv[2]), dtype))
    kwargs = (("is_causal", True),) if causal else ()
    if gqa:
        kwargs = (*kwargs, ("enable_gqa", True))
    return [OpInstance("aten::scaled_dot_product_attention.default", tuple(args), tuple(sorted(kwargs)))]


def rms_norm(shape: Iterable[int], dtype: str) -> list[OpInstance]:
    shape = list(shape)
    return [OpInstance("aten::rms_norm.default", (_t(shape, dtype), [shape[-1]], _t(shape[-1:], dtype), 1e-6))]


def rms_norm_hf(shape: Iterable[int], dtype: str) -> list[OpInstance]:
    """The elementwise chain of HF's LlamaRMSNorm / Qwen2RMSNorm (upcast, pow, mean, rsqrt, scale, downcast)."""
    import torch

    def chain(x: Any, w: Any) -> Any:
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return w * h.to(x.dtype)

    shape = list(shape)
    return _recorded(chain, _meta(shape, dtype), _meta(shape[-1:], dtype))


def layer_norm(shape: Iterable[int], dtype: str) -> list[OpInstance]:
    import torch.nn.functional as F

    shape = list(shape)
    return _recorded(
        lambda x, w, b: F.layer_norm(x, shape[-1:], w, b, 1e-5),
        _meta(shape, dtype),
        _meta(shape[-1:], dtype),
        _meta(shape[-1:], dtype),
    )


def batch_norm(shape: Iterable[int], dtype: str) -> list[OpInstance]:
    """Inference batch norm as a model calls it (the composite: cuDNN's kernel on a GPU)."""
    shape = list(shape)
    c = [shape[1]]
    args = (_t(shape, dtype), _t(c, dtype), _t(c, dtype), _t(c, dtype), _t(c, dtype), False, 0.1, 1e-5, True)
    return [OpInstance("aten::batch_norm.default", args)]


def softmax(shape: Iterable[int], dtype: str, upcast: bool = False) -> list[OpInstance]:
    """Softmax over the last axis; ``upcast``: computed into float32, as HF's eager attention does."""
    return [OpInstance("aten::softmax.int", (_t(shape, dtype), -1, {"dtype": "float32"} if upcast else None))]


def elementwise(name: str, shape: Iterable[int], dtype: str) -> list[OpInstance]:
    import torch
    import torch.nn.functional as F

    shape = list(shape)
    x = _meta(shape, dtype)
    fns: dict[str, Callable[..., Any]] = {
        "add": lambda a, b: a + b,
        "mul": lambda a, b: a * b,
        "add_bias": lambda a, b: a + b[-1],
        "silu": lambda a, _: F.silu(a),
        "gelu": lambda a, _: F.gelu(a),
        "gelu_tanh": lambda a, _: F.gelu(a, approximate="tanh"),
        "to_float32": lambda a, _: a.to(torch.float32),
        "from_float32": lambda a, _: a.to(getattr(torch, dtype)),
    }
    if name == "from_float32":
        x = _meta(shape, "float32")
    return _recorded(fns[name], x, _meta(shape, dtype))


def embedding(tokens: int, vocab: int, hidden: int, dtype: str) -> list[OpInstance]:
    """A token embedding lookup with random ids in ``[0, vocab)`` (the ``hi`` field of the index tensor)."""
    return [OpInstance("aten::embedding.default", (_t((vocab, hidden), dtype), _t((tokens,), "int64", hi=vocab)))]


def conv2d(
    batch: int,
    cin: int,
    size: int,
    cout: int,
    kernel: int,
    stride: int,
    dtype: str,
    groups: int = 1,
    bias: bool = False,
) -> list[OpInstance]:
    import torch.nn.functional as F

    args = [_meta((batch, cin, size, size), dtype), _meta((cout, cin // groups, kernel, kernel), dtype)]
    args.append(_meta((cout,), dtype) if bias else None)
    padding = 0 if stride == kernel else kernel // 2  # a patchify stem (ViT, ConvNeXt) has none
    return _recorded(lambda x, w, b: F.conv2d(x, w, b, stride, padding, 1, groups), *args)


# -- the groups ----------------------------------------------------------------------------------------------
def _projections(m: LLMShape, fused: bool) -> list[tuple[str, int, int, bool]]:
    """(name, k, n, bias) of one decoder layer's linear layers: HF's separate ones, or an engine's fused ones."""
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    if fused:
        return [("qkv", m.hidden, q + 2 * kv, m.qkv_bias), ("gate_up", m.hidden, 2 * m.intermediate, False)]
    return [
        ("q", m.hidden, q, m.qkv_bias),
        ("k", m.hidden, kv, m.qkv_bias),
        ("o", q, m.hidden, False),
        ("gate", m.hidden, m.intermediate, False),
        ("down", m.intermediate, m.hidden, False),
    ]


def gemm_llm(tokens: Iterable[int], dtype: str, fused: bool = False) -> Iterator[OpInstance]:
    for t in tokens:
        for m in LLMS:
            for _, k, n, bias in _projections(m, fused):
                yield from linear(t, k, n, dtype, bias)


def lm_head(tokens: Iterable[int], dtype: str) -> Iterator[OpInstance]:
    for t in tokens:
        for vocab, hidden in sorted({(m.vocab, m.hidden) for m in LLMS}):
            yield from linear(t, hidden, vocab, dtype)


def gemm_vidur(tokens: Iterable[int], tps: Iterable[int], dtype: str = "float16") -> Iterator[OpInstance]:
    """Vidur's Llama-2-7B projections (fused qkv, output, fused up-gate, down) sharded ``tp`` ways."""
    m = LLMS[0]
    for t in tokens:
        for tp in tps:
            q = m.heads * m.head_dim
            yield from linear(t, m.hidden, 3 * q // tp, dtype)
            yield from linear(t, q // tp, m.hidden, dtype)
            yield from linear(t, m.hidden, 2 * m.intermediate // tp, dtype)
            yield from linear(t, m.intermediate // tp, m.hidden, dtype)


def gemm_spread(n: int, dtype: str, seed: int = 0) -> Iterator[OpInstance]:
    """``n`` GEMMs with M, N, K log-uniform in [16, 8192]: a third multiples of 128, a third multiples of 8 but not
    of 64, a third any size; every other one with the second operand transposed (a linear layer's weight)."""
    rng = random.Random(seed)
    for i in range(n):
        dims = []
        for _ in range(3):
            d = round(2 ** rng.uniform(4, 13))
            if i % 3 == 0:
                d = max(128, 128 * round(d / 128))
            elif i % 3 == 1:
                d = max(8, 8 * round(d / 8))
                d += 8 if d % 64 == 0 else 0
            dims.append(d)
        mm, nn, kk = dims
        yield from matmul((mm, kk), (nn, kk) if i % 2 else (kk, nn), dtype, transpose_b=bool(i % 2))


def attention_matmuls(dtype: str, shapes: Iterable[tuple[int, int, int, int]]) -> Iterator[OpInstance]:
    """Eager attention's ``q @ k^T`` and ``p @ v`` for (batch, heads, seq, head_dim)."""
    for b, h, s, d in shapes:
        yield from matmul((b, h, s, d), (b, h, s, d), dtype, transpose_b=True)
        yield from matmul((b, h, s, s), (b, h, s, d), dtype)


def sdpa_prefill(dtype: str, seqs: Iterable[int]) -> Iterator[OpInstance]:
    for s in seqs:
        for m in LLMS[:2]:
            yield from sdpa((1, m.heads, s, m.head_dim), (1, m.heads, s, m.head_dim), dtype, causal=True)
        if s <= 2048:
            yield from sdpa((8, 32, s, 128), (8, 32, s, 128), dtype, causal=True)


def sdpa_decode(dtype: str, contexts: Iterable[int], batches: Iterable[int], mask: bool) -> Iterator[OpInstance]:
    for ctx, b in itertools.product(contexts, batches):
        for m in LLMS[:2]:
            yield from sdpa((b, m.heads, 1, m.head_dim), (b, m.heads, ctx, m.head_dim), dtype, mask=mask)


def sdpa_encoder(dtype: str) -> Iterator[OpInstance]:
    for b, h, s, d in ((32, 12, 128, 64), (32, 12, 197, 64), (8, 16, 512, 64), (64, 12, 197, 64)):
        yield from sdpa((b, h, s, d), (b, h, s, d), dtype)


def sdpa_gqa(dtype: str) -> Iterator[OpInstance]:
    for s in SEQS_PREFILL:
        for m in LLMS[2:4]:
            yield from sdpa((1, m.heads, s, m.head_dim), (1, m.kv_heads, s, m.head_dim), dtype, causal=True, gqa=True)


def norms(tokens: Iterable[int], dtype: str) -> Iterator[OpInstance]:
    for t in tokens:
        for h in (896, 4096, 8192):
            yield from rms_norm((t, h), dtype)
        for h in (768, 1024, 4096):
            yield from layer_norm((t, h), dtype)
        yield from rms_norm_hf((t, 4096), dtype)


def softmaxes(dtype: str, seqs: Iterable[int]) -> Iterator[OpInstance]:
    for s in seqs:
        yield from softmax((1, 32, s, s), dtype, upcast=True)
        yield from softmax((8, 12, min(s, 512), min(s, 512)), dtype)
    for t in (1, 8, 32):
        yield from softmax((t, 32000), dtype, upcast=True)
        yield from softmax((t, 151936), dtype, upcast=True)


def elementwise_llm(tokens: Iterable[int], dtype: str, widths: Iterable[int] = (4096, 14336)) -> Iterator[OpInstance]:
    for t, h in itertools.product(tokens, widths):
        for name in ("add", "mul", "silu", "gelu", "gelu_tanh", "to_float32", "from_float32", "add_bias"):
            yield from elementwise(name, (t, h), dtype)


def embeddings(tokens: Iterable[int], dtype: str) -> Iterator[OpInstance]:
    for t in tokens:
        for m in LLMS[:3]:
            yield from embedding(t, m.vocab, m.hidden, dtype)


#: (cin, size, cout, kernel, stride, groups, bias) of vision models' convolutions at 224 px
CONVS = (
    (3, 224, 64, 7, 2, 1, False),  # ResNet-50 stem
    (64, 56, 64, 1, 1, 1, False),  # ResNet-50 stage 1
    (64, 56, 64, 3, 1, 1, False),
    (64, 56, 256, 1, 1, 1, False),
    (256, 56, 128, 1, 1, 1, False),
    (128, 28, 128, 3, 1, 1, False),  # ResNet-50 stage 2
    (128, 28, 512, 1, 1, 1, False),
    (256, 14, 256, 3, 1, 1, False),  # ResNet-50 stage 3
    (1024, 14, 256, 1, 1, 1, False),
    (512, 7, 512, 3, 1, 1, False),  # ResNet-50 stage 4
    (512, 7, 2048, 1, 1, 1, False),
    (3, 224, 768, 16, 16, 1, True),  # ViT-B/16 patch embedding
    (3, 224, 96, 4, 4, 1, True),  # ConvNeXt-T stem
    (96, 56, 96, 7, 1, 96, True),  # ConvNeXt-T depthwise 7x7
    (384, 14, 384, 7, 1, 384, True),
    (32, 112, 32, 3, 1, 32, False),  # MobileNetV2 depthwise 3x3
    (144, 56, 144, 3, 1, 144, False),
    (384, 14, 384, 3, 1, 384, False),
    (960, 7, 960, 3, 1, 960, False),
    (240, 28, 240, 5, 1, 240, False),  # EfficientNet-B0 depthwise 5x5
    (672, 14, 672, 5, 1, 672, False),
    (144, 56, 24, 1, 1, 1, False),  # MobileNetV2 projection 1x1
)


def convolutions(batches: Iterable[int], dtype: str) -> Iterator[OpInstance]:
    for b in batches:
        for cin, size, cout, kernel, stride, groups, bias in CONVS:
            yield from conv2d(b, cin, size, cout, kernel, stride, dtype, groups, bias)
        yield from batch_norm((b, 64, 56, 56), dtype)
        yield from batch_norm((b, 256, 14, 14), dtype)


def _tier_groups(tier: int, dtype: str) -> dict[str, Iterable[OpInstance]]:
    """The groups of one tier, each a lazy stream of ops (the tiers are listed in the module's docstring)."""
    vit_attn = ((32, 12, 197, 64), (8, 32, 512, 128), (1, 32, 2048, 128))
    if tier == 1:
        return {
            "gemm_llm": gemm_llm(TOKENS_1, dtype),
            "gemm_vidur_fp16": gemm_vidur(VIDUR_TOKENS_1, (1,)),
            "sdpa_prefill": sdpa_prefill(dtype, SEQS_PREFILL),
            "sdpa_decode": sdpa_decode(dtype, DECODE_CONTEXTS, DECODE_BATCHES, mask=False),
            "norm": norms(TOKENS_1, dtype),
            "elementwise": elementwise_llm(TOKENS_1, dtype, (4096,)),
            "softmax": softmaxes(dtype, (512, 2048)),
            "lm_head": lm_head((1, 8, 32), dtype),
            "embedding": embeddings(TOKENS_1, dtype),
            "conv": convolutions((8,), dtype),
        }
    if tier == 2:
        return {
            "gemm_llm": gemm_llm(TOKENS_2, dtype),
            "gemm_llm_fused": gemm_llm(TOKENS_1, dtype, fused=True),
            "gemm_spread": gemm_spread(48, dtype),
            "sdpa_decode_static": sdpa_decode(dtype, DECODE_CONTEXTS, DECODE_BATCHES, mask=True),
            "sdpa_encoder": sdpa_encoder(dtype),
            "attention_matmul": attention_matmuls(dtype, vit_attn),
            "conv": convolutions((1, 32), dtype),
            "norm": norms(TOKENS_2, dtype),
            "elementwise": elementwise_llm(TOKENS_2, dtype, (896, 4096)),
            "gemm_vidur_fp16": gemm_vidur(VIDUR_TOKENS_1, (2, 4, 8)),
        }
    if tier == 3:
        return {
            "gemm_llm": gemm_llm(TOKENS_3, dtype),
            "gemm_llm_fused": gemm_llm(TOKENS_2, dtype, fused=True),
            "gemm_spread": itertools.islice(gemm_spread(96, dtype), 48, None),
            "gemm_vidur_fp16": gemm_vidur(VIDUR_TOKENS_3, (1, 2, 4, 8)),
            "sdpa_gqa": sdpa_gqa(dtype),
            "softmax": softmaxes(dtype, (128, 8192)),
            "elementwise": elementwise_llm(TOKENS_1 + TOKENS_2, dtype, (14336,)),
            "lm_head": lm_head((2, 4, 16, 64), dtype),
            "embedding": embeddings(TOKENS_2, dtype),
        }
    if tier == 5:
        vidur_grid = tuple(range(64, 4097, 64))  # Vidur's token grid above 64, every 64
        return {
            "gemm_spread": itertools.islice(gemm_spread(400, dtype), 96, None),
            "gemm_vidur_fp16": gemm_vidur(vidur_grid, (1, 2)),
            "sdpa_prefill": sdpa_prefill(dtype, (256, 1024, 4096)),
            "conv": convolutions((4, 64), dtype),
            "gemm_llm_fused": gemm_llm(TOKENS_3, dtype, fused=True),
        }
    return {}


def _round_robin(streams: dict[str, Iterable[OpInstance]]) -> Iterator[tuple[str, OpInstance]]:
    iters = {name: iter(s) for name, s in streams.items()}
    while iters:
        for name in list(iters):
            op = next(iters[name], None)
            if op is None:
                del iters[name]
            else:
                yield name, op


def _tiers(dtypes: tuple[str, ...]) -> Iterator[tuple[int, str, dict[str, Iterable[OpInstance]]]]:
    """(tier, dtype, groups) in plan order: tiers 1-3 in the first dtype, then tiers 1-2 in the others (tier 4),
    then tier 5 (more of the GEMM spread, Vidur's token grid, longer prefills, more batches) in the first dtype."""
    for tier in (1, 2, 3):
        yield tier, dtypes[0], _tier_groups(tier, dtypes[0])
    for dtype in dtypes[1:]:
        for tier in (1, 2):
            groups = {k: v for k, v in _tier_groups(tier, dtype).items() if k != "gemm_vidur_fp16"}
            yield 4, dtype, groups
    yield 5, dtypes[0], _tier_groups(5, dtypes[0])


def lease_plan(
    dtypes: Iterable[str] = ("bfloat16", "float16"),
    *,
    max_io_bytes: int = MAX_IO_BYTES,
    max_flops: float | None = None,
) -> list[PlannedOp]:
    """The plan, in order, each op once: ``max_io_bytes`` drops larger ops; ``max_flops`` (a CPU dry run) drops
    GEMMs, convolutions and attention whose FLOPs, counted by torch on the meta device, exceed it."""
    seen: set[str] = set()
    out: list[PlannedOp] = []
    for tier, _, groups in _tiers(tuple(dtypes)):
        for group, op in _round_robin(groups):
            key = op.to_key()
            if key in seen or op.io_bytes() > max_io_bytes:
                continue
            seen.add(key)
            if max_flops is not None and op.kind in _COUNTED_KINDS and _meta_flops(op) > max_flops:
                continue
            out.append(PlannedOp(op, group, tier))
    return out


_COUNTED_KINDS = frozenset({"matmul", "conv", "attention"})  # the kinds torch's FLOP counter counts


def _meta_flops(op: OpInstance) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    call = op.build("meta")
    with FlopCounterMode(display=False) as counter:
        call()
    return float(counter.get_total_flops())


def plan_summary(plan: list[PlannedOp]) -> dict[str, Any]:
    """Counts per tier, group, kind and dtype, for the header the op stage writes before it starts."""
    return {
        "plan_version": PLAN_VERSION,
        "ops": len(plan),
        "by_tier": dict(sorted(Counter(p.tier for p in plan).items())),
        "by_group": dict(Counter(p.group for p in plan).most_common()),
        "by_kind": dict(Counter(p.op.kind for p in plan).most_common()),
        "by_dtype": dict(Counter(p.op.dtype() for p in plan).most_common()),
    }
