"""CPU-side probes: resident memory and its high-water mark, RAPL energy counters, CPU model and clock.

Peak memory on CPU is the process's resident set (RSS). Linux keeps a high-water mark (``VmHWM`` in
``/proc/self/status``) that only grows; writing ``5`` to ``/proc/self/clear_refs`` resets it to the current RSS
(Linux >= 4.0, own process, normally allowed). :func:`reset_peak_rss` does that and says whether it worked. Where it
is not allowed the mark is process-wide and a window can only be trusted when it raised the mark; the monitor then
reports ``None`` rather than a guess. ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` is the same mark (never reset),
used where ``/proc`` is missing.

Freed memory that glibc keeps in its arenas would make a later, smaller peak invisible; :func:`trim_allocator`
returns it to the kernel (``malloc_trim(0)``) before a window starts.

Energy on CPU comes from RAPL package domains under ``/sys/class/powercap/intel-rapl:N/energy_uj`` (AMD exposes
the same interface). Reading them usually needs root since 2020 (CVE-2020-8694); unreadable means missing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import platform
import resource
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

POWERCAP_ROOT = Path("/sys/class/powercap")


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes() -> int | None:
    """Current resident set size of this process (``VmRSS``), or None where /proc is missing."""
    return _status_kb("VmRSS")


def peak_rss_bytes() -> int:
    """The resident high-water mark (``VmHWM``); ``ru_maxrss`` where /proc is missing."""
    hwm = _status_kb("VmHWM")
    if hwm is not None:
        return hwm
    scale = 1 if platform.system() == "Darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS; True when the kernel allowed it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def _libc():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def trim_allocator() -> None:
    """Give glibc's free arena memory back to the kernel, so the next window's RSS peak is its own."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)


@dataclass(frozen=True)
class RaplDomain:
    name: str
    energy_path: Path
    max_range_uj: int


def rapl_domains(root: Path = POWERCAP_ROOT) -> list[RaplDomain]:
    """Readable top-level RAPL package domains (``intel-rapl:N``, not their ``:N:M`` subdomains)."""
    out: list[RaplDomain] = []
    if not root.is_dir():
        return out
    for d in sorted(root.glob("intel-rapl:*")):
        if d.name.count(":") != 1:
            continue
        energy = d / "energy_uj"
        try:
            int(energy.read_text().strip())
            max_range = int((d / "max_energy_range_uj").read_text().strip())
            name = (d / "name").read_text().strip() if (d / "name").exists() else d.name
        except (OSError, ValueError):
            continue
        out.append(RaplDomain(name, energy, max_range))
    return out


class RaplCounter:
    """Sum of the package energy counters, wraparound handled; ``available`` is False when none is readable."""

    def __init__(self, root: Path = POWERCAP_ROOT) -> None:
        self.domains = rapl_domains(root)

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def read_uj(self) -> list[int] | None:
        try:
            return [int(d.energy_path.read_text().strip()) for d in self.domains]
        except (OSError, ValueError):
            return None

    def joules_between(self, start: list[int] | None, end: list[int] | None) -> float | None:
        if start is None or end is None or len(start) != len(end):
            return None
        total = 0
        for d, a, b in zip(self.domains, start, end):
            total += b - a if b >= a else b + d.max_range_uj - a  # the counter wrapped once
        return total / 1e6


def cpu_freq_mhz() -> float | None:
    """Average current clock of the online CPUs (``scaling_cur_freq``, else /proc/cpuinfo ``cpu MHz``)."""
    values: list[float] = []
    for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            values.append(int(p.read_text().strip()) / 1000)
        except (OSError, ValueError):
            continue
    if not values:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                values = [float(line.split(":", 1)[1]) for line in f if line.lower().startswith("cpu mhz")]
        except (OSError, ValueError):
            values = []
    return round(sum(values) / len(values), 1) if values else None


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_avg_1m() -> float | None:
    """The 1-minute load average: on a shared host, a value above the core count means others compete for it."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None
