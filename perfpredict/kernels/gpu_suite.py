"""The CUDA roofline: CuPy RawKernels (+ Numba CUDA rows, + cuBLAS GEMM through torch or cupy), CUDA events.

Protocol per kernel: compile and run once with ``store=1`` to check the result, warm up, then ``reps`` timed
launches, each between its own pair of CUDA events on one stream, sized to run >= ~1 ms (event resolution is
~0.5 us). GEMM: MAMF-style shape search, an L2-sized buffer rewritten between timed iterations. Clocks, power and
temperature from NVML before and after. Not runnable without a GPU; the GPU-free tests cover its pieces (PTX,
simulator, accounting), and the ``gpu``-marked tests run it for real.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from perfpredict.kernels import cupy_kernels as ck
from perfpredict.kernels.ceilings import KernelResult, build_ceilings, gpu_theoretical
from perfpredict.kernels.table import KernelSpec

MIB = 2**20
BLOCK = 256


def nvml_state(index: int = 0) -> dict[str, Any]:
    """SM and memory clocks (MHz), power (W), power limit, temperature and throttle reasons; {} without NVML."""
    try:
        import pynvml
    except ImportError:
        return {"nvml": "not installed (pip install nvidia-ml-py)"}
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        state = {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
            "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3,
            "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
        }
        with contextlib.suppress(pynvml.NVMLError):
            state["throttle_reasons"] = int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
        return state
    except Exception as err:  # noqa: BLE001 - NVML missing on MIG/containers is not fatal
        return {"nvml": f"unavailable: {err}"}


class _Clock:
    """Samples the SM clock while kernels run (the clock under load is what 'observed' means)."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def sample(self) -> None:
        s = nvml_state()
        if "sm_clock_mhz" in s:
            self.samples.append(float(s["sm_clock_mhz"]))


def run(specs: Sequence[KernelSpec], *, quick: bool, reps: int | None, implementation: str,
        say: Callable[[str], None], started: str, command: str = "") -> dict[str, Any]:
    import cupy

    from perfpredict.devices import get_device
    from perfpredict.errors import UnknownDeviceError
    from perfpredict.kernels.suite import environment

    reps = reps or (10 if quick else 30)
    dev = cupy.cuda.Device()
    attrs = dev.attributes
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    cc = f"{props['major']}.{props['minor']}"
    info = {"name": name, "cc": cc, "sms": attrs["MultiProcessorCount"], "l2_bytes": attrs["L2CacheSize"],
            "bus_width_bits": attrs.get("GlobalMemoryBusWidth"), "max_threads_per_sm":
            attrs["MaxThreadsPerMultiProcessor"]}
    try:
        catalog = get_device(name)
        catalog_name = catalog.name
    except UnknownDeviceError:
        catalog, catalog_name = None, name
    before = nvml_state()
    clock = _Clock()
    say(f"cuda: {name} (sm_{cc.replace('.', '')}, {info['sms']} SMs, L2 {info['l2_bytes'] // MIB} MiB), "
        f"catalog {catalog_name!r}, {before.get('sm_clock_mhz', '?')} MHz")
    ctx = {"quick": quick, "reps": reps, "info": info, "clock": clock, "impl": implementation}
    results: list[KernelResult] = []
    warnings_: list[str] = []
    for spec in specs:
        impls = [i for i in spec.implementations if implementation in ("auto", "all", i)]
        if implementation == "auto":
            impls = impls[:1] if spec.name not in ("fp32_fma", "hbm_triad") else [
                i for i in impls if i in ("cupy", "numba")]
        for impl in impls:
            runner = _RUNNERS.get((spec.name, impl)) or _RUNNERS.get((spec.kind, impl))
            if runner is None:
                continue
            try:
                for r in runner(spec, ctx):
                    results.append(r)
                    say(f"  {spec.name} [{impl}]: best {r.best():.4g} {spec.unit}"
                        + ("" if r.check_ok else "  (RESULT CHECK FAILED)"))
            except Exception as err:  # noqa: BLE001 - one kernel failing must not lose the others
                warnings_.append(f"{spec.name} [{impl}] failed: {type(err).__name__}: {err}")
                say(f"  {spec.name} [{impl}]: FAILED ({type(err).__name__}: {err})")
    after = nvml_state()
    sm_clock = max(clock.samples) if clock.samples else after.get("sm_clock_mhz")
    mem_clock = after.get("mem_clock_mhz") or before.get("mem_clock_mhz")
    theo_keys = ["fp32_flops_per_s", "fp64_flops_per_s", "fp16_flops_per_s", "bf16_flops_per_s",
                 "fp16_tensor_flops_per_s", "bf16_tensor_flops_per_s", "tf32_tensor_flops_per_s",
                 "fp8_tensor_flops_per_s", "l1_bandwidth_bytes_per_s", "shared_bandwidth_bytes_per_s",
                 "hbm_bandwidth_bytes_per_s", "hbm_copy_bandwidth_bytes_per_s", "hbm_triad_bandwidth_bytes_per_s",
                 "hbm_write_bandwidth_bytes_per_s", "hbm_read_bandwidth_bytes_per_s"]
    theo = {k: gpu_theoretical(k, cc=cc, sm_count=info["sms"], sm_clock_mhz=sm_clock, mem_clock_mhz=mem_clock,
                               bus_width_bits=info["bus_width_bits"]) for k in theo_keys}
    meta = {"created": started, "command": command, "quick": quick, "device_name_reported": name,
            "device_attributes": info, "clocks": {"before": before, "after": after,
                                                  "sm_clock_samples_mhz": clock.samples,
                                                  "observed_sm_clock_mhz": sm_clock},
            "environment": {**environment(), "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion()}}
    data = build_ceilings(results, target="cuda", device_name=catalog_name, catalog_device=catalog,
                          theoretical=theo, meta=meta)
    data["warnings"] = warnings_ + data["warnings"]
    return data


# ----------------------------------------------------------------------------------------------------------------
# Timing


def _time_events(launch: Callable[[], Any], reps: int, warmup: int = 3) -> list[float]:
    import cupy

    for _ in range(warmup):
        launch()
    cupy.cuda.Device().synchronize()
    out = []
    for _ in range(reps):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        launch()
        end.record()
        end.synchronize()
        out.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
    return out


def _grid(info: dict[str, Any], waves: int = 4) -> int:
    return info["sms"] * (info["max_threads_per_sm"] // BLOCK) * waves


# ----------------------------------------------------------------------------------------------------------------
# CuPy runners


def _fma_cupy(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    info, quick = ctx["info"], ctx["quick"]
    name = {"fp32_fma": "pp_fp32_fma", "fp64_fma": "pp_fp64_fma", "fp16_hfma2": "pp_fp16_hfma2",
            "bf16_hfma2": "pp_bf16_hfma2"}[spec.name]
    k = ck.kernel(name)
    grid = _grid(info)
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
        t = min(_time_events(lambda: k((grid,), (BLOCK,), (out, np.int32(iters), scalar(a), scalar(b),
                                                            np.int32(0))), 3, warmup=1))
        if t >= target or iters > 2**24:
            break
        iters *= 2
    ctx["clock"].sample()
    times = _time_events(lambda: k((grid,), (BLOCK,), (out, np.int32(iters), scalar(a), scalar(b), np.int32(0))),
                         ctx["reps"])
    ctx["clock"].sample()
    elements = threads * iters * ck.CHAINS * ck.UNROLL
    yield KernelResult(spec, "cupy", elements, times, check,
                       params={"grid": grid, "block": BLOCK, "iters": iters, "chains": ck.CHAINS,
                               "unroll": ck.UNROLL},
                       method=f"{ck.CHAINS} chains x {ck.UNROLL} unroll per thread, grid {grid}x{BLOCK}, "
                              f"CUDA events, best of {ctx['reps']}")


def _stream_cupy(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    info = ctx["info"]
    n = max(4 * info["l2_bytes"], (256 if ctx["quick"] else 1024) * MIB) // 4  # float32, >= 4x L2
    n -= n % 4
    n4 = np.int64(n // 4)
    grid = _grid(info, waves=2)
    a = cupy.ones(n, dtype=cupy.float32)
    b = cupy.full(n, 2.0, dtype=cupy.float32)
    c = cupy.full(n, 3.0, dtype=cupy.float32)
    out = cupy.zeros(1, dtype=cupy.float32)
    op = spec.name.removeprefix("hbm_")
    if op == "read":
        k = ck.kernel("pp_read_v4")
        k((grid,), (BLOCK,), (a, n4, out, np.int32(1)))
        check = abs(float(out.get()[0]) - n) <= 1e-3 * n
        launch = lambda: k((grid,), (BLOCK,), (a, n4, out, np.int32(0)))  # noqa: E731
    elif op == "write":
        k = ck.kernel("pp_write_v4")
        launch = lambda: k((grid,), (BLOCK,), (a, n4, np.float32(5.0)))  # noqa: E731
        launch()
        check = bool((a[:: max(1, n // 4096)] == 5.0).all())
    elif op == "copy":
        k = ck.kernel("pp_copy_v4")
        launch = lambda: k((grid,), (BLOCK,), (b, c, n4))  # noqa: E731
        launch()
        check = bool((c[:: max(1, n // 4096)] == 2.0).all())
    else:
        k = ck.kernel("pp_triad_v4")
        launch = lambda: k((grid,), (BLOCK,), (a, b, c, n4, np.float32(3.0)))  # noqa: E731
        launch()
        check = bool((a[:: max(1, n // 4096)] == 2.0 + 3.0 * c[0]).all()) if op == "triad" else True
    ctx["clock"].sample()
    times = _time_events(launch, ctx["reps"])
    ctx["clock"].sample()
    yield KernelResult(spec, "cupy", n, times, check,
                       params={"array_bytes": n * 4, "grid": grid, "block": BLOCK, "vector_bytes": 16},
                       method=f"float4 grid-stride {op}, {n * 4 // MIB} MiB arrays (>= 4x L2), best of {ctx['reps']}")


def _l2_cupy(spec: KernelSpec, ctx: dict[str, Any]):
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
        passes = max(1, int(2 * 2**30 // (n * 4)))
        out.fill(0)  # the check run adds its sum into out: each working set starts from zero
        k((grid,), (BLOCK,), (a, np.int64(n // 4), np.int32(1), out, np.int32(1)))
        check = abs(float(out.get()[0]) - n) <= 1e-3 * n
        times = _time_events(lambda: k((grid,), (BLOCK,), (a, np.int64(n // 4), np.int32(passes), out,
                                                            np.int32(0))), ctx["reps"])
        row = spec if f <= 0.75 else KernelSpec(f"l2_sweep_{f:g}xL2", "cuda", "memory", "float32", 4, 1, None,
                                               ("cupy",), "beyond L2: reported only")
        yield KernelResult(row, "cupy", n * passes, times, check,
                           params={"label": f"working set {f:g} x L2", "working_set_bytes": n * 4,
                                   "passes": passes, "grid": grid},
                           method=f".cg float4 re-reads of a {n * 4 // MIB} MiB working set, {passes} passes")


def _l1_cupy(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    info = ctx["info"]
    blocks = info["sms"]
    if spec.name == "shared_read":
        k = ck.kernel("pp_shared_read_v4")
        out = cupy.zeros(1, dtype=cupy.float32)
        passes = 2000 if ctx["quick"] else 20000
        launch = lambda: k((blocks,), (1024,), (np.int32(passes), out, np.int32(0)))  # noqa: E731
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
        launch = lambda: k((blocks,), (512,), (a, np.int32(n4), np.int32(passes), out, np.int32(0)))  # noqa: E731
        elements = blocks * n4 * 4 * passes
    times = _time_events(launch, ctx["reps"])
    ctx["clock"].sample()
    yield KernelResult(spec, "cupy", elements, times, check, params={"blocks": blocks, "passes": passes},
                       method="one block per SM re-reading 16 KiB (L1) / 32 KiB shared, float4")


def _gemm(spec: KernelSpec, ctx: dict[str, Any]):
    """MAMF-style: search shapes, L2 flushed between iterations, best shape reported (torch, else cupy)."""
    dtype = spec.dtype
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192)] if ctx["quick"] else [
        (m, n, k) for m in (4096, 8192) for n in (4096, 8192, 12288) for k in (4096, 8192, 16384)]
    best = None
    for m, n, k in shapes:
        r = _gemm_one(spec, dtype, m, n, k, ctx)
        if r is not None and (best is None or r.best() > best.best()):
            best = r
    if best is not None:
        yield best


def _gemm_one(spec: KernelSpec, dtype: str, m: int, n: int, k: int, ctx: dict[str, Any]):
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
               "float8_e4m3fn": getattr(torch, "float8_e4m3fn", None)}[dtype]
        torch.backends.cuda.matmul.allow_tf32 = dtype == "float32"
        flush = torch.empty(2 * ctx["info"]["l2_bytes"] // 4, dtype=torch.float32, device="cuda")
        if dtype == "float8_e4m3fn":
            a = torch.randn(m, k, device="cuda").to(tdt)
            b = torch.randn(n, k, device="cuda").to(tdt).t()
            one = torch.tensor(1.0, device="cuda")
            fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
        else:
            a = torch.randn(m, k, device="cuda", dtype=tdt)
            b = torch.randn(k, n, device="cuda", dtype=tdt)
            fn = lambda: torch.matmul(a, b)  # noqa: E731
        c = fn()
        ref = a[:2].float() @ b.float()[:, :2]
        check = bool(torch.allclose(c[:2, :2].float(), ref, rtol=5e-2, atol=2.0 if dtype != "float32" else 5e-2))
        for _ in range(5):
            fn()
        times = []
        for _ in range(ctx["reps"]):
            flush.zero_()  # evict A and B from L2
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e-3)
        ctx["clock"].sample()
        return KernelResult(spec, "torch", m * n * k, times, check, params={"m": m, "n": n, "k": k},
                            method=f"torch {'_scaled_mm' if dtype.startswith('float8') else 'matmul'} "
                                   f"{m}x{n}x{k}, L2 flushed, best of {ctx['reps']}")
    if dtype not in ("float16", "float32"):
        return None
    import cupy

    a = cupy.random.rand(m, k).astype(dtype)
    b = cupy.random.rand(k, n).astype(dtype)
    times = _time_events(lambda: cupy.matmul(a, b), ctx["reps"])
    return KernelResult(spec, "cupy", m * n * k, times, True, params={"m": m, "n": n, "k": k},
                        method=f"cupy.matmul {m}x{n}x{k} (no L2 flush), best of {ctx['reps']}")


def _pcie(spec: KernelSpec, ctx: dict[str, Any]):
    import cupy
    import numpy as np

    size = (256 if ctx["quick"] else 1024) * MIB
    pinned = cupy.cuda.alloc_pinned_memory(size)
    host = np.frombuffer(pinned, dtype=np.uint8, count=size)
    host[:] = 7
    dev = cupy.empty(size, dtype=cupy.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)
    if spec.name == "pcie_h2d":
        launch = lambda: dev.set(host, stream=stream)  # noqa: E731
    else:
        launch = lambda: dev.get(stream=stream, out=host)  # noqa: E731
    with stream:
        times = _time_events(launch, max(5, ctx["reps"] // 2))
    check = bool(int(dev[size - 1]) == 7)
    yield KernelResult(spec, "cupy", size, times, check, params={"bytes": size, "pinned": True},
                       method=f"cudaMemcpyAsync of {size // MIB} MiB pinned, CUDA events")


def _launch(spec: KernelSpec, ctx: dict[str, Any]):
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
            times = _time_events(launch, ctx["reps"])
    else:
        def launch():
            for _ in range(n):
                k((1,), (1,), arg)
        times = _time_events(launch, ctx["reps"])
    yield KernelResult(spec, "cupy", n, times, True, params={"launches": n},
                       method=f"{n} empty kernels {'in one CUDA graph' if spec.name == 'launch_graph' else 'back to back'}"
                              f"; events around all, / {n}")


# ----------------------------------------------------------------------------------------------------------------
# Numba runners (cross-checks of the CuPy rows; 4-byte accesses)


def _fma_numba(spec: KernelSpec, ctx: dict[str, Any]):
    import numpy as np
    from numba import cuda

    from perfpredict.kernels import numba_kernels as nk

    dt = np.float32 if spec.dtype == "float32" else np.float64
    k = nk.fma_kernel(spec.dtype)
    grid = _grid(ctx["info"])
    out = cuda.device_array(grid * BLOCK, dtype=dt)
    k[grid, BLOCK](out, 1, dt(0.9), dt(0.1), 1)
    host = out.copy_to_host()[:64]
    check = bool(np.allclose(host, [nk.fma_expected(1, 0.9, 0.1, t) for t in range(64)], rtol=1e-4))
    iters = 2048 if ctx["quick"] else 16384
    times = _time_numba(lambda: k[grid, BLOCK](out, iters, dt(0.9999), dt(0.0001), 0), ctx["reps"])
    yield KernelResult(spec, "numba", grid * BLOCK * iters * nk.CHAINS * nk.UNROLL, times, check,
                       params={"grid": grid, "block": BLOCK, "iters": iters},
                       method=f"Numba CUDA, {nk.CHAINS} chains x {nk.UNROLL} unroll, CUDA events")


def _stream_numba(spec: KernelSpec, ctx: dict[str, Any]):
    import numpy as np
    from numba import cuda

    from perfpredict.kernels import numba_kernels as nk

    ks = nk.stream_kernels()
    n = max(4 * ctx["info"]["l2_bytes"], (256 if ctx["quick"] else 1024) * MIB) // 4
    grid = _grid(ctx["info"], waves=2)
    a = cuda.to_device(np.ones(n, np.float32))
    b = cuda.to_device(np.full(n, 2.0, np.float32))
    c = cuda.to_device(np.full(n, 3.0, np.float32))
    partial = cuda.device_array(grid * BLOCK, np.float32)
    op = spec.name.removeprefix("hbm_")
    launch = {"read": lambda: ks["read"][grid, BLOCK](a, partial, 0),
              "write": lambda: ks["write"][grid, BLOCK](a, np.float32(5.0)),
              "copy": lambda: ks["copy"][grid, BLOCK](b, c),
              "triad": lambda: ks["triad"][grid, BLOCK](a, b, c, np.float32(3.0))}[op]
    launch()
    cuda.synchronize()
    check = True
    if op == "triad":
        check = bool(a[0] == 2.0 + 3.0 * float(c[0]))
    times = _time_numba(launch, ctx["reps"])
    yield KernelResult(spec, "numba", n, times, check, params={"array_bytes": n * 4, "grid": grid},
                       method=f"Numba CUDA grid-stride {op} (4-byte accesses), {n * 4 // MIB} MiB arrays")


def _time_numba(launch: Callable[[], Any], reps: int) -> list[float]:
    from numba import cuda

    for _ in range(3):
        launch()
    cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = cuda.event(), cuda.event()
        s.record()
        launch()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e-3)
    return out


_RUNNERS: dict[tuple[str, str], Callable[..., Any]] = {
    ("fp32_fma", "cupy"): _fma_cupy, ("fp64_fma", "cupy"): _fma_cupy, ("fp16_hfma2", "cupy"): _fma_cupy,
    ("bf16_hfma2", "cupy"): _fma_cupy,
    ("fp32_fma", "numba"): _fma_numba, ("fp64_fma", "numba"): _fma_numba,
    ("hbm_read", "cupy"): _stream_cupy, ("hbm_write", "cupy"): _stream_cupy, ("hbm_copy", "cupy"): _stream_cupy,
    ("hbm_triad", "cupy"): _stream_cupy,
    ("hbm_read", "numba"): _stream_numba, ("hbm_write", "numba"): _stream_numba,
    ("hbm_copy", "numba"): _stream_numba, ("hbm_triad", "numba"): _stream_numba,
    ("l2_read", "cupy"): _l2_cupy, ("l1_read", "cupy"): _l1_cupy, ("shared_read", "cupy"): _l1_cupy,
    ("tensor", "torch"): _gemm, ("tensor", "cupy"): _gemm,
    ("pcie_h2d", "cupy"): _pcie, ("pcie_d2h", "cupy"): _pcie,
    ("launch_back_to_back", "cupy"): _launch, ("launch_graph", "cupy"): _launch,
}
