"""Numba CUDA roofline kernels: FMA chains (FP32, FP64) and the stream kernels (read, write, copy, triad, shared).

The FMA bodies are generated Python source with every FMA written out (``CHAINS`` independent chains x
``UNROLL``), so the PTX holds ``CHAINS x UNROLL`` ``fma.rn`` instructions whatever Numba's unroller does, and the
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) runs the very same code. Results are stored only under a never-true
data-dependent test, or when ``store`` is 1 (result checks). Numba has no half2 and no 16-byte vector loads: those
kernels live in :mod:`perfpredict.kernels.cupy_kernels`, and the stream kernels here use 4-byte accesses.

Nothing imports numba at module import; the factories do, and cache what they build.
"""

from __future__ import annotations

import functools

CHAINS = 8
UNROLL = 8
SHARED_WORDS = 1024
SENTINEL = 1234.5


def _numpy_compat() -> None:
    """numba <= 0.68's array typing still names ``np.row_stack``, which numpy 2.5 removed: every numba CUDA kernel
    then fails to compile (seen on an H100 host with numba-cuda 0.68 and numpy 2.5.2). ``np.vstack`` is the same
    function; the alias is set only where it is missing."""
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


def fma_source(chains: int = CHAINS, unroll: int = UNROLL) -> str:
    """Python source of ``fma_kernel(out, iters, a, b, store)`` with every FMA spelled out."""
    lines = ["def fma_kernel(out, iters, a, b, store):", "    tid = cuda.grid(1)", "    seed = (tid % 64) * 1e-3"]
    # T casts to the kernel's dtype: Python float constants would otherwise promote an FP32 chain to FP64
    lines += [f"    x{k} = T(a * seed + {k} * 1e-3)" for k in range(chains)]
    lines += ["    for _ in range(iters):"]
    for _ in range(unroll):
        lines += [f"        x{k} = cuda.fma(x{k}, a, b)" for k in range(chains)]
    lines += [
        "    acc = " + " + ".join(f"x{k}" for k in range(chains)),
        f"    if store == 1 or acc == {SENTINEL}:",
        "        if tid < out.shape[0]:",
        "            out[tid] = acc",
    ]
    return "\n".join(lines) + "\n"


def fma_expected(iters: int, a: float, b: float, tid: int, chains: int = CHAINS, unroll: int = UNROLL) -> float:
    """What ``fma_kernel`` stores for thread ``tid`` (closed form of x <- a x + b, in float64)."""
    n = iters * unroll
    an = a**n
    seed = a * (tid % 64) * 1e-3
    geometric = b * (1 - an) / (1 - a) if a != 1 else b * n
    return sum(an * (seed + k * 1e-3) + geometric for k in range(chains))


@functools.cache
def fma_kernel(dtype: str = "float32"):
    """The jitted FMA kernel for ``dtype`` (eagerly compiled with its signature off the simulator)."""
    _numpy_compat()
    from numba import cuda

    return cuda.jit(_fma_pyfunc(dtype))


def _fma_pyfunc(dtype: str):
    import numba
    from numba import cuda

    namespace = {"cuda": cuda, "T": getattr(numba, dtype)}
    exec(compile(fma_source(), f"<numba_fma_kernel_{dtype}>", "exec"), namespace)
    return namespace["fma_kernel"]


def fma_signature(dtype: str = "float32"):
    from numba import float32, float64, int32, void

    t = {"float32": float32, "float64": float64}[dtype]
    return void(t[:], int32, t, t, int32)


def compile_fma_ptx(dtype: str = "float32", cc: tuple[int, int] = (9, 0)) -> str:
    """PTX of the FMA kernel, compiled offline (no GPU needed; needs the CUDA toolkit's NVVM)."""
    from numba import cuda

    ptx, _ = cuda.compile_ptx(_fma_pyfunc(dtype), fma_signature(dtype), cc=cc)
    return ptx


# The stream kernels are exec'd into a namespace whose ``cuda`` is a global: the CUDA simulator swaps a kernel's
# global ``cuda`` for its fake module, which it cannot do for a closure variable.
STREAM_SOURCE = """
def read(a, partial, store):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    s0 = 0.0
    s1 = 0.0
    while i + stride < a.shape[0]:  # two loads in flight per trip
        s0 += a[i]
        s1 += a[i + stride]
        i += 2 * stride
    if i < a.shape[0]:
        s0 += a[i]
    s = s0 + s1
    if store == 1 or s == SENTINEL:
        partial[cuda.grid(1)] = s


def write(a, value):
    for i in range(cuda.grid(1), a.shape[0], cuda.gridsize(1)):
        a[i] = value


def copy(a, c):
    for i in range(cuda.grid(1), a.shape[0], cuda.gridsize(1)):
        c[i] = a[i]


def triad(a, b, c, scalar):
    for i in range(cuda.grid(1), a.shape[0], cuda.gridsize(1)):
        a[i] = b[i] + scalar * c[i]


def shared_read(passes, partial, store):
    buf = cuda.shared.array(SHARED_WORDS, float32)
    t = cuda.threadIdx.x
    for i in range(t, SHARED_WORDS, cuda.blockDim.x):
        buf[i] = 1.0
    cuda.syncthreads()
    s = 0.0
    for _ in range(passes):
        for i in range(t, SHARED_WORDS, cuda.blockDim.x):
            s += buf[i]
    if store == 1 or s == SENTINEL:
        partial[cuda.grid(1)] = s
"""


@functools.cache
def stream_kernels():
    """{"read", "write", "copy", "triad", "shared_read"}: grid-stride Numba CUDA kernels (4-byte accesses)."""
    _numpy_compat()
    from numba import cuda, float32

    namespace = {"cuda": cuda, "float32": float32, "SENTINEL": SENTINEL, "SHARED_WORDS": SHARED_WORDS}
    exec(compile(STREAM_SOURCE, "<numba_stream_kernels>", "exec"), namespace)
    return {name: cuda.jit(namespace[name]) for name in ("read", "write", "copy", "triad", "shared_read")}
