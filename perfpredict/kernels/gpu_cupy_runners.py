"""The CUDA roofline's CuPy runners: FMA peaks, HBM streams, the L2 and L1 sweeps, PCIe and launch cost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfpredict.core.units import GIB, MIB
from perfpredict.kernels import cupy_kernels as ck
from perfpredict.kernels.ceilings import KernelResult
from perfpredict.kernels.gpu_timing import BLOCK, grid_size, time_events
from perfpredict.kernels.table import KernelSpec


def timed_result(
    spec: KernelSpec,
    ctx: dict[str, Any],
    launch: Callable[[], Any],
    elements: int,
    check: bool,
    *,
    params: dict[str, Any],
    method: str,
) -> KernelResult:
    """``launch`` timed with CUDA events (``ctx["reps"]`` samples) as a CuPy result. The clock is sampled right
    after, so the observed clock the ceilings are judged at covers the timed runs (a runner that wants it before
    too samples it itself)."""
    times = time_events(launch, ctx["reps"])
    ctx["clock"].sample()
    return KernelResult(spec, "cupy", elements, times, check, params=params, method=method)


def fma_cupy(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    info, quick = ctx["info"], ctx["quick"]
    name = {
        "fp32_fma": "pp_fp32_fma",
        "fp64_fma": "pp_fp64_fma",
        "fp16_hfma2": "pp_fp16_hfma2",
        "bf16_hfma2": "pp_bf16_hfma2",
    }[spec.name]
    k = ck.kernel(name)
    grid = grid_size(info)
    threads = grid * BLOCK
    half = spec.name.startswith(("fp16", "bf16"))
    if half:  # half2 / bfloat162 arguments are passed as their 32-bit pattern (two copies of one value)
        out = cupy.zeros(threads * 2, dtype=cupy.uint16)
        a = np.uint32(0x3BFF3BFF) if spec.name.startswith("fp16") else np.uint32(0x3F7F3F7F)  # just below 1.0
        b = np.uint32(0x14001400) if spec.name.startswith("fp16") else np.uint32(0x3A803A80)  # small positive
        scalar = np.uint32
    else:
        dt = np.float32 if spec.name.startswith("fp32") else np.float64
        out = cupy.zeros(threads, dtype=dt)
        a, b = dt(0.9999), dt(0.0001)
        scalar = dt
    iters = 64
    k((grid,), (BLOCK,), (out, np.int32(1), scalar(a), scalar(b), np.int32(1)))  # result check at iters=1
    cupy.cuda.Device().synchronize()
    if spec.name.startswith("fp16"):
        host = cupy.asnumpy(out.view(cupy.float16)[:128]).astype(np.float64)
    elif spec.name.startswith("bf16"):
        host = (cupy.asnumpy(out[:128]).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        host = cupy.asnumpy(out[:64]).astype(np.float64)
    # each chain starts near 1e-3 * (tid % 64 + k) and after 16 FMAs with a ~ 1, b > 0 stays positive and finite
    check = bool(np.all(np.isfinite(host)) and np.all(host > 0))
    # grow iters until one launch takes >= 2 ms (quick) / 10 ms
    target = 2e-3 if quick else 10e-3
    while True:
        t = min(
            time_events(
                lambda: k(
                    (grid,),
                    (BLOCK,),
                    (
                        out,
                        np.int32(iters),
                        scalar(a),
                        scalar(b),
                        np.int32(0),
                    ),
                ),
                3,
                warmup=1,
            )
        )
        if t >= target or iters > 2**24:
            break
        iters *= 2
    ctx["clock"].sample()
    yield timed_result(
        spec,
        ctx,
        lambda: k((grid,), (BLOCK,), (out, np.int32(iters), scalar(a), scalar(b), np.int32(0))),
        threads * iters * ck.CHAINS * ck.UNROLL,
        check,
        params={"grid": grid, "block": BLOCK, "iters": iters, "chains": ck.CHAINS, "unroll": ck.UNROLL},
        method=f"{ck.CHAINS} chains x {ck.UNROLL} unroll per thread, grid {grid}x{BLOCK}, "
        f"CUDA events, best of {ctx['reps']}",
    )


def stream_cupy(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    info = ctx["info"]
    n = max(4 * info["l2_bytes"], (256 if ctx["quick"] else 1024) * MIB) // 4  # float32, >= 4x L2
    n -= n % 4
    n4 = np.int64(n // 4)
    grid = grid_size(info, waves=2)
    a = cupy.ones(n, dtype=cupy.float32)
    b = cupy.full(n, 2.0, dtype=cupy.float32)
    c = cupy.full(n, 3.0, dtype=cupy.float32)
    out = cupy.zeros(1, dtype=cupy.float32)
    op = spec.name.removeprefix("hbm_")
    if op == "read":
        k = ck.kernel("pp_read_v4")
        k((grid,), (BLOCK,), (a, n4, out, np.int32(1)))
        check = abs(float(out.get()[0]) - n) <= 1e-3 * n
        launch = lambda: k((grid,), (BLOCK,), (a, n4, out, np.int32(0)))
    elif op == "write":
        k = ck.kernel("pp_write_v4")
        launch = lambda: k((grid,), (BLOCK,), (a, n4, np.float32(5.0)))
        launch()
        check = bool((a[:: max(1, n // 4096)] == 5.0).all())
    elif op == "copy":
        k = ck.kernel("pp_copy_v4")
        launch = lambda: k((grid,), (BLOCK,), (b, c, n4))
        launch()
        check = bool((c[:: max(1, n // 4096)] == 2.0).all())
    else:
        k = ck.kernel("pp_triad_v4")
        launch = lambda: k((grid,), (BLOCK,), (a, b, c, n4, np.float32(3.0)))
        launch()
        check = bool((a[:: max(1, n // 4096)] == 2.0 + 3.0 * c[0]).all()) if op == "triad" else True
    ctx["clock"].sample()
    yield timed_result(
        spec,
        ctx,
        launch,
        n,
        check,
        params={"array_bytes": n * 4, "grid": grid, "block": BLOCK, "vector_bytes": 16},
        method=f"float4 grid-stride {op}, {n * 4 // MIB} MiB arrays (>= 4x L2), best of {ctx['reps']}",
    )


def l2_cupy(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    info = ctx["info"]
    k = ck.kernel("pp_l2_read_v4")
    l2 = info["l2_bytes"]
    fractions = (0.25, 0.5) if ctx["quick"] else (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 0.9, 1.5, 4.0)
    grid = info["sms"] * 64
    out = cupy.zeros(1, dtype=cupy.float32)
    for f in fractions:
        n = int(l2 * f) // 16 * 4
        a = cupy.ones(n, dtype=cupy.float32)
        passes = max(1, int(2 * GIB // (n * 4)))
        out.fill(0)  # the check run adds its sum into out: each working set starts from zero
        k((grid,), (BLOCK,), (a, np.int64(n // 4), np.int32(1), out, np.int32(1)))
        check = abs(float(out.get()[0]) - n) <= 1e-3 * n
        times = time_events(
            lambda: k(
                (grid,),
                (BLOCK,),
                (
                    a,
                    np.int64(n // 4),
                    np.int32(passes),
                    out,
                    np.int32(0),
                ),
            ),
            ctx["reps"],
        )
        row = (
            spec
            if f <= 0.75
            else KernelSpec(
                f"l2_sweep_{f:g}xL2", "cuda", "memory", "float32", 4, 1, None, ("cupy",), "beyond L2: reported only"
            )
        )
        yield KernelResult(
            row,
            "cupy",
            n * passes,
            times,
            check,
            params={"label": f"working set {f:g} x L2", "working_set_bytes": n * 4, "passes": passes, "grid": grid},
            method=f".cg float4 re-reads of a {n * 4 // MIB} MiB working set, {passes} passes",
        )


def l1_cupy(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    info = ctx["info"]
    blocks = info["sms"]
    if spec.name == "shared_read":
        k = ck.kernel("pp_shared_read_v4")
        out = cupy.zeros(1, dtype=cupy.float32)
        passes = 2000 if ctx["quick"] else 20000
        launch = lambda: k((blocks,), (1024,), (np.int32(passes), out, np.int32(0)))
        k((blocks,), (1024,), (np.int32(1), out, np.int32(1)))
        check = abs(float(out.get()[0]) - blocks * 2048 * 4) < 1
        elements = blocks * 2048 * 4 * passes
    else:
        k = ck.kernel("pp_l1_read_v4")
        n4 = 1024  # 16 KiB per block
        a = cupy.ones(blocks * n4 * 4, dtype=cupy.float32)
        out = cupy.zeros(1, dtype=cupy.float32)
        passes = 2000 if ctx["quick"] else 20000
        k((blocks,), (512,), (a, np.int32(n4), np.int32(1), out, np.int32(1)))
        check = abs(float(out.get()[0]) - blocks * n4 * 4) < 1
        launch = lambda: k((blocks,), (512,), (a, np.int32(n4), np.int32(passes), out, np.int32(0)))
        elements = blocks * n4 * 4 * passes
    yield timed_result(
        spec,
        ctx,
        launch,
        elements,
        check,
        params={"blocks": blocks, "passes": passes},
        method="one block per SM re-reading 16 KiB (L1) / 32 KiB shared, float4",
    )


def pcie(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    size = (256 if ctx["quick"] else 1024) * MIB
    pinned = cupy.cuda.alloc_pinned_memory(size)
    host = np.frombuffer(pinned, dtype=np.uint8, count=size)
    host[:] = 7
    dev = cupy.empty(size, dtype=cupy.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)
    if spec.name == "pcie_h2d":
        launch = lambda: dev.set(host, stream=stream)
    else:
        launch = lambda: dev.get(stream=stream, out=host)
    with stream:
        times = time_events(launch, max(5, ctx["reps"] // 2))
    check = bool(int(dev[size - 1]) == 7)
    yield KernelResult(
        spec,
        "cupy",
        size,
        times,
        check,
        params={"bytes": size, "pinned": True},
        method=f"cudaMemcpyAsync of {size // MIB} MiB pinned, CUDA events",
    )


def launch(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    k = ck.kernel("pp_empty")
    n = 2000 if ctx["quick"] else 10000
    arg = (np.int32(0),)
    if spec.name == "launch_graph":
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            for _ in range(n):
                k((1,), (1,), arg)
            graph = stream.end_capture()
        graph.upload(stream) if hasattr(graph, "upload") else None

        def launch():
            graph.launch(stream)

        with stream:
            times = time_events(launch, ctx["reps"])
    else:

        def launch():
            for _ in range(n):
                k((1,), (1,), arg)

        times = time_events(launch, ctx["reps"])
    yield KernelResult(
        spec,
        "cupy",
        n,
        times,
        True,
        params={"launches": n},
        method=f"{n} empty kernels {'in one CUDA graph' if spec.name == 'launch_graph' else 'back to back'}"
        f"; events around all, / {n}",
    )
