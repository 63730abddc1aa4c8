"""The CUDA roofline's Numba runners: cross-checks of the CuPy FMA and stream rows (4-byte accesses)."""

from __future__ import annotations

from typing import Any

from perfpredict.core.units import MIB
from perfpredict.kernels.ceilings import KernelResult
from perfpredict.kernels.gpu_timing import BLOCK, grid_size, time_numba
from perfpredict.kernels.table import KernelSpec


def fma_numba(spec: KernelSpec, ctx: dict[str, Any]):
    import numpy as np
    from numba import cuda

    from perfpredict.kernels import numba_kernels as nk

    dt = np.float32 if spec.dtype == "float32" else np.float64
    k = nk.fma_kernel(spec.dtype)
    grid = grid_size(ctx["info"])
    out = cuda.device_array(grid * BLOCK, dtype=dt)
    k[grid, BLOCK](out, 1, dt(0.9), dt(0.1), 1)
    host = out.copy_to_host()[:64]
    check = bool(np.allclose(host, [nk.fma_expected(1, 0.9, 0.1, t) for t in range(64)], rtol=1e-4))
    iters = 2048 if ctx["quick"] else 16384
    times = time_numba(lambda: k[grid, BLOCK](out, iters, dt(0.9999), dt(0.0001), 0), ctx["reps"])
    yield KernelResult(
        spec,
        "numba",
        grid * BLOCK * iters * nk.CHAINS * nk.UNROLL,
        times,
        check,
        params={"grid": grid, "block": BLOCK, "iters": iters},
        method=f"Numba CUDA, {nk.CHAINS} chains x {nk.UNROLL} unroll, CUDA events",
    )


def stream_numba(spec: KernelSpec, ctx: dict[str, Any]):
    import numpy as np
    from numba import cuda

    from perfpredict.kernels import numba_kernels as nk

    ks = nk.stream_kernels()
    n = max(4 * ctx["info"]["l2_bytes"], (256 if ctx["quick"] else 1024) * MIB) // 4
    grid = grid_size(ctx["info"], waves=2)
    a = cuda.to_device(np.ones(n, np.float32))
    b = cuda.to_device(np.full(n, 2.0, np.float32))
    c = cuda.to_device(np.full(n, 3.0, np.float32))
    partial = cuda.device_array(grid * BLOCK, np.float32)
    op = spec.name.removeprefix("hbm_")
    launch = {
        "read": lambda: ks["read"][grid, BLOCK](a, partial, 0),
        "write": lambda: ks["write"][grid, BLOCK](a, np.float32(5.0)),
        "copy": lambda: ks["copy"][grid, BLOCK](b, c),
        "triad": lambda: ks["triad"][grid, BLOCK](a, b, c, np.float32(3.0)),
    }[op]
    launch()
    cuda.synchronize()
    check = True
    if op == "triad":
        check = bool(a[0] == 2.0 + 3.0 * float(c[0]))
    times = time_numba(launch, ctx["reps"])
    yield KernelResult(
        spec,
        "numba",
        n,
        times,
        check,
        params={"array_bytes": n * 4, "grid": grid},
        method=f"Numba CUDA grid-stride {op} (4-byte accesses), {n * 4 // MIB} MiB arrays",
    )
