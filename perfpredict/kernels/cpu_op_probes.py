"""CPU op probes: the eager torch ops models spend their time in, timed on this machine, at its thread count.

Why. A CPU's time for one op is not its FMA peak or its STREAM bandwidth: it is what oneDNN's GEMM and convolution
kernels, and ATen's elementwise loops, reach on that machine for that size, with the threads torch uses, on the day
(a shared VM's other tenants take cycles from every op; the same models ran 1.2-1.6x slower two days apart). So
``perfpredict calibrate-host`` times a fixed set of probes, one op class at a time, spanning the sizes models use,
and the CPU op model (:mod:`perfpredict.predictors.cpu_op_model`) is fitted on them.

The classes (``CLASSES``): GEMMs (``nn.Linear``'s layout and batched), dense and depthwise convolutions, fused
attention, and the memory-bound kinds (elementwise, transcendental elementwise, layer and batch norm, softmax,
reduction, pooling, copies, embedding lookups, creation), each at sizes from a few KiB to tens of MiB, so the curve
crosses the caches and the size where ATen starts a parallel region (``at::internal::GRAIN_SIZE``, 32768 elements).
GEMMs, convolutions, attention and the main memory-bound kinds are probed in bfloat16 too: its speed differs from
float32 by more than its bytes (AMX on recent Xeons, widening to float32 on CPUs without AVX512_BF16).

Timing: each probe is one op on tensors built once; a sample is the mean over back-to-back calls filling at least
``window_s``; the probes run in interleaved rounds (every probe once, then the next round), and a probe's time is the
median of its rounds (``perfpredict.profiling.rounds``), so a slow spell of the host lands on one round of many probes,
not on every round of one. The load average before and after is recorded.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from perfpredict.predictors.cpu_op_classes import (
    ATTENTION,
    BATCH_NORM,
    COPY,
    CREATION,
    ELTWISE,
    ELTWISE_MATH,
    EMBEDDING,
    GEMM,
    LAYER_NORM,
    POOLING,
    REDUCTION,
    SIZED,
    SOFTMAX,
    conv_class,
)

#: element counts of the memory-bound probes: 16 KiB to 32 MiB of float32 per tensor
SIZES = (4096, 32768, 131072, 524288, 2097152, 8388608)
QUICK_SIZES = (4096, 524288)


@dataclass(frozen=True)
class Probe:
    """One op to time: its class, dtype, a label, and its FLOPs and bytes by the graph's own formulas."""

    cls: str
    dtype: str
    label: str
    flops: float
    bytes: float
    build: Callable[[], Callable[[], Any]]  # builds the tensors once and returns the call


@dataclass(frozen=True)
class ProbeResult:
    cls: str
    dtype: str
    label: str
    flops: float
    bytes: float
    seconds: float  # the median of the round medians
    spread: float  # (max - min) / median over the rounds
    rounds: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _t(dtype: str):
    import torch

    return getattr(torch, dtype)


def _bytes(dtype: str) -> int:
    return 2 if dtype in ("bfloat16", "float16") else 4


def gemm_probe(m: int, k: int, n: int, dtype: str = "float32", batch: int = 0, kn: bool = False) -> Probe:
    """``F.linear(x[m, k], w[n, k], b)`` (nn.Linear), ``torch.addmm(b, x, w[k, n])`` with ``kn`` (GPT-2's Conv1D
    layout), or ``torch.bmm`` over ``batch`` [m, k] x [k, n] matrices."""
    e = _bytes(dtype)
    count = max(batch, 1)

    def build():
        import torch
        import torch.nn.functional as F

        dt = _t(dtype)
        if batch:
            a, b = torch.randn(batch, m, k, dtype=dt), torch.randn(batch, k, n, dtype=dt)
            return lambda: torch.bmm(a, b)
        x, bias = torch.randn(m, k, dtype=dt), torch.randn(n, dtype=dt)
        if kn:
            w = torch.randn(k, n, dtype=dt)
            return lambda: torch.addmm(bias, x, w)
        w = torch.randn(n, k, dtype=dt)
        return lambda: F.linear(x, w, bias)

    label = f"bmm {batch}x[{m},{k}]x[{k},{n}]" if batch else f"{'addmm' if kn else 'linear'} [{m},{k}]x[{k},{n}]"
    return Probe(GEMM, dtype, label, 2.0 * count * m * k * n, float(e * count * (m * k + k * n + m * n)), build)


def conv_probe(
    c_in: int, c_out: int, hw: int, k: int, stride: int = 1, dtype: str = "float32", depthwise=False, batch: int = 1
):
    """``F.conv2d`` on ``batch`` NCHW images, padding k // 2; depthwise: groups = channels (c_out = c_in)."""
    groups = c_in if depthwise else 1
    out_hw = (hw + 2 * (k // 2) - k) // stride + 1
    e = _bytes(dtype)
    flops = 2.0 * batch * c_out * out_hw * out_hw * (c_in // groups) * k * k
    moved = e * (batch * c_in * hw * hw + c_out * (c_in // groups) * k * k + batch * c_out * out_hw * out_hw)

    def build():
        import torch
        import torch.nn.functional as F

        dt = _t(dtype)
        x = torch.randn(batch, c_in, hw, hw, dtype=dt)
        w = torch.randn(c_out, c_in // groups, k, k, dtype=dt)
        return lambda: F.conv2d(x, w, None, stride, k // 2, 1, groups)

    label = f"{'dw' if depthwise else 'conv'} {c_in}->{c_out} {hw}px k{k} s{stride}" + (
        f" x{batch}" if batch > 1 else ""
    )
    return Probe(conv_class(k, stride, groups), dtype, label, flops, float(moved), build)


def attention_probe(b: int, heads: int, seq: int, dim: int, causal: bool = False, dtype: str = "float32") -> Probe:
    """``F.scaled_dot_product_attention`` on [b, heads, seq, dim] (the graph counts 4 * b * h * s^2 * d FLOPs)."""
    e = _bytes(dtype)

    def build():
        import torch
        import torch.nn.functional as F

        q, k, v = (torch.randn(b, heads, seq, dim, dtype=_t(dtype)) for _ in range(3))
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    flops = 4.0 * b * heads * seq * seq * dim
    label = f"sdpa [{b},{heads},{seq},{dim}]{' causal' if causal else ''}"
    return Probe(ATTENTION, dtype, label, flops, float(e * 4 * b * heads * seq * dim), build)


def sized_probe(cls: str, numel: int, dtype: str = "float32") -> Probe:
    """One memory-bound op over about ``numel`` elements; bytes as the graph counts them (inputs + outputs)."""
    e = _bytes(dtype)
    make = _SIZED_BUILDERS[cls]
    moved = make(numel, dtype, None)
    return Probe(cls, dtype, f"{cls} {numel} el", 0.0, float(e * moved), lambda: make(numel, dtype, True))


def _eltwise(n, dtype, build):
    if build is None:
        return 3 * n
    import torch

    x, y = torch.randn(n, dtype=_t(dtype)), torch.randn(n, dtype=_t(dtype))
    return lambda: torch.add(x, y)


def _eltwise_math(n, dtype, build):
    if build is None:
        return 2 * n
    import torch
    import torch.nn.functional as F

    x = torch.randn(n, dtype=_t(dtype))
    return lambda: F.gelu(x)


def _layer_norm(n, dtype, build):
    width = 512
    rows = max(1, n // width)
    if build is None:
        return 2 * rows * width + 2 * width
    import torch
    import torch.nn.functional as F

    x, w, b = (
        torch.randn(rows, width, dtype=_t(dtype)),
        torch.ones(width, dtype=_t(dtype)),
        torch.zeros(width, dtype=_t(dtype)),
    )
    return lambda: F.layer_norm(x, (width,), w, b)


def _batch_norm(n, dtype, build):
    channels = 64
    side = max(1, int((n // channels) ** 0.5))
    numel = channels * side * side
    if build is None:
        return 2 * numel + 4 * channels
    import torch
    import torch.nn.functional as F

    x = torch.randn(1, channels, side, side, dtype=_t(dtype))
    stats = [torch.ones(channels, dtype=_t(dtype)) for _ in range(4)]
    return lambda: F.batch_norm(x, stats[0], stats[1], stats[2], stats[3], False)


def _softmax(n, dtype, build):
    width = 256
    rows = max(1, n // width)
    if build is None:
        return 2 * rows * width
    import torch

    x = torch.randn(rows, width, dtype=_t(dtype))
    return lambda: x.softmax(-1)


def _reduction(n, dtype, build):
    width = 512
    rows = max(1, n // width)
    if build is None:
        return rows * width + rows
    import torch

    x = torch.randn(rows, width, dtype=_t(dtype))
    return lambda: x.mean(-1)


def _pooling(n, dtype, build):
    channels = 64
    side = max(4, int((n // channels) ** 0.5))
    out = (side + 2 - 3) // 2 + 1
    if build is None:
        return channels * side * side + channels * out * out
    import torch
    import torch.nn.functional as F

    x = torch.randn(1, channels, side, side, dtype=_t(dtype))
    return lambda: F.max_pool2d(x, 3, 2, 1)


def _copy(n, dtype, build):
    # the head split of attention: [b, seq, heads, dim] -> [b, heads, seq, dim], made contiguous
    heads, dim = 8, 64
    seq = max(1, n // (heads * dim))
    if build is None:
        return 2 * seq * heads * dim
    import torch

    x = torch.randn(1, seq, heads, dim, dtype=_t(dtype))
    return lambda: x.transpose(1, 2).contiguous()


def _embedding(n, dtype, build):
    width = 512
    rows = max(1, n // width)
    if build is None:
        return 2 * rows * width
    import torch
    import torch.nn.functional as F

    table = _vocabulary(width, dtype)
    idx = torch.randint(0, table.shape[0], (rows,))
    return lambda: F.embedding(idx, table)


@functools.cache
def _vocabulary(width: int, dtype: str):
    """One 32,000-row table per width and dtype, shared by the embedding probes (65 MiB in float32)."""
    import torch

    return torch.randn(32000, width, dtype=_t(dtype))


def _creation(n, dtype, build):
    if build is None:
        return n
    import torch

    return lambda: torch.zeros(n, dtype=_t(dtype))


_SIZED_BUILDERS = {
    ELTWISE: _eltwise,
    ELTWISE_MATH: _eltwise_math,
    LAYER_NORM: _layer_norm,
    BATCH_NORM: _batch_norm,
    SOFTMAX: _softmax,
    REDUCTION: _reduction,
    POOLING: _pooling,
    COPY: _copy,
    EMBEDDING: _embedding,
    CREATION: _creation,
}
#: the memory-bound classes also probed in bfloat16 (the others fall back to their float32 curve, by bytes)
HALF_SIZED = (ELTWISE, ELTWISE_MATH, LAYER_NORM, SOFTMAX)


#: (m, k, n) of the float32 GEMMs in nn.Linear's layout: one row to thousands, square, wide, narrow, and a
#: vocabulary-sized output; the first four are the quick set
GEMM_SHAPES = (
    (1, 1024, 1024),
    (64, 1024, 1024),
    (256, 512, 2048),
    (1024, 1024, 1024),
    (4, 2048, 1024),
    (16, 512, 512),
    (128, 512, 2048),
    (128, 2048, 512),
    (256, 1024, 1024),
    (512, 2048, 512),
    (512, 1024, 4096),
    (2048, 256, 256),
    (1, 4096, 1024),
    (128, 256, 32000),
)
CONV1D_SHAPES = ((1, 1024, 1024), (256, 1024, 1024), (512, 1024, 4096))  # x @ w[k, n] (GPT-2's Conv1D)
#: (batch, m, k, n): attention's two products, scores [s, d] x [d, s] and then [s, s] x [s, d]
BMM_SHAPES = ((16, 128, 64, 128), (16, 128, 128, 64), (64, 49, 32, 49), (64, 49, 49, 32), (48, 256, 64, 256))
#: (c_in, c_out, size, kernel, stride) of dense convolutions: 3x3 and 1x1 at every stage of a CNN, strided, stems
CONV_SHAPES = (
    (64, 64, 56, 3, 1),
    (64, 256, 56, 1, 1),
    (128, 128, 28, 3, 1),
    (256, 256, 14, 3, 1),
    (512, 512, 7, 3, 1),
    (256, 64, 56, 1, 1),
    (1024, 256, 14, 1, 1),
    (3, 32, 224, 3, 2),
    (32, 32, 112, 3, 1),
    (64, 128, 56, 3, 2),
    (3, 64, 224, 7, 2),
    (512, 2048, 7, 1, 1),
    (128, 512, 28, 1, 1),
    (256, 1024, 14, 1, 1),
)
#: (channels, size, kernel, stride) of depthwise convolutions: 3x3, 5x5 and 7x7, early and late
DEPTHWISE_SHAPES = (
    (32, 112, 3, 1),
    (672, 14, 5, 1),
    (96, 112, 3, 2),
    (144, 56, 3, 1),
    (240, 28, 5, 1),
    (1152, 7, 3, 1),
    (96, 56, 7, 1),
    (384, 14, 7, 1),
    (480, 28, 3, 1),
    (144, 56, 5, 2),
)
#: (batch, heads, sequence, head dim, causal) of fused attention
ATTENTION_SHAPES = (
    (1, 8, 128, 64, False),
    (1, 12, 256, 64, False),
    (2, 16, 128, 64, False),
    (1, 12, 256, 64, True),
    (64, 4, 49, 32, False),
    (4, 12, 128, 64, False),
    (1, 16, 512, 64, True),
)


def probe_set(quick: bool = False) -> list[Probe]:
    """The probes: generic shapes of the sizes deep-learning models run, none taken from a particular model.
    ``quick``: the first few of each class, and two sizes of the memory-bound ones."""

    def first(shapes: tuple, n: int) -> tuple:
        return shapes[:n] if quick else shapes

    probes = [gemm_probe(m, k, n) for m, k, n in first(GEMM_SHAPES, 4)]
    probes += [gemm_probe(m, k, n, kn=True) for m, k, n in first(CONV1D_SHAPES, 0)]
    probes += [gemm_probe(m, k, n, batch=b) for b, m, k, n in first(BMM_SHAPES, 1)]
    probes += [conv_probe(ci, co, hw, k, s) for ci, co, hw, k, s in first(CONV_SHAPES, 2)]
    probes += [conv_probe(c, c, hw, k, s, depthwise=True) for c, hw, k, s in first(DEPTHWISE_SHAPES, 2)]
    if not quick:  # a batch of images: each class's fit must reach the FLOPs of a model at batch 4 and beyond
        probes += [conv_probe(ci, co, hw, k, s, batch=4) for ci, co, hw, k, s in CONV_SHAPES[:7]]
        probes += [conv_probe(c, c, hw, k, s, depthwise=True, batch=4) for c, hw, k, s in DEPTHWISE_SHAPES[:4]]
    probes += [attention_probe(*a) for a in first(ATTENTION_SHAPES, 1)]
    probes += [sized_probe(cls, n) for cls in SIZED for n in (QUICK_SIZES if quick else SIZES)]
    if not quick:  # bfloat16: AMX on recent Xeons, widened to float32 where the CPU has no bf16 arithmetic
        probes += [gemm_probe(m, k, n, "bfloat16") for m, k, n in GEMM_SHAPES[:4]]
        probes += [conv_probe(64, 64, 56, 3, dtype="bfloat16"), conv_probe(256, 64, 56, 1, dtype="bfloat16")]
        probes += [conv_probe(144, 144, 56, 3, dtype="bfloat16", depthwise=True)]
        probes += [attention_probe(1, 12, 256, 64, dtype="bfloat16")]
        probes += [sized_probe(cls, n, "bfloat16") for cls in HALF_SIZED for n in (4096, 131072, 2097152)]
    return probes


def time_probes(
    probes: list[Probe],
    *,
    rounds: int = 3,
    window_s: float = 0.004,
    say: Callable[[str], None] = lambda msg: None,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> list[ProbeResult]:
    """Time every probe in ``rounds`` interleaved rounds (see the module docstring). ``clock`` (nanoseconds):
    wall time by default; ``time.process_time_ns`` counts only this process's CPU time, what one thread would take on
    a quiet host (used to check the model on a busy one)."""
    from perfpredict.profiling.rounds import label

    calls = []
    for p in probes:
        fn = p.build()
        fn()  # warm: oneDNN builds its kernels and primitive caches on the first call
        t0 = clock()
        fn()
        one_s = max((clock() - t0) * 1e-9, 1e-7)
        calls.append((fn, max(1, int(window_s / one_s))))
    samples: list[list[float]] = [[] for _ in probes]
    for r in range(rounds):
        for i, (fn, n) in enumerate(calls):
            t0 = clock()
            for _ in range(n):
                fn()
            samples[i].append((clock() - t0) * 1e-9 / n)
        say(f"  round {r + 1}/{rounds}: {len(probes)} probes")
    out = []
    for p, s in zip(probes, samples):
        lab = label(s)
        out.append(ProbeResult(p.cls, p.dtype, p.label, p.flops, p.bytes, lab.value, round(lab.spread, 4), lab.rounds))
    return out


def thread_speedup(threads: int, clock: Callable[[], int] = time.perf_counter_ns) -> dict[str, float]:
    """How much ``threads`` threads speed up one large GEMM and one large elementwise op over one thread: the
    threading behaviour the probes' times already carry, recorded apart (a busy host shows here first)."""
    import torch

    before = torch.get_num_threads()
    out = {}
    try:
        for probe in (gemm_probe(512, 1024, 1024), sized_probe(ELTWISE, SIZES[-2])):
            fn = probe.build()
            times = {}
            for t in sorted({1, threads}):
                torch.set_num_threads(t)
                fn()
                samples = []
                for _ in range(3):
                    t0 = clock()
                    fn()
                    samples.append(clock() - t0)
                times[t] = statistics.median(samples)
            out[probe.cls] = round(times[1] / times[threads], 3)
    finally:
        torch.set_num_threads(before)
    return out


def ceilings(results: list[ProbeResult]) -> dict[str, Any]:
    """What the probes reached, in the roofline suite's ceilings format: the best GEMM FLOP rate per dtype, the
    bandwidth of the largest elementwise probe (past the core's caches), and the smallest op's time."""
    out: dict[str, Any] = {}

    def put(key: str, values: list[float], unit: str, method: str) -> None:
        if values:
            out[key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
            out[key].update(unit=unit, kernel="calibrate-host probes", method=method)

    for dtype, key in (("float32", "fp32_flops_per_s"), ("bfloat16", "bf16_flops_per_s")):
        rates = [r.flops / r.seconds for r in results if r.cls == GEMM and r.dtype == dtype]
        put(key, rates, "FLOP/s", f"{dtype} GEMM probes (nn.Linear, bmm): the best rate reached")
    big = [r for r in results if r.cls == ELTWISE and r.dtype == "float32"]
    if big:
        largest = max(big, key=lambda r: r.bytes)
        put("dram_bandwidth_bytes_per_s", [largest.bytes / largest.seconds], "B/s", f"torch.add, {largest.label}")
        smallest = min(big, key=lambda r: r.bytes)
        put("launch_overhead_s", [smallest.seconds], "s", f"torch.add, {smallest.label}: one op's whole time")
    return out


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
