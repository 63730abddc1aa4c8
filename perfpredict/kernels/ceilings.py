"""DeviceCeilings: timing statistics, fractions of peak, and the JSON that ``apply_ceilings`` reads.

The protocol (gpus.md section 3.1): warm-up, then 10-30 timed repetitions; every sample is kept. For a
throughput the ceiling is the best sustained value (the max rate, from the min time), reported with the median
and the min; the spread ``(max - min) / median`` over 5% is flagged. For an overhead the best is the min time.
Each ceiling is also given as a fraction of the datasheet (the catalog's value) and as a fraction of the
theoretical value at the clock actually observed during the run (clocks throttle; boost is not guaranteed).

The JSON shape is what :func:`perfpredict.hardware.devices.apply_ceilings` reads::

    {"schema": "perfpredict.device_ceilings/1", "device": "H100-SXM",
     "ceilings": {"hbm_bandwidth_bytes_per_s": {"min": ..., "median": ..., "max": ..., "unit": "B/s",
                  "kernel": "hbm_triad", "implementation": "cupy", "method": "...", "spread": 0.01,
                  "spread_flagged": false, "datasheet": 3.35e12, "fraction_of_datasheet": 0.91,
                  "theoretical_at_observed_clock": ..., "fraction_at_observed_clock": ...}, ...},
     "kernels": [...every kernel run, with its samples...], "clocks": {"before": ..., "after": ...}, ...}

Keys that ``apply_ceilings`` maps onto a Device: ``hbm_bandwidth_bytes_per_s`` / ``dram_bandwidth_bytes_per_s``
(memory bandwidth), ``<fp64|fp32|fp16|bf16|tf32_tensor|fp16_tensor|bf16_tensor|fp8_tensor>_flops_per_s`` and
``launch_overhead_s``; the others (L2, L1, shared, PCIe, read/write/copy/triad separately, graph launch) are
extra hardware features for the learned predictors and the plot.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.kernels.table import COMPOSITES, KernelSpec

SCHEMA = "perfpredict.device_ceilings/1"
SPREAD_LIMIT = 0.05  # (max - min) / median above this is flagged

# FLOP/clk/SM by compute capability (gpus.md section 4.1): FP32 and FP64 are lanes x 2 (one FMA per lane per
# clock), FP16 vector (half2), dense FP16 tensor (FP32 accumulate); and L1 bytes/clk/SM. [mem] rows for 7.5/8.6.
# BF16 vector and tensor rates equal FP16 on sm_80+; TF32 tensor is half of FP16, FP8 twice (sm_89+).
ARCH_PER_SM_PER_CLOCK: dict[str, dict[str, float]] = {
    "7.0": {"fp32": 128, "fp64": 64, "fp16": 256, "fp16_tensor": 1024, "l1_bytes": 128},
    "7.5": {"fp32": 128, "fp64": 4, "fp16": 256, "fp16_tensor": 1024, "l1_bytes": 64},
    "8.0": {"fp32": 128, "fp64": 64, "fp16": 512, "fp16_tensor": 2048, "l1_bytes": 128},
    "8.6": {"fp32": 256, "fp64": 4, "fp16": 256, "fp16_tensor": 1024, "l1_bytes": 128},
    "8.9": {"fp32": 256, "fp64": 4, "fp16": 256, "fp16_tensor": 1024, "l1_bytes": 128},
    "9.0": {"fp32": 256, "fp64": 128, "fp16": 512, "fp16_tensor": 4096, "l1_bytes": 128},
}


@dataclass(frozen=True)
class Stat:
    """min, median and max of some samples, their count and relative spread."""

    min: float
    median: float
    max: float
    n: int

    @property
    def spread(self) -> float:
        return (self.max - self.min) / self.median if self.median else math.inf

    @property
    def flagged(self) -> bool:
        return self.spread > SPREAD_LIMIT

    def as_dict(self) -> dict[str, Any]:
        return {
            "min": self.min,
            "median": self.median,
            "max": self.max,
            "samples": self.n,
            "spread": round(self.spread, 6),
            "spread_flagged": self.flagged,
        }


def summarize(values: Iterable[float]) -> Stat:
    vals = [float(v) for v in values]
    if not vals or any(not math.isfinite(v) for v in vals):
        raise InvalidInputError(f"need finite timing samples, got {vals!r}")
    return Stat(min(vals), statistics.median(vals), max(vals), len(vals))


def rate_stat(times_s: Sequence[float], work: float) -> Stat:
    """Rates ``work / time`` for each sample: max rate from the min time (the best sustained value)."""
    if any(t <= 0 for t in times_s):
        raise InvalidInputError(f"timing samples must be positive seconds, got {list(times_s)!r}")
    return summarize(work / t for t in times_s)


def per_item_stat(times_s: Sequence[float], items: int) -> Stat:
    """Time per item (launch overhead): ``time / items`` per sample."""
    return summarize(t / items for t in times_s)


def fraction(value: float | None, reference: float | None) -> float | None:
    """``value / reference`` rounded to 4 places; None when either is missing or the reference is not positive."""
    if value is None or reference is None or not reference > 0:
        return None
    return round(value / reference, 4)


@dataclass
class KernelResult:
    """One kernel run: its samples, element count, result check and derived rate."""

    spec: KernelSpec
    implementation: str
    elements: int
    times_s: list[float]
    check_ok: bool
    params: dict[str, Any] = field(default_factory=dict)
    method: str = ""
    note: str = ""

    @property
    def work(self) -> int:
        return self.spec.work(self.elements)

    def stat(self) -> Stat:
        if self.spec.kind == "latency":
            return per_item_stat(self.times_s, self.elements)
        return rate_stat(self.times_s, self.work)

    def best(self) -> float:
        s = self.stat()
        return s.min if self.spec.kind == "latency" else s.max

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.spec.name,
            "implementation": self.implementation,
            "ceiling": self.spec.ceiling,
            "dtype": self.spec.dtype,
            "unit": self.spec.unit,
            "elements": self.elements,
            "bytes": self.spec.bytes_moved(self.elements),
            "flops": self.spec.flops(self.elements),
            "times_s": [float(t) for t in self.times_s],
            "check_ok": self.check_ok,
            "params": self.params,
            "method": self.method,
            "note": self.note,
            **self.stat().as_dict(),
        }


# ----------------------------------------------------------------------------------------------------------------
# Theoretical values


def gpu_theoretical(
    ceiling: str,
    *,
    cc: str,
    sm_count: int,
    sm_clock_mhz: float | None,
    mem_clock_mhz: float | None = None,
    bus_width_bits: int | None = None,
) -> float | None:
    """The theoretical value of a GPU ceiling at the given clocks; None when no per-clock model exists.

    FLOP ceilings: SMs x FLOP/clk/SM x SM clock. HBM: 2 x memory clock x bus width / 8 (DDR; gpus.md 3.1).
    L1 and shared: SMs x 128 B/clk x clock. L2, PCIe and launch overhead have no per-clock model here.
    """
    if ceiling.startswith(("hbm", "dram")):
        if not mem_clock_mhz or not bus_width_bits:
            return None
        return 2 * mem_clock_mhz * 1e6 * bus_width_bits / 8
    per = ARCH_PER_SM_PER_CLOCK.get(cc)
    if per is None or not sm_clock_mhz or not sm_count:
        return None
    hz = sm_clock_mhz * 1e6
    if ceiling in ("l1_bandwidth_bytes_per_s", "shared_bandwidth_bytes_per_s"):
        return sm_count * per["l1_bytes"] * hz
    key = ceiling.removesuffix("_flops_per_s")
    rates, major_minor = dict(per), float(cc)
    rates["bf16"] = rates["fp16"] if major_minor >= 8.0 else 0
    rates["bf16_tensor"] = rates["fp16_tensor"] if major_minor >= 8.0 else 0
    rates["tf32_tensor"] = rates["fp16_tensor"] / 2 if major_minor >= 8.0 else 0
    rates["fp8_tensor"] = rates["fp16_tensor"] * 2 if major_minor >= 8.9 else 0
    value = rates.get(key)
    return sm_count * value * hz if value else None


def cpu_theoretical(
    ceiling: str, *, cores: int, clock_hz: float | None, vector_bits: int, fma_units: int = 2
) -> float | None:
    """CPU FLOP ceilings at a clock: cores x lanes x 2 (FMA) x FMA units x clock. Bandwidth: no model."""
    if not clock_hz or ceiling not in ("fp32_flops_per_s", "fp64_flops_per_s"):
        return None
    lanes = vector_bits // (32 if ceiling.startswith("fp32") else 64)
    return cores * lanes * 2 * fma_units * clock_hz


def datasheet_value(device: Any, ceiling: str) -> float | None:
    """The catalog's value for ``ceiling`` (None if the catalog value is itself measured, or there is none)."""
    if device is None:
        return None
    if ceiling in ("hbm_bandwidth_bytes_per_s", "dram_bandwidth_bytes_per_s") or (
        ceiling.startswith(("hbm_", "dram_")) and ceiling.endswith("bandwidth_bytes_per_s")
    ):
        if "memory_bandwidth_bytes_per_s" in device.measured:
            return None
        return device.memory_bandwidth_bytes_per_s
    if ceiling.endswith("_flops_per_s"):
        key = ceiling.removesuffix("_flops_per_s")
        if f"peak_flops_per_s.{key}" in device.measured:
            return None
        return device.peak_flops_per_s.get(key) or None
    if ceiling == "launch_overhead_s" and "launch_overhead_s" not in device.measured:
        return device.launch_overhead_s
    return None


# ----------------------------------------------------------------------------------------------------------------
# Assembly


def add_composites(ceilings: dict[str, dict[str, Any]], target: str) -> None:
    """Add ``target``'s composite ceilings (``COMPOSITES``): each the best of its measured parts, saying which."""
    for name, parts in COMPOSITES.get(target, {}).items():
        present = [ceilings[p] for p in parts if p in ceilings]
        if present:
            best = max(present, key=lambda c: c["max"])
            ceilings[name] = {
                **best,
                "method": f"best of {', '.join(parts)}: {best['kernel']}",
                "composite_of": list(parts),
            }


def build_ceilings(
    results: Sequence[KernelResult],
    *,
    target: str,
    device_name: str,
    catalog_device: Any = None,
    theoretical: Mapping[str, float | None] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The DeviceCeilings JSON from kernel results: per ceiling the best kernel, plus composite ceilings."""
    theoretical = dict(theoretical or {})
    ceilings: dict[str, dict[str, Any]] = {}
    warnings_: list[str] = []
    for r in results:
        if not r.check_ok:
            warnings_.append(f"{r.spec.name} ({r.implementation}) failed its result check; not used as a ceiling")
            continue
        if r.spec.ceiling is None:
            continue
        current = ceilings.get(r.spec.ceiling)
        better = current is None or (
            r.best() < current["min"] if r.spec.kind == "latency" else r.best() > current["max"]
        )
        if better:
            ceilings[r.spec.ceiling] = _ceiling_entry(r)
    add_composites(ceilings, target)
    for name, entry in ceilings.items():
        best = entry["min"] if name.endswith("_s") and not name.endswith("_per_s") else entry["max"]
        sheet = datasheet_value(catalog_device, name)
        theo = theoretical.get(name)
        entry["datasheet"] = sheet
        entry["fraction_of_datasheet"] = fraction(best, sheet) if not name.endswith("overhead_s") else None
        entry["theoretical_at_observed_clock"] = theo
        entry["fraction_at_observed_clock"] = fraction(best, theo)
        if entry["spread_flagged"]:
            warnings_.append(
                f"{name}: spread {entry['spread']:.1%} over {SPREAD_LIMIT:.0%} "
                f"(min {entry['min']:.4g}, max {entry['max']:.4g})"
            )
    return {
        "schema": SCHEMA,
        "device": device_name,
        "target": target,
        "ceilings": dict(sorted(ceilings.items())),
        "kernels": [r.as_dict() for r in results],
        "warnings": warnings_,
        **dict(meta or {}),
    }


def _ceiling_entry(r: KernelResult) -> dict[str, Any]:
    s = r.stat()
    return {
        "min": s.min,
        "median": s.median,
        "max": s.max,
        "unit": r.spec.unit,
        "kernel": r.spec.name,
        "implementation": r.implementation,
        "method": r.method or r.spec.description,
        "samples": s.n,
        "spread": round(s.spread, 6),
        "spread_flagged": s.flagged,
        "params": r.params,
    }


def write_ceilings(data: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, default=_json_default) + "\n", encoding="utf-8")
    except OSError as err:
        raise InvalidInputError(f"cannot write ceilings to {str(path)!r}: {err.strerror or err}") from err
    return path


def read_ceilings(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"cannot read ceilings JSON {str(path)!r}: {err}") from err
    if not isinstance(data, dict) or not isinstance(data.get("ceilings"), dict):
        raise InvalidInputError(f"{str(path)!r} is not a DeviceCeilings file (no 'ceilings' mapping)")
    return data


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)
