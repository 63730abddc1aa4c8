"""What one step launches, from ``torch.profiler``: kernels and their GPU time, ATen ops and their host time.

Used by protocol v3 for every row (``kernel_count``, ``aten_op_count``, per-op times) and as the fallback of
``device_ms`` where CUDA-graph capture fails: the median over steps of the summed kernel durations (CUPTI), with the
GPU-busy span (first kernel start to last kernel end) beside it, since gaps between kernels are not device time.

Each profiled step is wrapped in a ``record_function`` marker and followed by a sync, so a kernel belongs to the
step whose marker opened before it started and whose successor opened after it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_MARK = "perfpredict_step_"


@dataclass(frozen=True)
class StepProfile:
    """Per-step figures (medians over the profiled steps). GPU fields are None on a CPU."""

    steps: int
    aten_op_count: int  # top-level ATen calls (those not inside another ATen call): what the host dispatches
    kernel_count: int | None  # device kernels (CUDA); None on a CPU
    kernel_sum_ms: float | None  # summed kernel durations per step
    busy_ms: float | None  # first kernel start to last kernel end, per step
    per_op: dict[str, list[float]] = field(default_factory=dict)  # aten name -> [calls, host self ms, device ms]


def _top_level_aten(events: list[Any]) -> list[Any]:
    out = []
    for e in events:
        if not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if parent is None:
            out.append(e)
    return out


def _is_kernel(e: Any) -> bool:
    from torch.autograd import DeviceType

    return getattr(e, "device_type", None) == DeviceType.CUDA


def _self_device_us(avg: Any) -> float:
    for name in ("self_device_time_total", "self_cuda_time_total"):  # renamed in torch 2.4
        value = getattr(avg, name, None)
        if value is not None:
            return float(value)
    return 0.0


def profile_step(fn: Callable[[], Any], device: str, *, steps: int = 3) -> StepProfile:
    """Profile ``steps`` calls of ``fn`` (each followed by a sync) and reduce them to per-step figures."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = device != "cpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            with record_function(f"{_MARK}{i}"):
                fn()
            if cuda:
                torch.cuda.synchronize(device)
    return reduce_events(list(prof.events()), prof.key_averages(), steps, cuda)


def reduce_events(events: list[Any], averages: Any, steps: int, cuda: bool) -> StepProfile:
    """The reduction of :func:`profile_step`, apart so that recorded or mocked events test it."""
    marks = sorted((e for e in events if e.name.startswith(_MARK)), key=lambda e: e.time_range.start)
    bounds = [m.time_range.start for m in marks] + [float("inf")]
    aten = _top_level_aten([e for e in events if not _is_kernel(e)])
    per_step_ops = [sum(1 for e in aten if bounds[i] <= e.time_range.start < bounds[i + 1]) for i in range(len(marks))]
    kernel_count = kernel_sum = busy = None
    if cuda:
        kernels = [e for e in events if _is_kernel(e)]
        counts, sums, spans = [], [], []
        for i in range(len(marks)):
            mine = [k for k in kernels if bounds[i] <= k.time_range.start < bounds[i + 1]]
            counts.append(len(mine))
            sums.append(sum(k.time_range.elapsed_us() for k in mine) / 1e3)
            spans.append(
                (max(k.time_range.end for k in mine) - min(k.time_range.start for k in mine)) / 1e3 if mine else 0.0
            )
        kernel_count = int(statistics.median(counts)) if counts else 0
        kernel_sum, busy = (statistics.median(sums), statistics.median(spans)) if sums else (0.0, 0.0)
    per_op = {}
    n = max(steps, 1)
    for avg in averages:
        if avg.key.startswith("aten::"):
            per_op[avg.key] = [
                avg.count / n,
                float(avg.self_cpu_time_total) / 1e3 / n,
                _self_device_us(avg) / 1e3 / n if cuda else 0.0,
            ]
    return StepProfile(
        steps=len(marks),
        aten_op_count=int(statistics.median(per_step_ops)) if per_step_ops else 0,
        kernel_count=kernel_count,
        kernel_sum_ms=kernel_sum,
        busy_ms=busy,
        per_op=per_op,
    )
