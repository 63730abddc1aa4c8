"""Measurement windows in the style of Zeus: ``begin_window(name)`` / ``end_window(name) -> Measurement``.

    >>> mon = Monitor("cpu")
    >>> m = mon.measure(lambda: model(x), batch_size=x.shape[0])     # the full protocol
    >>> mon.begin_window("step"); train_step(); m = mon.end_window("step")   # one hand-timed window

The protocol (DESIGN.md, "Measurement protocol") as :meth:`Monitor.measure` implements it:

1. Warm-up: at least ``warmup_min`` runs, then more until the last run is within ``stable_tol`` (10%) of the
   median of the last ``warmup_min`` runs, capped at ``warmup_max_s`` seconds / ``warmup_max_runs`` runs
   (``warmup_stable`` says whether it settled).
2. Timed runs, each timed on its own (CUDA events on GPU, ``perf_counter_ns`` on CPU), until ``min_runs`` (30) runs
   **or** ``min_seconds`` (1 s) have passed, whichever comes first, but never fewer than ``floor_runs`` (5), and, when
   an energy counter is readable, until the energy window is at least ``energy_min_window_s`` (1 s) long, since
   NVML's counter only moves every 20-100 ms. ``max_seconds`` stops a very slow model (at least one timed run).
3. Median, min, max, mean, std and CV of the timed runs; energy of the timed window divided by its runs.

NVML's energy counter moves in steps (every ~100 ms on an H100, measured by ``studies/nvml_resolution.py``), so
a window that starts and ends anywhere between two steps is off by up to one step: 10% of a 1-s window. On NVML,
:meth:`Monitor.measure` therefore starts the energy window right after the counter moves (extra warm-up runs) and
keeps running timed runs after the timed phase until it moves again (``energy_method="nvml_counter_aligned"``):
the error shrinks to about one run at each end, which mostly cancel.

Peak memory is the peak over the whole window (warm-up included) minus the level at ``begin_window``; see
:mod:`perfpredict.profiling.measurement` for the exact definition of every field. NB: on CPU the RSS high-water
mark is one per process, so opening a window resets it for every window already open; nest CPU windows only when
the inner one's memory figure is the one you need. ``end_build`` resets the same process-wide mark (and on GPU the
device-wide peak statistics), so it too disturbs any other open window.
"""

from __future__ import annotations

import gc
import logging
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.hardware import cpu_detection
from perfpredict.profiling import cpu as cpu_probe
from perfpredict.profiling.measurement import Environment, Measurement, spread

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())


@dataclass
class _Window:
    name: str
    t0_ns: int
    env_before: dict[str, Any]
    rss_begin: int | None = None
    hwm_begin: int | None = None
    hwm_reset: bool = False
    alloc_begin: int | None = None
    build_peak: int | None = None  # the window's peak before end_build (relative), once end_build split it
    build_marks: dict[str, int] = field(default_factory=dict)  # absolute peaks before the split, to keep in totals
    energy_t0: float = 0.0
    energy0: Any = None
    sampler: Any = None
    tick_aligned: bool = False
    notes: list[str] = field(default_factory=list)


def _normalize_device(device: Any) -> str:
    text = str(device)
    if text == "cpu":
        return "cpu"
    if text == "cuda":
        return "cuda:0"
    if text.startswith("cuda:") and text[5:].isdigit():
        return text
    raise InvalidInputError(f"device {device!r} is not 'cpu', 'cuda' or 'cuda:N'")


@dataclass
class TimedRuns:
    """What the body of :func:`timed_window` leaves for the window's Measurement, and that Measurement."""

    samples_ms: list[float] = field(default_factory=list)  # one a timed run
    warmup_runs: int = 0
    warmup_stable: bool = False
    measurement: Measurement | None = None  # set when the body is done


@contextmanager
def timed_window(monitor: Any, name: str, *, batch_size: int, freeze_gc: bool = True) -> Iterator[TimedRuns]:
    """The timed runs of the open window ``name`` (``monitor``: a Monitor, or anything with its ``abort_window`` and
    ``end_window``). When the body is done the window ends as ``.measurement``; if it raises, the window is aborted,
    so no half-timed window lingers. Either way the garbage collector is given back as it was: the body turns it
    off (``freeze_gc``) so that no collection is timed as the model's."""
    runs = TimedRuns()
    gc_was_on = gc.isenabled()
    try:
        yield runs
    except BaseException:
        monitor.abort_window(name)
        raise
    finally:
        if freeze_gc and gc_was_on:
            gc.enable()
    runs.measurement = monitor.end_window(
        name,
        runs=len(runs.samples_ms),
        batch_size=batch_size,
        samples_ms=runs.samples_ms,
        warmup_runs=runs.warmup_runs,
        warmup_stable=runs.warmup_stable,
    )


class Monitor:
    """Measures latency, peak memory and energy of code windows on one device ("cpu", "cuda" or "cuda:N").

    On GPU it opens NVML once (a missing NVML warns and leaves energy to nothing, never to a guess). Several
    windows may be open at once under different names. ``power_sample_interval_s`` paces the power-sampling thread
    (the fallback and cross-check of the energy counter; NVML's power reading itself moves every ~100 ms on an
    H100); ``None`` turns the thread off, leaving windows shorter than ``energy_min_window_s`` with a coarse count.
    """

    counter_poll_s = 0.01  # see _run_until_counter_moves

    def __init__(
        self,
        device: Any = "cpu",
        *,
        power_sample_interval_s: float | None = 0.1,
        energy_min_window_s: float = 1.0,
        rapl_root: Path = cpu_probe.POWERCAP_ROOT,
    ) -> None:
        import torch

        self.device = _normalize_device(device)
        self.is_cuda = self.device.startswith("cuda")
        self.gpu_index = int(self.device.split(":")[1]) if self.is_cuda else None
        self.power_sample_interval_s = power_sample_interval_s
        self.energy_min_window_s = energy_min_window_s
        self._windows: dict[str, _Window] = {}
        self._nvml = None
        self._rapl = None
        if self.is_cuda:
            if not torch.cuda.is_available():
                raise InvalidInputError(f"device {self.device!r} asked for, but torch sees no CUDA GPU; use 'cpu'")
            from perfpredict.profiling.nvml import NvmlDevice

            self._nvml = NvmlDevice.open(self.gpu_index)
        else:
            rapl = cpu_probe.RaplCounter(rapl_root)
            self._rapl = rapl if rapl.available else None
        self._static_env = self._static_environment()

    # -- environment -------------------------------------------------------------------------------------------
    def _static_environment(self) -> dict[str, Any]:
        import torch

        env: dict[str, Any] = {
            "device_kind": "cuda" if self.is_cuda else "cpu",
            "cpu_model": cpu_detection.cpu_model(),
            "cpu_count": cpu_probe.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "gpu_index": self.gpu_index,
            "transformers_version": installed_version("transformers"),
        }
        if self.is_cuda:
            from perfpredict.profiling import nvml

            env["device_name"] = torch.cuda.get_device_name(self.gpu_index)
            env["cuda_version"] = torch.version.cuda
            env["driver_version"] = nvml.driver_version() if self._nvml is not None else None
        else:
            env["device_name"] = cpu_detection.cpu_model()
        return env

    def _dynamic_env(self) -> dict[str, Any]:
        env: dict[str, Any] = {"load_avg_1m": cpu_probe.load_avg_1m()}
        if self._nvml is not None:
            env.update(self._nvml.snapshot())
        if not self.is_cuda:
            env["cpu_freq_mhz"] = cpu_probe.cpu_freq_mhz()
        return env

    def _environment(self, before: dict[str, Any], after: dict[str, Any]) -> Environment:
        env = dict(self._static_env)
        for k, v in before.items():
            env[f"{k}_before"] = v
        for k, v in after.items():
            env[f"{k}_after"] = v
        return Environment(**env)

    # -- windows -----------------------------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.is_cuda:
            import torch

            torch.cuda.synchronize(self.device)

    @property
    def energy_readable(self) -> bool:
        """True when a counter (NVML energy or RAPL) or NVML power sampling can measure energy here."""
        return self._rapl is not None or self._nvml is not None

    def begin_window(self, name: str) -> None:
        """Start a window: memory baseline (and peak reset), energy counter and power sampler, clocks."""
        if name in self._windows:
            raise InvalidInputError(f"measurement window {name!r} is already open; end it first or use another name")
        self._sync()
        w = _Window(name=name, t0_ns=0, env_before=self._dynamic_env())
        if self.is_cuda:
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
            w.alloc_begin = torch.cuda.memory_allocated(self.device)
        else:
            cpu_probe.trim_allocator()
            w.hwm_reset = cpu_probe.reset_peak_rss()
            w.rss_begin = cpu_probe.rss_bytes()
            w.hwm_begin = cpu_probe.peak_rss_bytes()
        self._start_energy(w)
        w.t0_ns = time.perf_counter_ns()
        self._windows[name] = w

    def end_build(self, name: str) -> None:
        """Split an open window's peak memory in two: what came before (building, casting and moving the model,
        making its inputs) and what comes after (the steps). The window's ``peak_memory_bytes`` stays the peak of
        both; ``build_peak_memory_bytes`` and ``step_peak_memory_bytes`` are the two halves. Why: a half-precision
        model built in float32 peaks while it is cast, before any step runs, and a prediction of the step's own peak
        can only be checked against a label that leaves that out. Where the CPU's high-water mark cannot be reset
        the split is skipped (both halves None)."""
        w = self._window(name)
        self._sync()
        if self.is_cuda:
            import torch

            peak = torch.cuda.max_memory_allocated(self.device)
            w.build_marks = {"allocated": peak, "reserved": torch.cuda.max_memory_reserved(self.device)}
            w.build_peak = max(0, peak - (w.alloc_begin or 0))
            torch.cuda.reset_peak_memory_stats(self.device)
        elif w.hwm_reset:
            hwm = cpu_probe.peak_rss_bytes()
            cpu_probe.trim_allocator()  # as begin_window does: pages the build freed are not the step's
            if cpu_probe.reset_peak_rss():
                w.build_marks = {"rss": hwm}
                w.build_peak = max(0, hwm - (w.rss_begin if w.rss_begin is not None else w.hwm_begin or 0))

    def _start_energy(self, w: _Window) -> None:
        if w.sampler is not None:
            w.sampler.stop()
            w.sampler = None
        w.energy_t0 = time.perf_counter()
        if self._nvml is not None:
            from perfpredict.profiling.nvml import PowerSampler

            w.energy0 = self._nvml.energy_mj()
            if self.power_sample_interval_s:
                w.sampler = PowerSampler(self._nvml.power_w, self.power_sample_interval_s).start()
        elif self._rapl is not None:
            w.energy0 = self._rapl.read_uj()

    def restart_energy(self, name: str) -> None:
        """Re-start the energy window of an open window (measure() does this after the warm-up)."""
        self._start_energy(self._window(name))

    def abort_window(self, name: str) -> None:
        """Drop an open window without a measurement (the code inside it failed)."""
        w = self._windows.pop(name, None)
        if w is not None and w.sampler is not None:
            w.sampler.stop()

    def _window(self, name: str) -> _Window:
        if name not in self._windows:
            open_ = ", ".join(map(repr, self._windows)) or "none"
            raise InvalidInputError(f"no open measurement window {name!r}; open windows: {open_}")
        return self._windows[name]

    def end_window(
        self,
        name: str,
        *,
        runs: int = 1,
        batch_size: int = 1,
        samples_ms: list[float] | None = None,
        warmup_runs: int = 0,
        warmup_stable: bool = True,
        timer: str | None = None,
    ) -> Measurement:
        """Close a window. Without ``samples_ms`` the window's wall time divided by ``runs`` is the latency."""
        self._sync()
        t1_ns = time.perf_counter_ns()
        w = self._windows.pop(self._window(name).name)
        window_s = (t1_ns - w.t0_ns) / 1e9
        notes = list(w.notes)
        energy = self._finish_energy(w, notes)
        memory = self._finish_memory(w)
        env = self._environment(w.env_before, self._dynamic_env())
        if runs < 1:
            raise InvalidInputError(f"runs={runs!r} must be at least 1")
        samples = list(samples_ms) if samples_ms else [window_s * 1e3 / runs]
        s = spread(samples)
        energy_total, energy_method, energy_window_s, sampled_w, n_samples = energy
        return Measurement(
            name=name,
            device=self.device,
            batch_size=batch_size,
            runs=runs,
            warmup_runs=warmup_runs,
            warmup_stable=warmup_stable,
            timer=timer or ("cuda_event" if self.is_cuda else "perf_counter_ns"),
            window_s=window_s,
            latency_ms=s.median,
            latency_min_ms=s.minimum,
            latency_max_ms=s.maximum,
            latency_mean_ms=s.mean,
            latency_std_ms=s.std,
            latency_cv=s.cv if samples_ms else None,
            throughput_per_s=batch_size / (s.median / 1e3) if s.median > 0 else float("inf"),
            env=env,
            energy_j=None if energy_total is None else energy_total / runs,
            avg_power_w=(
                sampled_w
                if energy_method == "power_sampling"
                else None
                if energy_total is None or not energy_window_s
                else energy_total / energy_window_s
            ),
            energy_method=energy_method,
            energy_window_s=energy_window_s,
            sampled_avg_power_w=sampled_w,
            power_samples=n_samples,
            samples_ms=tuple(samples) if samples_ms else (),
            warnings=tuple(notes),
            **memory,
        )

    def _finish_memory(self, w: _Window) -> dict[str, Any]:
        if self.is_cuda:
            import torch

            peak_alloc = torch.cuda.max_memory_allocated(self.device)
            step = max(0, peak_alloc - (w.alloc_begin or 0))
            return {
                **self._split(w, step),
                "memory_method": "torch_allocated",
                "torch_max_allocated_bytes": max(peak_alloc, w.build_marks.get("allocated", 0)),
                "torch_max_reserved_bytes": max(
                    torch.cuda.max_memory_reserved(self.device), w.build_marks.get("reserved", 0)
                ),
                "nvml_used_bytes": self._nvml.memory_used_bytes() if self._nvml is not None else None,
            }
        hwm = cpu_probe.peak_rss_bytes()
        base = w.rss_begin if w.rss_begin is not None else w.hwm_begin
        if w.hwm_reset:
            peak, method = max(0, hwm - (base or 0)), "rss_hwm"
        elif w.hwm_begin is not None and hwm > w.hwm_begin:  # the window raised the process-wide mark
            peak, method = max(0, hwm - (base or 0)), "rss_hwm_noreset"
        else:
            peak, method = None, "rss_hwm_noreset"
            w.notes.append("peak RSS unknown: the high-water mark could not be reset and this window did not raise it")
        split = self._split(w, peak) if peak is not None else {"peak_memory_bytes": None}
        return {
            **split,
            "memory_method": method,
            "rss_begin_bytes": w.rss_begin,
            "rss_peak_bytes": max(hwm, w.build_marks.get("rss", 0)),
        }

    @staticmethod
    def _split(w: _Window, since_split: int) -> dict[str, int | None]:
        """The window's peak, and its two halves when end_build split it (the later half is the step's own)."""
        if w.build_peak is None:
            return {"peak_memory_bytes": since_split}
        return {
            "peak_memory_bytes": max(w.build_peak, since_split),
            "build_peak_memory_bytes": w.build_peak,
            "step_peak_memory_bytes": since_split,
        }

    def _finish_energy(self, w: _Window, notes: list[str]) -> tuple:
        """``(joules in the energy window, method, window seconds, sampled average W, samples)``."""
        window = time.perf_counter() - w.energy_t0
        if self._nvml is not None:
            e1 = self._nvml.energy_mj()
            sampled_w, sampled_j, n = w.sampler.stop() if w.sampler is not None else (None, None, 0)
            w.sampler = None
            counter_j = None if w.energy0 is None or e1 is None else (e1 - w.energy0) / 1000.0
            if counter_j is not None and window >= self.energy_min_window_s:
                return counter_j, "nvml_counter_aligned" if w.tick_aligned else "nvml_counter", window, sampled_w, n
            if sampled_j is not None:
                if counter_j is not None:
                    notes.append(
                        f"energy window {window:.2f} s is shorter than {self.energy_min_window_s} s: "
                        "used sampled power instead of the coarse NVML counter"
                    )
                return sampled_j, "power_sampling", window, sampled_w, n
            if counter_j is not None:
                notes.append(
                    f"energy window {window:.2f} s is shorter than {self.energy_min_window_s} s and power "
                    "sampling got no samples: the NVML counter value is coarse"
                )
                return counter_j, "nvml_counter", window, sampled_w, n
            notes.append("NVML gave neither an energy counter nor power readings: energy is missing")
            warnings.warn(
                "NVML gave neither an energy counter nor power readings on this GPU: energy is recorded as missing",
                RuntimeWarning,
                stacklevel=3,
            )
            return None, None, window, None, 0
        if self._rapl is not None:
            joules = self._rapl.joules_between(w.energy0, self._rapl.read_uj())
            if joules is not None:
                return joules, "rapl", window, None, 0
            notes.append("RAPL counters became unreadable during the window: energy is missing")
        return None, None, None, None, 0

    # -- the protocol --------------------------------------------------------------------------------------------
    def _run_until_counter_moves(
        self, fn: Callable[[], Any], samples: list[float] | None = None, max_s: float = 0.5
    ) -> bool:
        """Run ``fn`` until NVML's energy counter changes (appending each run's time to ``samples`` if given).
        False when there is no counter or it did not move within ``max_s``. The counter is read at most every
        ``counter_poll_s`` of running: one read takes milliseconds of host time, in which the GPU would idle."""
        start = self._nvml.energy_mj() if self._nvml is not None else None
        if start is None:
            return False
        t0 = last_poll = time.perf_counter()
        while time.perf_counter() - t0 < max_s:
            ms = self.timed_call(fn)
            if samples is not None:
                samples.append(ms)
            if time.perf_counter() - last_poll >= self.counter_poll_s:
                if self._nvml.energy_mj() != start:
                    return True
                last_poll = time.perf_counter()
        return False

    def timed_call(self, fn: Callable[[], Any]) -> float:
        """Run ``fn`` once, synced; its duration in milliseconds (CUDA events on GPU)."""
        if self.is_cuda:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) / 1e6

    def measure(
        self,
        fn: Callable[[], Any],
        *,
        name: str = "measure",
        batch_size: int = 1,
        warmup_min: int = 5,
        min_runs: int = 30,
        min_seconds: float = 1.0,
        floor_runs: int = 5,
        max_seconds: float = 60.0,
        warmup_max_s: float = 5.0,
        warmup_max_runs: int = 100,
        stable_tol: float = 0.10,
        begin: bool = True,
        freeze_gc: bool = True,
    ) -> Measurement:
        """Measure ``fn()`` with the protocol above. ``begin=False`` uses a window the caller already opened
        under ``name`` (the collector opens it before building the model, so memory covers the weights).
        ``freeze_gc`` collects garbage before the timed runs and keeps the collector off during them, as ``timeit``
        does: a collection in the middle of a sub-millisecond eager run would be timed as the model's."""
        for what, value in (("warmup_min", warmup_min), ("min_runs", min_runs), ("floor_runs", floor_runs)):
            if not isinstance(value, int) or value < 0:
                raise InvalidInputError(f"{what}={value!r} must be a whole number >= 0")
        if not min_seconds >= 0 or not max_seconds > 0:
            raise InvalidInputError(f"min_seconds={min_seconds!r} must be >= 0 and max_seconds={max_seconds!r} > 0")
        if begin:
            self.begin_window(name)
        with timed_window(self, name, batch_size=batch_size, freeze_gc=freeze_gc) as runs:
            warm: list[float] = []
            t_warm = time.perf_counter()
            stable = warmup_min == 0
            while warmup_min > 0:
                warm.append(self.timed_call(fn))
                if len(warm) >= warmup_min:
                    recent = warm[-max(warmup_min, 3) :]
                    med = statistics.median(recent[:-1]) if len(recent) > 1 else recent[-1]
                    stable = med > 0 and abs(recent[-1] - med) <= stable_tol * med
                    if stable or time.perf_counter() - t_warm >= warmup_max_s or len(warm) >= warmup_max_runs:
                        break
            runs.warmup_runs, runs.warmup_stable = len(warm), stable
            if freeze_gc:
                gc.collect()
                gc.disable()
            aligned = self._run_until_counter_moves(fn)  # extra warm-up runs: the window starts on a step
            self.restart_energy(name)
            samples = runs.samples_ms
            t0 = time.perf_counter()
            need_energy_s = self.energy_min_window_s if self.energy_readable else 0.0
            while True:
                samples.append(self.timed_call(fn))
                elapsed = time.perf_counter() - t0
                enough = (len(samples) >= min_runs or elapsed >= min_seconds) and len(samples) >= floor_runs
                if enough and elapsed >= need_energy_s:
                    break
                if elapsed >= max_seconds:
                    break
            if aligned:  # and ends on one: the runs until then are timed runs like the others
                self._window(name).tick_aligned = self._run_until_counter_moves(fn, samples)
        return runs.measurement


def measure(fn: Callable[[], Any], *, device: Any = "cpu", **kwargs: Any) -> Measurement:
    """``Monitor(device).measure(fn, **kwargs)``: one call of the protocol."""
    return Monitor(device).measure(fn, **kwargs)


def tensor_device(args: Any) -> str:
    """The device of the first tensor in ``args`` ("cpu" when there is none)."""
    import torch

    for a in args if isinstance(args, (list, tuple)) else (args,):
        if isinstance(a, torch.Tensor):
            return "cpu" if a.device.type == "cpu" else f"cuda:{a.device.index or 0}"
    return "cpu"


def measure_compiled(
    fn: Callable[..., Any], args: Any, device: Any = None, *, grad: bool = False, **kwargs: Any
) -> Measurement:
    """Measure ``fn(*args)`` (a compiled graph or module) with the protocol, on the device its inputs live on.

    This is the measuring half of ``torch.compile(..., backend="perfpredict", options={"measure": True})``.
    ``grad=False`` runs under ``torch.no_grad()`` (inference). The batch size is the first tensor's leading size.
    """
    import torch

    args = tuple(args) if isinstance(args, (list, tuple)) else (args,)
    device = tensor_device(args) if device is None else device
    batch = next((int(a.shape[0]) for a in args if isinstance(a, torch.Tensor) and a.dim() > 0), 1)
    kwargs.setdefault("batch_size", batch)

    def call() -> Any:
        with torch.set_grad_enabled(grad):
            return fn(*args)

    return Monitor(device).measure(call, **kwargs)


def installed_version(package: str) -> str | None:
    """A package's installed version, read from its metadata (importing transformers costs seconds)."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
