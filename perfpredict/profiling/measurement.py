"""Measurement: what the profiler measured for one window, with PerfReport's field names.

A :class:`Measurement` is plain data. The latency, throughput, memory and energy fields carry the same names as
:class:`perfpredict.core.report.PerfReport` (``latency_ms``, ``throughput_per_s``, ``peak_memory_bytes``, ``energy_j``,
``avg_power_w``) so that a prediction and a measurement line up field by field. Spread statistics and the
environment travel with every measurement, because a number without its noise and its clocks is not ground truth.

Field definitions (the dataset schema in ``data/README.md`` repeats them):

- ``latency_ms``: the **median** of the timed runs (one call: a forward pass, or forward + backward + optimizer
  step). ``latency_min_ms`` is the minimum, which is about half as noisy on shared hosts; both are kept, and
  ``LATENCY_TARGET`` names the one the learned predictors train on.
- ``latency_cv``: the coefficient of variation of the timed runs (population std / mean).
- ``peak_memory_bytes``: the peak over the window **minus the level at ``begin_window``**. On GPU the level is
  torch's allocated bytes (``torch.cuda.memory_allocated``), on CPU the process RSS. The collector opens its window
  before it builds the model, so there it covers weights, gradients, AdamW state and activations.
- ``torch_max_allocated_bytes`` (GPU): ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` at
  ``begin_window`` (the larger of the two halves when ``end_build`` split the window): bytes held by live tensors
  at the peak, absolute (everything alive, not only this window's).
- ``torch_max_reserved_bytes`` (GPU): ``torch.cuda.max_memory_reserved``: what the caching allocator held from the
  driver at its peak (allocated plus cached free blocks and fragmentation), absolute; across a split, likewise.
- ``nvml_used_bytes`` (GPU): NVML ``nvmlDeviceGetMemoryInfo().used`` at ``end_window``: device memory used by all
  processes, including every CUDA context (about 0.5 GB each). Not a peak: the caching allocator keeps its blocks.
- ``rss_begin_bytes`` / ``rss_peak_bytes`` (CPU): resident set size at ``begin_window`` and the high-water mark
  (``VmHWM``) over the window (across a split, the larger half's). The mark is reset at ``begin_window`` by writing ``5`` to ``/proc/self/clear_refs``
  (Linux); where that is not allowed the mark is process-wide, and a window that does not raise it gets
  ``peak_memory_bytes=None`` (``memory_method="rss_hwm_noreset"``), never a guess.
- ``build_peak_memory_bytes`` / ``step_peak_memory_bytes``: the two halves of ``peak_memory_bytes`` when the
  window was split by ``Monitor.end_build`` (the collector splits it once the model is built, cast and on its
  device and the inputs are made): the peak before the split, and the peak from the first step on, both minus the
  level at ``begin_window``. ``peak_memory_bytes`` is the larger. None where the window was not split, or where the
  CPU's high-water mark cannot be reset (schema 1 rows never carry them). On CPU the split first returns freed
  pages to the OS (``malloc_trim``, as ``begin_window`` does), so pages the build freed do not count as the step's.
- ``energy_j``: joules per call: the energy of the timed window divided by its runs. ``energy_method`` says how:
  ``"nvml_counter"`` (``nvmlDeviceGetTotalEnergyConsumption`` differenced over >= 1 s), ``"nvml_counter_aligned"``
  (the same, with the window starting and ending on the counter's update steps), ``"power_sampling"``
  (power sampled in a thread, integrated), ``"rapl"`` (CPU package counters from ``/sys/class/powercap``) or
  ``None`` (missing: never invented). ``sampled_avg_power_w`` is the sampling thread's average, kept as a
  cross-check beside the counter's ``avg_power_w``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MEASUREMENT_SCHEMA_VERSION = 3  # 2: build_peak_memory_bytes / step_peak_memory_bytes; 3: protocol v3 timings
LATENCY_TARGET = "latency_ms"  # the median; predictors learn it, and accuracy is quoted against its noise


@dataclass(frozen=True)
class Environment:
    """Where and under which conditions a window ran. ``*_before`` / ``*_after`` bracket the window."""

    device_kind: str  # "cpu" or "cuda"
    device_name: str
    cpu_model: str
    cpu_count: int
    torch_threads: int
    torch_version: str
    python_version: str
    driver_version: str | None = None
    cuda_version: str | None = None
    transformers_version: str | None = None  # the zoo's HF models' code: it decides what the GPU runs (T5's mask)
    gpu_index: int | None = None
    sm_clock_mhz_before: float | None = None
    sm_clock_mhz_after: float | None = None
    mem_clock_mhz_before: float | None = None
    mem_clock_mhz_after: float | None = None
    power_limit_w_before: float | None = None
    power_limit_w_after: float | None = None
    temperature_c_before: float | None = None
    temperature_c_after: float | None = None
    cpu_freq_mhz_before: float | None = None
    cpu_freq_mhz_after: float | None = None
    load_avg_1m_before: float | None = None  # os.getloadavg(): other work on a shared host shows up here
    load_avg_1m_after: float | None = None


@dataclass(frozen=True)
class Measurement:
    """One measured window. Units are in the names; ``None`` means not measurable here (never a guess)."""

    name: str
    device: str  # "cpu" or "cuda:N"
    batch_size: int
    runs: int
    warmup_runs: int
    warmup_stable: bool
    timer: str  # "perf_counter_ns" or "cuda_event"
    window_s: float
    latency_ms: float
    latency_min_ms: float
    latency_max_ms: float
    latency_mean_ms: float
    latency_std_ms: float
    latency_cv: float | None
    throughput_per_s: float
    peak_memory_bytes: int | None
    memory_method: str
    env: Environment
    torch_max_allocated_bytes: int | None = None
    torch_max_reserved_bytes: int | None = None
    nvml_used_bytes: int | None = None
    rss_begin_bytes: int | None = None
    rss_peak_bytes: int | None = None
    build_peak_memory_bytes: int | None = None
    step_peak_memory_bytes: int | None = None
    energy_j: float | None = None
    avg_power_w: float | None = None
    energy_method: str | None = None
    energy_window_s: float | None = None
    sampled_avg_power_w: float | None = None
    power_samples: int = 0
    samples_ms: tuple[float, ...] = ()
    warnings: tuple[str, ...] = ()
    schema_version: int = field(default=MEASUREMENT_SCHEMA_VERSION)
    # protocol v3 (profiling/protocol_v3.py); None on windows measured otherwise
    device_ms: float | None = None  # the GPU's own time per step (CPU: the blocked wall time)
    device_method: str | None = None  # "cuda_graph", "profiler" (summed kernel durations) or "wall" (CPU)
    eager_ms: float | None = None  # back-to-back eager steps, no sync between them, per step
    eager_sync_ms: float | None = None  # one step timed alone, synced after each (protocol v2's latency)
    host_dispatch_ms: float | None = None  # host time to enqueue one step on an idle GPU; None on a CPU
    kernel_count: int | None = None
    aten_op_count: int | None = None
    device_busy_ms: float | None = None  # profiler: first kernel start to last kernel end, per step
    kernel_sum_ms: float | None = None  # profiler: summed kernel durations per step
    graph_replays: int | None = None  # CUDA-graph replays per timed event pair
    eager_block_steps: int | None = None  # steps per blocked-timing sample
    capture_error: str | None = None  # why CUDA-graph capture failed, when it did
    op_times_json: str | None = None  # per ATen op per step: {"aten::mm": [calls, host self ms, device self ms]}
    device_samples_ms: tuple[float, ...] = ()
    eager_samples_ms: tuple[float, ...] = ()
    host_samples_ms: tuple[float, ...] = ()

    @property
    def energy_per_sample_j(self) -> float | None:
        return None if self.energy_j is None else self.energy_j / max(self.batch_size, 1)

    def to_row(self, with_samples: bool = False) -> dict[str, Any]:
        """A flat dict (environment fields prefixed ``env_``), the form a dataset row stores."""
        row = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "env" and f.name not in SAMPLE_FIELDS
        }
        row["warnings"] = list(self.warnings)
        for k, v in dataclasses.asdict(self.env).items():
            row[f"env_{k}"] = v
        if with_samples:
            row.update({name: list(getattr(self, name)) for name in SAMPLE_FIELDS})
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Measurement:
        env_names = {f.name for f in dataclasses.fields(Environment)}
        env = Environment(**{k[4:]: v for k, v in row.items() if k.startswith("env_") and k[4:] in env_names})
        names = {f.name for f in dataclasses.fields(cls)} - {"env"}
        kwargs = {k: v for k, v in row.items() if k in names}
        kwargs["warnings"] = tuple(kwargs.get("warnings") or ())
        for name in SAMPLE_FIELDS:
            kwargs[name] = tuple(kwargs.get(name) or ())
        return cls(env=env, **kwargs)


SAMPLE_FIELDS = ("samples_ms", "device_samples_ms", "eager_samples_ms", "host_samples_ms")


@dataclass(frozen=True)
class Spread:
    median: float
    minimum: float
    maximum: float
    mean: float
    std: float
    cv: float | None


def spread(samples: Sequence[float]) -> Spread:
    """Median, min, max, mean, population std and CV of timings (CV is None for fewer than two samples)."""
    if not samples:
        raise ValueError("spread() needs at least one sample")
    mean = statistics.fmean(samples)
    std = statistics.pstdev(samples) if len(samples) > 1 else 0.0
    cv = (std / mean if mean > 0 else None) if len(samples) > 1 else None
    return Spread(
        statistics.median(samples), min(samples), max(samples), mean, std, None if cv is None or math.isnan(cv) else cv
    )
