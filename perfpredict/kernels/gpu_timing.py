"""Timing on a CUDA device for the roofline suite: CUDA events around each launch, and a grid that fills the GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BLOCK = 256


def time_events(launch: Callable[[], Any], reps: int, warmup: int = 3) -> list[float]:
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


def grid_size(info: dict[str, Any], waves: int = 4) -> int:
    return info["sms"] * (info["max_threads_per_sm"] // BLOCK) * waves


def time_numba(launch: Callable[[], Any], reps: int) -> list[float]:
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
