"""The CPU roofline: FMA peaks, STREAM bandwidth, a cache sweep, GEMM and dispatch overhead, all measured here.

Same interface and JSON as the GPU suite. Threads: one per CPU this process may use (Numba's default). Timing
with ``perf_counter_ns``; the best of ``reps`` repetitions is the ceiling, as on the GPU. The core clock is
measured before and after (:func:`perfpredict.kernels.cpu_kernels.measure_clock_hz`) together with the load
average, since a shared host's other tenants take cycles from every kernel.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfpredict.core.units import GIB, KIB, MIB
from perfpredict.hardware.cpu_detection import cpu_model
from perfpredict.kernels import cpu_kernels as ck
from perfpredict.kernels.ceilings import KernelResult, build_ceilings, cpu_theoretical
from perfpredict.kernels.table import KernelSpec

STREAM_MAX_BYTES = 512 * MIB
FMA_UNITS = 2  # 256-bit (or 512-bit) FMA pipes per core on current x86 server cores: an assumption, see notes


def run(
    specs: Sequence[KernelSpec],
    *,
    quick: bool,
    reps: int | None,
    say: Callable[[str], None],
    started: str,
    command: str = "",
) -> dict[str, Any]:
    import numba

    from perfpredict.hardware.devices import detect_local_cpu
    from perfpredict.kernels.environment import environment

    reps = reps or (10 if quick else 20)
    threads = numba.get_num_threads()
    caches = cache_sizes()
    before = _state()
    say(
        f"cpu: {cpu_model()}, {threads} threads, {ck.vector_bits()}-bit FMA vectors, clock ~"
        f"{(before['clock_hz'] or 0) / 1e9:.2f} GHz, load {before['loadavg']}"
    )
    results: list[KernelResult] = []
    for spec in specs:
        say(f"  {spec.name} ...")
        runner = _RUNNERS[spec.name]
        for r in runner(spec, quick=quick, reps=reps, threads=threads, caches=caches):
            results.append(r)
            best = r.best()
            say(
                f"    {r.params.get('label', spec.name)}: best {_fmt(best, spec.unit)}"
                f"{'' if r.check_ok else '  (RESULT CHECK FAILED)'}"
            )
    after = _state()
    clocks = [c for c in (before["clock_hz"], after["clock_hz"]) if c]
    clock = max(clocks) if clocks else None
    theo = {
        k: cpu_theoretical(k, cores=threads, clock_hz=clock, vector_bits=ck.vector_bits(), fma_units=FMA_UNITS)
        for k in ("fp32_flops_per_s", "fp64_flops_per_s")
    }
    meta = {
        "created": started,
        "command": command,
        "quick": quick,
        "device_name_reported": cpu_model(),
        "llvm_cpu": ck.host_cpu_name(),
        "threads": threads,
        "vector_bits": ck.vector_bits(),
        "fma_units_assumed": FMA_UNITS,
        "caches_bytes": caches,
        "clocks": {
            "before": before,
            "after": after,
            "observed_clock_hz": clock,
            "method": "dependent 64-bit multiply chain, 3 cycles per multiply",
        },
        "environment": environment(),
        "notes": [
            "datasheet values for the CPU are the catalog's estimates (perfpredict.hardware.devices.detect_local_cpu)",
            "theoretical_at_observed_clock = threads x lanes x 2 x FMA units x measured clock",
            "a shared host's other tenants lower every number; see clocks.before/after.loadavg",
        ],
    }
    return build_ceilings(
        results, target="cpu", device_name="cpu", catalog_device=detect_local_cpu(), theoretical=theo, meta=meta
    )


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e6:.2f} us"
    return f"{value / 1e9:.1f} G{unit}"


def _state() -> dict[str, Any]:
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"clock_hz": ck.measure_clock_hz(), "loadavg": load}


def cache_sizes() -> dict[str, int]:
    """Per-level data/unified cache sizes of CPU 0 from sysfs: {"L1d": ..., "L2": ..., "L3": ...}."""
    out: dict[str, int] = {}
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (d / "level").read_text().strip()
            kind = (d / "type").read_text().strip()
            size = (d / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        if m:
            out[f"L{level}{'d' if kind == 'Data' else ''}"] = (
                int(m.group(1)) * {"": 1, "K": KIB, "M": MIB, "G": GIB}[m.group(2)]
            )
    return out


# ----------------------------------------------------------------------------------------------------------------
# Runners: each yields KernelResults


def _fma(spec: KernelSpec, *, quick: bool, reps: int, threads: int, **_: Any):
    import numpy as np

    dtype = spec.dtype
    cast = np.float32 if dtype == "float32" else np.float64
    run = ck.fma_kernel(dtype)
    out = np.zeros(threads, dtype=cast)
    a, b = cast(0.9999), cast(0.0001)
    trips = _calibrate(lambda n: run(n, a, b, out), 2000, 0.05 if quick else 0.2)
    times = _time(lambda: run(trips, a, b, out), reps)
    want = [ck.fma_expected(dtype, trips, float(a), float(b), float(t)) for t in range(threads)]
    ok = all(abs(float(o) - w) <= 1e-3 * abs(w) for o, w in zip(out, want))
    elements = threads * trips * ck.fma_per_trip(dtype)
    yield KernelResult(
        spec,
        "numba",
        elements,
        times,
        ok,
        params={
            "threads": threads,
            "trips": trips,
            "chains": ck.CHAINS,
            "unroll": ck.UNROLL,
            "vector_bits": ck.vector_bits(),
        },
        method=f"{ck.CHAINS} x <{ck.vector_bits()}-bit> llvm.fma chains x {ck.UNROLL} unroll per "
        f"thread, {threads} threads, best of {reps}",
    )


def _stream(spec: KernelSpec, *, quick: bool, reps: int, caches: dict[str, int], **_: Any):
    import numpy as np

    k = ck.stream_kernels()
    llc = max(caches.values(), default=32 * MIB)
    # each array >= 4x the last-level cache (float64), up to STREAM_MAX_BYTES: a VM can report its host's whole L3
    # (480 MiB on a 2-vCPU Xeon guest here), which 4x over would take three 2 GiB arrays and minutes
    n = min(max(4 * llc, 64 * MIB), STREAM_MAX_BYTES) // 8
    if not quick:
        n *= 2
    a, b, c = np.ones(n), np.full(n, 2.0), np.full(n, 3.0)
    name = spec.name.removeprefix("cpu_stream_")
    if name == "read":
        fn, check = (lambda: k["read"](a)), (lambda: abs(k["read"](a) - n) < 1e-6 * n)
    elif name == "write":
        fn, check = (lambda: k["write"](a, 5.0)), (lambda: bool(a[0] == 5.0 and a[-1] == 5.0 and a[n // 2] == 5.0))
    elif name == "copy":
        fn, check = (
            (lambda: k["copy"](b, c)),
            (lambda: bool(np.array_equal(c[:: max(1, n // 4096)], b[:: max(1, n // 4096)]))),
        )
    else:
        fn, check = (
            (lambda: k["triad"](a, b, c, 3.0)),
            (lambda: bool(a[0] == 2.0 + 3.0 * c[0] and a[-1] == 2.0 + 3.0 * c[-1])),
        )
    times = _time(fn, reps)
    yield KernelResult(
        spec,
        "numba",
        n,
        times,
        check(),
        params={"array_bytes": n * 8, "arrays": {"read": 1, "write": 1, "copy": 2, "triad": 3}[name]},
        method=f"STREAM {name}, {n * 8 // MIB} MiB arrays, prange over all threads, best of {reps}",
    )


def _cache_sweep(spec: KernelSpec, *, quick: bool, reps: int, threads: int, caches: dict[str, int], **_: Any):
    """Per-thread working sets from 16 KiB up; each level's ceiling is the best rate within that level."""
    import numpy as np

    from perfpredict.kernels.table import KernelSpec as Spec

    read_passes = ck.stream_kernels()["read_passes"]
    l1 = caches.get("L1d", 32 * 1024)
    l2 = caches.get("L2", 512 * 1024)
    l3 = caches.get("L3", 0)
    sizes = (
        [l1 // 2, l2 // 2, max(l3 // (2 * threads), l2 * 2)]
        if quick
        else [l1 // 4, l1 // 2, l1 * 3 // 4, l2 // 4, l2 // 2, l2 * 3 // 4, l3 // (4 * threads), l3 // (2 * threads)]
    )
    levels = {
        "L1": ("l1_bandwidth_bytes_per_s", l1),
        "L2": ("l2_bandwidth_bytes_per_s", l2),
        "L3": ("l3_bandwidth_bytes_per_s", l3 // max(threads, 1) if l3 else 0),
    }
    for per_thread in sizes:
        if per_thread <= 0:
            continue
        n = per_thread * threads // 8
        a = np.ones(n)
        passes = max(1, int((128 if quick else 512) * MIB // max(n * 8, 1)))
        level = next((lv for lv, (_, size) in levels.items() if size and per_thread <= size), None)
        if level is None:
            continue
        ceiling = levels[level][0]
        row = Spec(
            f"cpu_{level.lower()}_read",
            "cpu",
            "memory",
            "float64",
            8,
            1,
            ceiling,
            ("numba",),
            f"{spec.description} (working set in {level})",
        )
        times = _time(lambda: read_passes(a, passes, threads), reps)
        total = read_passes(a, passes, threads)
        want = float(passes * (n // threads) * threads)
        yield KernelResult(
            row,
            "numba",
            n * passes,
            times,
            abs(total - want) <= 1e-9 * want,
            params={
                "label": f"{level} working set {per_thread // 1024} KiB/thread",
                "working_set_bytes_per_thread": per_thread,
                "passes": passes,
                "level": level,
            },
            method=f"each thread re-reads its own {per_thread // 1024} KiB slice {passes} times",
        )


def _gemm(spec: KernelSpec, *, quick: bool, reps: int, threads: int, **_: Any):
    import torch

    torch.set_num_threads(threads)
    best = None
    for size in (1024, 2048) if quick else (1024, 2048, 3072, 4096):
        run, c, ref, method = _gemm_case(spec.dtype, size)
        # bf16 rounds each output to 8 bits of mantissa; fp32 must match the float64 reference closely.
        tol = 2e-2 if spec.dtype == "bfloat16" else 1e-3
        times = _time(run, max(3, reps // 2))
        ok = bool(torch.allclose(c[:4, :4].double(), ref, rtol=tol, atol=tol * float(ref.abs().max())))
        r = KernelResult(
            spec,
            "torch",
            size**3,
            times,
            ok,
            params={"m": size, "n": size, "k": size},
            method=f"{method} {size}^3 ({torch.__version__}), {threads} threads",
        )
        if best is None or r.best() > best.best():
            best = r
    yield best


def _gemm_case(dtype: str, size: int):
    """(run, output, float64 reference of the output's top-left 4x4, method) for one square GEMM."""
    import torch

    a = torch.randn(size, size)
    b = torch.randn(size, size)
    if dtype == "bfloat16":
        # nn.Linear's path (x @ w.T): on AVX2 hosts torch.matmul's bf16 fallback is another 20x slower.
        x, w = a.bfloat16(), b.bfloat16()
        c = torch.empty(size, size, dtype=torch.bfloat16)
        ref = x[:4].double() @ w[:4].double().T
        return (lambda: torch.mm(x, w.t(), out=c)), c, ref, "torch.mm(x, w.t()) bf16 (nn.Linear's layout)"
    c = torch.empty(size, size)
    ref = a[:4].double() @ b.double()[:, :4]
    return (lambda: torch.matmul(a, b, out=c)), c, ref, "torch.matmul FP32"


def _dispatch(spec: KernelSpec, *, reps: int, **_: Any):
    import torch

    x, y, z = torch.ones(1), torch.ones(1), torch.empty(1)
    n = 2000

    def loop():
        for _ in range(n):
            torch.add(x, y, out=z)

    times = _time(loop, reps)
    yield KernelResult(
        spec,
        "torch",
        n,
        times,
        bool(z.item() == 2.0),
        params={"ops_per_rep": n},
        method=f"{n} eager torch.add on 1-element tensors back to back; time / {n}",
    )


_RUNNERS = {
    "cpu_fp32_fma": _fma,
    "cpu_fp64_fma": _fma,
    "cpu_gemm_fp32": _gemm,
    "cpu_gemm_bf16": _gemm,
    "cpu_stream_read": _stream,
    "cpu_stream_write": _stream,
    "cpu_stream_copy": _stream,
    "cpu_stream_triad": _stream,
    "cpu_cache_read": _cache_sweep,
    "cpu_dispatch": _dispatch,
}


def _time(fn: Callable[[], Any], reps: int) -> list[float]:

    return time_host(fn, reps, warmup=2)


def _calibrate(fn: Callable[[int], Any], start: int, target_s: float) -> int:
    """Grow a trip count until one call takes about ``target_s`` seconds."""
    import time

    n = start
    fn(n)  # compile
    while True:
        dt = math.inf
        for _ in range(3):  # the best of three: a busy host's stalls must not stop the growth early
            t0 = time.perf_counter()
            fn(n)
            dt = min(dt, time.perf_counter() - t0)
        if dt >= target_s / 4 or n > 2**40:
            return max(start, int(n * target_s / max(dt, 1e-9)))
        n *= 4


def time_host(fn: Callable[[], Any], reps: int, warmup: int = 2) -> list[float]:
    """Wall-clock seconds of ``fn()`` per repetition, after ``warmup`` untimed calls (``perf_counter_ns``)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) * 1e-9)
    return out
