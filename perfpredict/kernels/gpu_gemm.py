"""The CUDA roofline's tensor-core rows: cuBLAS GEMM through torch or CuPy, MAMF-style shape search."""

from __future__ import annotations

from typing import Any

from perfpredict.kernels.ceilings import KernelResult
from perfpredict.kernels.gpu_timing import time_events
from perfpredict.kernels.table import KernelSpec


def gemm(spec: KernelSpec, ctx: dict[str, Any]):
    """MAMF-style: search shapes, L2 flushed between iterations, best shape reported (torch, else cupy)."""
    dtype = spec.dtype
    shapes = (
        [(4096, 4096, 4096), (8192, 8192, 8192)]
        if ctx["quick"]
        else [(m, n, k) for m in (4096, 8192) for n in (4096, 8192, 12288) for k in (4096, 8192, 16384)]
    )
    best = None
    for m, n, k in shapes:
        r = gemm_one(spec, dtype, m, n, k, ctx)
        if r is not None and (best is None or r.best() > best.best()):
            best = r
    if best is not None:
        yield best


def gemm_one(spec: KernelSpec, dtype: str, m: int, n: int, k: int, ctx: dict[str, Any]):
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        tdt = {
            "float16": torch.float16,
            "bfloat16": torch.bfloat16,
            "float32": torch.float32,
            "float8_e4m3fn": getattr(torch, "float8_e4m3fn", None),
        }[dtype]
        torch.backends.cuda.matmul.allow_tf32 = dtype == "float32"
        flush = torch.empty(2 * ctx["info"]["l2_bytes"] // 4, dtype=torch.float32, device="cuda")
        if dtype == "float8_e4m3fn":
            a = torch.randn(m, k, device="cuda").to(tdt)
            b = torch.randn(n, k, device="cuda").to(tdt).t()
            one = torch.tensor(1.0, device="cuda")
            fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            a = torch.randn(m, k, device="cuda", dtype=tdt)
            b = torch.randn(k, n, device="cuda", dtype=tdt)
            fn = lambda: torch.matmul(a, b)
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
        return KernelResult(
            spec,
            "torch",
            m * n * k,
            times,
            check,
            params={"m": m, "n": n, "k": k},
            method=f"torch {'_scaled_mm' if dtype.startswith('float8') else 'matmul'} "
            f"{m}x{n}x{k}, L2 flushed, best of {ctx['reps']}",
        )
    if dtype not in ("float16", "float32"):
        return None
    import cupy

    a = cupy.random.rand(m, k).astype(dtype)
    b = cupy.random.rand(k, n).astype(dtype)
    times = time_events(lambda: cupy.matmul(a, b), ctx["reps"])
    return KernelResult(
        spec,
        "cupy",
        m * n * k,
        times,
        True,
        params={"m": m, "n": n, "k": k},
        method=f"cupy.matmul {m}x{n}x{k} (no L2 flush), best of {ctx['reps']}",
    )
