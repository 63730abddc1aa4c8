"""Protocol v3: one round of one step, as a :class:`~perfpredict.profiling.measurement.Measurement`.

A round (the collector runs several per row, interleaved with other rows: :mod:`perfpredict.profiling.rounds`):

1. Warm-up, until the step time settles (as protocol v2).
2. ``eager_sync_ms``: steps timed one at a time, synced after each (protocol v2's latency, kept for continuity).
3. ``eager_ms``: blocked timing, steps back to back with no sync between (:func:`timing.blocked_ms`).
4. ``host_dispatch_ms`` (GPU): the host time for one step to return on an idle GPU.
5. The memory window closes here, so the graph capture below never counts in the step's peak memory.
6. ``device_ms``: on a GPU, CUDA-graph replay (``device_method="cuda_graph"``); where capture fails, the median
   per-step kernel sum from ``torch.profiler`` (``"profiler"``, the GPU-busy span beside it). On a CPU, the blocked
   wall time (``"wall"``): there is no separate device.
7. ``kernel_count`` and ``aten_op_count`` from the profiler (every round on a GPU fallback, else when asked).

Latency timing runs with the power-sampling thread off (it takes host time from the dispatching thread). Energy has
its own window afterwards (:func:`energy_window`), on the graph replay where capture worked.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfpredict.profiling import step_profile, timing
from perfpredict.profiling.measurement import Measurement
from perfpredict.profiling.monitor import timed_window

PROTOCOL_VERSION = 3


@dataclass(frozen=True)
class RoundSettings:
    """The knobs of one round. Defaults suit a GPU; the CPU collector shortens the windows (see collect_v3)."""

    warmup_min: int = 5
    warmup_max_s: float = 5.0
    stable_tol: float = 0.10
    sync_seconds: float = 0.3  # eager_sync window
    sync_floor_runs: int = 5
    blocked_window_s: float = 0.05  # per blocked sample
    blocked_samples: int = 3
    graph_window_ms: float = 50.0  # per graph-replay sample (the floor)
    graph_samples: int = 3
    host_reps: int = 5
    profile_steps: int = 3
    energy_min_s: float = 1.0


def warm_up(fn: Callable[[], Any], timed: Callable[[Callable[[], Any]], float], s: RoundSettings) -> tuple[int, bool]:
    """Run ``fn`` until the last run is within ``stable_tol`` of the median of the ones before (or time is up)."""
    warm: list[float] = []
    t0 = time.perf_counter()
    while True:
        warm.append(timed(fn))
        if len(warm) >= max(s.warmup_min, 1):
            recent = warm[-max(s.warmup_min, 3) :]
            med = statistics.median(recent[:-1]) if len(recent) > 1 else recent[-1]
            if med > 0 and abs(recent[-1] - med) <= s.stable_tol * med:
                return len(warm), True
            if time.perf_counter() - t0 >= s.warmup_max_s:
                return len(warm), False


def measure_round(
    monitor: Any,
    fn: Callable[[], Any],
    *,
    name: str,
    batch_size: int,
    settings: RoundSettings = RoundSettings(),
    profile: bool = True,
) -> tuple[Measurement, Any]:
    """One round of ``fn`` inside the monitor's open window ``name`` (opened before the model was built, so its
    memory covers the weights). Returns the Measurement and the captured graph (or None) for the energy window."""
    s = settings
    sync = timing.synchronizer(monitor.device)
    with timed_window(monitor, name, batch_size=batch_size) as runs:
        runs.warmup_runs, runs.warmup_stable = warm_up(fn, monitor.timed_call, s)
        gc.collect()
        gc.disable()
        sync_samples = runs.samples_ms
        t0 = time.perf_counter()
        while len(sync_samples) < s.sync_floor_runs or time.perf_counter() - t0 < s.sync_seconds:
            sync_samples.append(monitor.timed_call(fn))
        eager, block_steps = timing.blocked_ms(fn, sync, min_window_s=s.blocked_window_s, blocks=s.blocked_samples)
        host = timing.host_enqueue_ms(fn, sync, reps=s.host_reps) if monitor.is_cuda else []
    m = runs.measurement
    fields: dict[str, Any] = {
        "eager_ms": statistics.median(eager),
        "eager_samples_ms": tuple(eager),
        "eager_sync_ms": m.latency_ms,
        "eager_block_steps": block_steps,
        "host_samples_ms": tuple(host),
        "host_dispatch_ms": timing.median(host),
    }
    replay = None
    if monitor.is_cuda:
        try:
            dev, replays, replay = timing.graph_replay_ms(
                fn, monitor.device, min_window_ms=s.graph_window_ms, samples=s.graph_samples
            )
            fields.update(device_method="cuda_graph", graph_replays=replays)
        except timing.CaptureFailed as err:
            fields["capture_error"] = str(err)
            prof = step_profile.profile_step(fn, monitor.device, steps=max(s.profile_steps, 3))
            dev = [prof.kernel_sum_ms]
            fields.update(device_method="profiler", **_profile_fields(prof))
            profile = False
    else:
        dev = eager
        fields["device_method"] = "wall"
    fields.update(device_ms=statistics.median(dev), device_samples_ms=tuple(dev))
    if profile:
        fields.update(_profile_fields(step_profile.profile_step(fn, monitor.device, steps=s.profile_steps)))
    return dataclasses.replace(m, **fields), replay


def _profile_fields(prof: step_profile.StepProfile) -> dict[str, Any]:
    per_op = {k: [round(v, 6) for v in vals] for k, vals in sorted(prof.per_op.items())}
    return {
        "kernel_count": prof.kernel_count,
        "aten_op_count": prof.aten_op_count,
        "device_busy_ms": prof.busy_ms,
        "kernel_sum_ms": prof.kernel_sum_ms,
        "op_times_json": json.dumps(per_op, separators=(",", ":")) if per_op else None,
    }


def energy_window(monitor: Any, fn: Callable[[], Any], *, batch_size: int, min_s: float = 1.0) -> dict[str, Any]:
    """Energy per step over a window of at least ``min_s`` running ``fn`` back to back (graph replay where capture
    worked). ``{}`` where no counter or power reading exists here (never invented)."""
    if not monitor.energy_readable:
        return {}
    monitor.begin_window("energy")
    runs = 0
    t0 = time.perf_counter()
    try:
        while runs < 3 or time.perf_counter() - t0 < min_s:
            fn()
            runs += 1
    except BaseException:
        monitor.abort_window("energy")
        raise
    m = monitor.end_window("energy", runs=runs, batch_size=batch_size)
    return {
        "energy_j": m.energy_j,
        "avg_power_w": m.avg_power_w,
        "energy_method": m.energy_method,
        "energy_window_s": m.energy_window_s,
        "sampled_avg_power_w": m.sampled_avg_power_w,
        "power_samples": m.power_samples,
        "energy_runs": runs,
    }
