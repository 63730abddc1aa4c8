"""CPU roofline kernels, Numba-jitted: explicit-SIMD FMA chains, STREAM kernels, a cache sweep, a clock probe.

The FMA chains are written as LLVM IR through a Numba ``@intrinsic``: ``CHAINS`` independent accumulators of the
host's widest vector type (``<8 x float>`` for AVX2, ``<16 x float>`` for AVX-512), each updated with
``llvm.fma`` ``UNROLL`` times per loop trip. Plain Python code does not get there: Numba's SLP vectorizer is off by
default and, when on, it shuffles scalars in and out of vectors every trip; 64 scalar chains spill registers.
Ten vector chains cover the FMA latency (4-5 cycles) x 2 FMA pipes of current x86 cores.

The clock probe times a chain of dependent 64-bit multiplies (3 cycles each), so "fraction at observed clock"
uses the clock the core actually ran at (virtual machines do not expose cpufreq; boost clocks differ from
``/proc/cpuinfo``'s nominal value).

Numba is imported inside the functions: ``import perfpredict.kernels.cpu_kernels`` stays light.
"""

from __future__ import annotations

import functools
import platform
from typing import Any

CHAINS = 10
UNROLL = 4


@functools.cache
def vector_bits() -> int:
    """Width of the host's widest FMA vector register as LLVM sees it: 512 (AVX-512), 256 (AVX2/FMA), else 128."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return 512
    if features.get("avx2") and features.get("fma"):
        return 256
    return 128


def host_cpu_name() -> str:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


@functools.cache
def _fma_intrinsic(dtype: str, width: int, chains: int, unroll: int):
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    nbty = {"float32": types.float32, "float64": types.float64}[dtype]
    suffix = f"v{width}f{32 if dtype == 'float32' else 64}"

    @intrinsic
    def fma_chain(typingctx, n, a, b, seed):
        sig = nbty(types.int64, nbty, nbty, nbty)

        def codegen(context, builder, signature, args):
            n, a, b, seed = args
            vty = ir.VectorType(context.get_value_type(nbty), width)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3), f"llvm.fma.{suffix}")
            i32 = ir.IntType(32)

            def splat(x):
                v = ir.Constant(vty, ir.Undefined)
                for i in range(width):
                    v = builder.insert_element(v, x, ir.Constant(i32, i))
                return v

            va, vb, vs = splat(a), splat(b), splat(seed)
            accs = []
            for k in range(chains):  # distinct starting values, so no two chains are the same computation
                offset = ir.Constant(vty, [(k * width + i) * 1e-4 for i in range(width)])
                accs.append(cgutils.alloca_once_value(builder, builder.fadd(vs, offset)))
            with cgutils.for_range(builder, n):
                vals = [builder.load(p) for p in accs]
                for _ in range(unroll):
                    vals = [builder.call(fma, [v, va, vb]) for v in vals]
                for p, v in zip(accs, vals):
                    builder.store(v, p)
            total = builder.load(accs[0])
            for p in accs[1:]:
                total = builder.fadd(total, builder.load(p))
            out = builder.extract_element(total, ir.Constant(i32, 0))
            for i in range(1, width):
                out = builder.fadd(out, builder.extract_element(total, ir.Constant(i32, i)))
            return out

        return sig, codegen

    return fma_chain


def fma_per_trip(dtype: str) -> int:
    """FMA lane-operations per loop trip and thread: vector lanes x chains x unroll."""
    return (vector_bits() // (32 if dtype == "float32" else 64)) * CHAINS * UNROLL


@functools.cache
def fma_kernel(dtype: str):
    """``run(trips, a, b, out)``: one chain set per thread (prange over ``out``), each returns its lane sum."""
    import numpy as np
    from numba import njit, prange

    width = vector_bits() // (32 if dtype == "float32" else 64)
    chain = _fma_intrinsic(dtype, width, CHAINS, UNROLL)
    cast = np.float32 if dtype == "float32" else np.float64

    @njit(parallel=True, cache=False)
    def run(trips, a, b, out):
        for t in prange(out.shape[0]):
            out[t] = chain(trips, a, b, cast(t))

    return run


def fma_expected(dtype: str, trips: int, a: float, b: float, seed: float) -> float:
    """Closed form of what one thread's chains sum to: x_n = a^n x_0 + b (1 - a^n) / (1 - a), summed over lanes."""
    width = vector_bits() // (32 if dtype == "float32" else 64)
    n = trips * UNROLL
    an = a**n
    total = 0.0
    for k in range(CHAINS):
        for i in range(width):
            x0 = seed + (k * width + i) * 1e-4
            total += an * x0 + (b * (1 - an) / (1 - a) if a != 1 else b * n)
    return total


IMUL_LATENCY_CYCLES = 3  # 64-bit integer multiply: 3 cycles on every x86-64 core since Intel Core 2 and AMD Zen


@functools.cache
def clock_probe():
    """``probe(trips, x) -> int``: trips x 8 dependent 64-bit multiplies (3 cycles each on x86-64); None elsewhere.

    Repeated squaring cannot be re-associated (x * K * K could fold to x * K^2), so every multiply runs.
    """
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    from numba import njit

    @njit
    def probe(trips, x):
        for _ in range(trips):
            x = x * x
            x = x * x
            x = x * x
            x = x * x
            x = x * x
            x = x * x
            x = x * x
            x = x * x
        return x

    return probe


def measure_clock_hz(trips: int = 2_000_000, reps: int = 5) -> float | None:
    """The core clock during the run, from a dependent multiply chain (best of ``reps``). None off x86-64."""
    import time

    import numpy as np

    probe = clock_probe()
    if probe is None:
        return None
    probe(10, np.uint64(3))
    best = None
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        probe(trips, np.uint64(3))
        dt = (time.perf_counter_ns() - t0) * 1e-9
        hz = trips * 8 * IMUL_LATENCY_CYCLES / dt
        best = hz if best is None else max(best, hz)
    return best


# --- STREAM kernels (all cores through prange; the reduction in read keeps the loads alive)


@functools.cache
def stream_kernels() -> dict[str, Any]:
    from numba import get_num_threads, njit, prange

    @njit(fastmath=True)
    def sum_slice(a, lo, hi, passes):
        # fastmath lets LLVM reassociate the sum: vector adds with interleaved accumulators
        # (indices from 0 over a slice: LLVM proves them non-negative and drops Numba's wraparound check)
        b = a[lo:hi]
        s = 0.0
        for _ in range(passes):
            for i in range(b.shape[0]):
                s += b[i]
        return s

    @njit(parallel=True)
    def read(a):
        nthreads = get_num_threads()
        chunk = (a.shape[0] + nthreads - 1) // nthreads
        total = 0.0
        for t in prange(nthreads):
            total += sum_slice(a, t * chunk, min(a.shape[0], t * chunk + chunk), 1)
        return total

    @njit(parallel=True)
    def write(a, scalar):
        for i in prange(a.shape[0]):
            a[i] = scalar

    @njit(parallel=True)
    def copy(a, c):
        for i in prange(a.shape[0]):
            c[i] = a[i]

    @njit(parallel=True)
    def triad(a, b, c, scalar):
        for i in prange(a.shape[0]):
            a[i] = b[i] + scalar * c[i]

    @njit(parallel=True)
    def read_passes(a, passes, nthreads):
        # each thread re-reads its own slice ``passes`` times: the working set stays in that core's caches
        chunk = a.shape[0] // nthreads
        total = 0.0
        for t in prange(nthreads):
            total += sum_slice(a, t * chunk, t * chunk + chunk, passes)
        return total

    return {
        "read": read,
        "write": write,
        "copy": copy,
        "triad": triad,
        "read_passes": read_passes,
        "sum_slice": sum_slice,
    }
