"""MIG advisor: which NVIDIA MIG slice is big enough for a model, and fast enough for the targets.

A slice is modelled by :meth:`perfpredict.hardware.devices.Device.with_mig` (SMs, bandwidth and L2 scaled down, same
clocks). Memory is compared directly: the peak predicted on the full GPU already includes the per-instance runtime
overhead (CUDA context), and nothing else about the model shrinks on a smaller slice.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.report import MigAdvice, MigOption
from perfpredict.core.units import GIB
from perfpredict.hardware.devices import Device, MigProfile, get_device

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())


def advise_mig(
    device: Device | str,
    peak_memory_bytes: int,
    latency_ms_for: Callable[[Device], float],
    batch_size: int,
    max_latency_ms: float | None = None,
    min_throughput_per_s: float | None = None,
) -> MigAdvice | None:
    """Every MIG profile of ``device`` with fit, latency and throughput; None when the device has no MIG.

    ``latency_ms_for(slice_device)`` predicts one call's latency on a slice; it is only called for profiles the
    model fits in. The recommendation is the smallest profile (memory slices, then compute slices) that fits and
    meets the targets; ``+me`` profiles are listed but never recommended (the plain profile is the same slice
    without the media engines, and more of them fit on one GPU).
    """
    device = get_device(device)
    if not device.mig_profiles:
        return None
    _check_inputs(peak_memory_bytes, batch_size, max_latency_ms, min_throughput_per_s)
    profiles = sorted(device.mig_profiles, key=lambda p: (p.memory_bytes, p.sm_count, p.is_media_extension))
    options = tuple(
        _option(device, p, peak_memory_bytes, latency_ms_for, batch_size, max_latency_ms, min_throughput_per_s)
        for p in profiles
    )
    by_name = {p.name: p for p in profiles}
    candidates = [o for o in options if o.meets_targets and not by_name[o.profile].is_media_extension]
    best = min(
        candidates, key=lambda o: (by_name[o.profile].memory_slices, by_name[o.profile].compute_slices), default=None
    )
    reason = (
        _recommend_reason(
            best,
            by_name[best.profile],
            peak_memory_bytes,
            max_latency_ms is not None or min_throughput_per_s is not None,
        )
        if best
        else _no_fit_reason(device, options, profiles, peak_memory_bytes, max_latency_ms, min_throughput_per_s)
    )
    return MigAdvice(
        device=device.name,
        options=options,
        recommended=best.profile if best else None,
        reason=reason,
        max_latency_ms=max_latency_ms,
        min_throughput_per_s=min_throughput_per_s,
    )


def _check_inputs(
    peak_memory_bytes: int, batch_size: int, max_latency_ms: float | None, min_throughput_per_s: float | None
) -> None:
    if not _finite(peak_memory_bytes) or peak_memory_bytes < 0:
        raise InvalidInputError(f"peak_memory_bytes must be a non-negative number, got {peak_memory_bytes!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
    for name, value in (("max_latency_ms", max_latency_ms), ("min_throughput_per_s", min_throughput_per_s)):
        if value is not None and (not _finite(value) or value <= 0):
            raise InvalidInputError(f"{name} must be a positive number or None (no target), got {value!r}")


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _option(
    device: Device,
    p: MigProfile,
    peak_memory_bytes: int,
    latency_ms_for: Callable[[Device], float],
    batch_size: int,
    max_latency_ms: float | None,
    min_throughput_per_s: float | None,
) -> MigOption:
    fits = peak_memory_bytes <= p.memory_bytes
    me = " (+me: with media engines, 1 per GPU)" if p.is_media_extension else ""
    if not fits:
        reason = f"needs {_gib(peak_memory_bytes)}, slice has {_gib(p.memory_bytes)}{me}"
        return MigOption(p.name, p.memory_bytes, p.sm_count, False, None, None, p.max_instances, False, reason)
    latency_ms = float(latency_ms_for(device.with_mig(p.name)))
    if not math.isfinite(latency_ms) or latency_ms <= 0:
        raise InvalidInputError(
            f"latency_ms_for returned {latency_ms!r} ms for {device.name}/{p.name}; "
            f"it must return a positive latency in milliseconds"
        )
    throughput = batch_size / latency_ms * 1000.0
    misses = []
    if max_latency_ms is not None and latency_ms > max_latency_ms:
        misses.append(f"{latency_ms:.3g} ms > {max_latency_ms:g} ms target")
    if min_throughput_per_s is not None and throughput < min_throughput_per_s:
        misses.append(f"{throughput:.4g}/s < {min_throughput_per_s:g}/s target")
    head = f"fits ({_gib(peak_memory_bytes)} of {_gib(p.memory_bytes)})"
    reason = (
        f"{head} but {' and '.join(misses)}"
        if misses
        else f"{head}; {latency_ms:.3g} ms, {throughput:.4g}/s per instance, {p.max_instances} per GPU"
    ) + me
    return MigOption(
        p.name, p.memory_bytes, p.sm_count, True, latency_ms, throughput, p.max_instances, not misses, reason
    )


def _recommend_reason(best: MigOption, p: MigProfile, peak_memory_bytes: int, targets: bool = True) -> str:
    per_gpu = (best.throughput_per_s or 0.0) * p.max_instances
    return (
        f"{p.name} is the smallest slice that fits ({_gib(peak_memory_bytes)} of {_gib(p.memory_bytes)})"
        f"{' and meets the targets' if targets else ''}: {best.latency_ms:.3g} ms per call; up to {p.max_instances} per GPU "
        f"({per_gpu:.4g}/s per GPU)"
    )


def _no_fit_reason(
    device: Device,
    options: tuple[MigOption, ...],
    profiles: list[MigProfile],
    peak_memory_bytes: int,
    max_latency_ms: float | None,
    min_throughput_per_s: float | None,
) -> str:
    fitting = [o for o in options if o.fits]
    if not fitting:
        largest = max(profiles, key=lambda p: p.memory_bytes)
        return (
            f"needs {_gib(peak_memory_bytes)}: fits no {device.name} slice; largest is {largest.name} with "
            f"{_gib(largest.memory_bytes)}"
        )
    fastest = min(fitting, key=lambda o: o.latency_ms or math.inf)
    smallest = fitting[0].profile
    wanted = []
    if max_latency_ms is not None:
        wanted.append(f"{max_latency_ms:g} ms")
    if min_throughput_per_s is not None:
        wanted.append(f"{min_throughput_per_s:g}/s")
    return (
        f"fits {smallest} and larger, but no slice reaches {' and '.join(wanted)} (best: {fastest.profile} "
        f"at {fastest.latency_ms:.3g} ms, {fastest.throughput_per_s:.4g}/s)"
    )


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.4g} GiB"  # 4 digits so 79.25 and 19.62 read as in nvidia-smi's profile table
