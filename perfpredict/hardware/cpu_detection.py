"""The local CPU as a Device, detected from /proc and /sys (no psutil). Every peak is an estimate.

The roofline suite (``perfpredict roofline --device cpu``) measures real ceilings; the catalog applies them.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path

from perfpredict.core.units import GIB, KIB, MIB
from perfpredict.hardware.device_types import Device, frozen_mapping

_CPU_CLOCK_FALLBACK_HZ = 2.5e9  # when neither cpufreq nor /proc/cpuinfo reports a clock
_CPU_BANDWIDTH_PER_CHANNEL_BYTES_PER_S = 20e9  # ~DDR4-2666/DDR5 sustained per channel: an ESTIMATE
_CPU_W_PER_CORE = 10.0  # package power per active core: an ESTIMATE (no RAPL read at catalog time)
_CPU_IDLE_W_PER_CORE = 3.0
# Without AVX512_BF16 (or AMX) there is no bf16 arithmetic: oneDNN widens every operand to fp32 and narrows the
# result, so bf16 matmuls run far below the fp32 peak (not at it, as the fallback to the fp32 key would say). On a
# Zen 3 (AVX2) host, torch 2.13's bf16 nn.Linear reached 18 GFLOP/s against 121-143 in fp32, and bf16 conv2d 3.8
# against 97: an ESTIMATE from those; the roofline suite's cpu_gemm_bf16 measures the host's own.
_EMULATED_BF16_FRACTION = 0.15


@functools.cache
def detect_local_cpu() -> Device:
    """The CPU this process runs on, from /proc/cpuinfo, /proc/meminfo and /sys; every peak is an estimate.

    Peak FP32 = cores x clock x FLOP/cycle/core from the ISA flags (see :func:`_fp32_flop_per_cycle`). Cores are
    the CPUs this process may use (affinity) divided by SMT threads per core, since SMT siblings share FMA units.
    """
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("features") or "").split())
    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = max(1, logical // _threads_per_core(info))
    clock_hz = _cpu_clock_hz(info)
    fp32 = cores * clock_hz * _fp32_flop_per_cycle(flags)
    peaks = {"fp32": fp32, "fp64": fp32 / 2}  # half the SIMD lanes in double precision
    if "avx512_bf16" in flags:
        peaks["bf16"] = 2 * fp32  # VDPBF16PS: two bf16 products per fp32 lane
    else:
        peaks["bf16"] = _EMULATED_BF16_FRACTION * fp32
    if "amx_bf16" in flags:
        peaks["bf16_tensor"] = cores * clock_hz * 1024  # Sapphire Rapids AMX: 1024 bf16 FLOP/cycle/core (estimate)
    channels = min(8, max(2, cores // 4))  # we cannot see DIMM channels from userspace: a guess
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(info.get("vendor_id", ""), platform.machine())
    return Device(
        name="cpu",
        kind="cpu",
        vendor=vendor,
        arch=platform.machine() or "unknown",
        memory_bytes=_memory_bytes(),
        memory_bandwidth_bytes_per_s=channels * _CPU_BANDWIDTH_PER_CHANNEL_BYTES_PER_S,
        peak_flops_per_s=frozen_mapping(peaks),
        tdp_w=cores * _CPU_W_PER_CORE,
        idle_power_w=cores * _CPU_IDLE_W_PER_CORE,
        launch_overhead_s=5e-6,  # per-op dispatch cost of eager PyTorch on CPU (a few us): estimate
        runtime_overhead_bytes=0,  # CPU peak memory is measured as RSS increase, so the baseline is excluded
        sm_count=cores,
        boost_clock_mhz=clock_hz / 1e6,
        l2_bytes=_last_level_cache_bytes(),
        aliases=("local-cpu",),
        source="estimate",
        sources="detected from /proc/cpuinfo, /proc/meminfo and /sys/devices/system/cpu",
        notes=(
            f"{info.get('model name', 'unknown CPU')}; {cores} cores x {clock_hz / 1e9:.2f} GHz x "
            f"{_fp32_flop_per_cycle(flags)} FP32 FLOP/cycle; bandwidth estimate {channels} channels x 20 GB/s; "
            f"TDP estimate {_CPU_W_PER_CORE:.0f} W/core; l2_bytes is the last-level cache. All estimates: "
            f"measure with the roofline suite for real ceilings."
        ),
    )


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo, keys lower-cased."""
    info: dict[str, str] = {}
    for line in _read_text("/proc/cpuinfo").splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip().lower(), value.strip())
    return info


def _threads_per_core(info: Mapping[str, str]) -> int:
    try:
        return max(1, int(info["siblings"]) // int(info["cpu cores"]))
    except (KeyError, ValueError, ZeroDivisionError):
        return 1


def _cpu_clock_hz(info: Mapping[str, str]) -> float:
    """Max clock from cpufreq (kHz) if exposed, else /proc/cpuinfo's current MHz, else 2.5 GHz."""
    khz = _read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    if khz.isdigit() and int(khz) > 0:
        return int(khz) * 1e3
    try:
        mhz = float(info.get("cpu mhz", ""))
        return mhz * 1e6 if mhz > 0 else _CPU_CLOCK_FALLBACK_HZ
    except ValueError:
        return _CPU_CLOCK_FALLBACK_HZ


def _fp32_flop_per_cycle(flags: set[str]) -> int:
    """FP32 FLOP/cycle/core from ISA flags. Assumptions (documented, not detected):

    - avx512f: 16 lanes x 2 (FMA) x 1 512-bit FMA port = 32; Xeons with a second 512-bit FMA port reach 64,
      Zen 4 double-pumps 256-bit units to 32;
    - avx2 + fma: 8 lanes x 2 (FMA) x 2 256-bit FMA ports = 32;
    - avx without fma: 8 lanes x (1 add + 1 mul) = 16;
    - otherwise (SSE, NEON...): 4 lanes x 2 = 8.
    """
    if "avx512f" in flags:
        return 32
    if "avx2" in flags and "fma" in flags:
        return 32
    if "avx" in flags:
        return 16
    return 8


def _memory_bytes() -> int:
    """Physical memory (MemTotal), capped by a cgroup v2 memory limit when one is set."""
    total = 0
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read_text("/proc/meminfo"), flags=re.MULTILINE)
    if match:
        total = int(match.group(1)) * 1024
    elif hasattr(os, "sysconf"):
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total = 0
    limit = _read_text("/sys/fs/cgroup/memory.max").strip()
    if limit.isdigit() and (total == 0 or int(limit) < total):
        total = int(limit)
    return total or 8 * GIB  # nothing readable: assume 8 GiB rather than claim zero memory


def _last_level_cache_bytes() -> int:
    sizes = []
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        match = re.fullmatch(r"(\d+)([KMG]?)", _read_text(str(d / "size")).strip())
        if match:
            sizes.append(int(match.group(1)) * {"": 1, "K": KIB, "M": MIB, "G": GIB}[match.group(2)])
    return max(sizes, default=0)


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (hypervisors may shorten it), else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
