"""A thin wrapper over NVML (``pynvml`` from ``nvidia-ml-py``): energy, power, memory, clocks and temperature.

``pynvml`` is a module attribute (None when ``nvidia-ml-py`` is not installed), so tests replace it with
``mocker.patch("perfpredict.profiling.nvml.pynvml", autospec=True)``. This module is imported only by the GPU path
of the monitor, so ``import perfpredict`` never loads it.

Every query returns None when NVML cannot answer (an old GPU without an energy counter, a MIG slice, a container
without NVML): a missing number stays missing.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

try:  # optional: pip install "perfpredict[gpu]"
    import pynvml
except ImportError:  # pragma: no cover - depends on the environment
    pynvml = None

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlDevice:
    """One GPU as NVML sees it. Build it with :meth:`open`, which returns None (with a warning) when NVML is absent."""

    def __init__(self, handle: Any, index: int) -> None:
        self.handle = handle
        self.index = index

    @classmethod
    def open(cls, index: int = 0, *, warn: bool = True) -> NvmlDevice | None:
        lib = pynvml
        if lib is None:
            if warn:
                warnings.warn(
                    'NVML is not available (pip install "perfpredict[gpu]" for nvidia-ml-py): GPU energy '
                    "falls back to nothing, and NVML memory, clocks and temperature are not recorded",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return None
        try:
            lib.nvmlInit()
            return cls(lib.nvmlDeviceGetHandleByIndex(index), index)
        except Exception as err:  # noqa: BLE001 - NVMLError (a mock under test); NVML absent means no NVML data
            if warn:
                warnings.warn(
                    f"NVML could not be initialised ({err}); GPU energy, NVML memory, clocks and "
                    "temperature are not recorded",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return None

    def _query(self, fn_name: str, *args: Any) -> Any:
        try:
            return getattr(pynvml, fn_name)(self.handle, *args)
        except Exception as err:  # noqa: BLE001 - NVML_ERROR_NOT_SUPPORTED and friends: the value is missing
            logger.debug("NVML %s failed: %s", fn_name, err)
            return None

    def energy_mj(self) -> int | None:
        """The total-energy counter in millijoules since the driver loaded (Volta and newer), or None."""
        value = self._query("nvmlDeviceGetTotalEnergyConsumption")
        return None if value is None else int(value)

    def power_w(self) -> float | None:
        value = self._query("nvmlDeviceGetPowerUsage")  # milliwatts
        return None if value is None else value / 1000.0

    def memory_used_bytes(self) -> int | None:
        info = self._query("nvmlDeviceGetMemoryInfo")
        return None if info is None else int(info.used)

    def name(self) -> str | None:
        value = self._query("nvmlDeviceGetName")
        return None if value is None else _text(value)

    def clocks_mhz(self) -> tuple[float | None, float | None]:
        sm = self._query("nvmlDeviceGetClockInfo", getattr(pynvml, "NVML_CLOCK_SM", 1))
        mem = self._query("nvmlDeviceGetClockInfo", getattr(pynvml, "NVML_CLOCK_MEM", 2))
        return (None if sm is None else float(sm)), (None if mem is None else float(mem))

    def power_limit_w(self) -> float | None:
        value = self._query("nvmlDeviceGetEnforcedPowerLimit")
        return None if value is None else value / 1000.0

    def temperature_c(self) -> float | None:
        value = self._query("nvmlDeviceGetTemperature", getattr(pynvml, "NVML_TEMPERATURE_GPU", 0))
        return None if value is None else float(value)

    def snapshot(self) -> dict[str, float | None]:
        """Clocks, power limit and temperature now (the monitor takes one before and one after a window)."""
        sm, mem = self.clocks_mhz()
        return {
            "sm_clock_mhz": sm,
            "mem_clock_mhz": mem,
            "power_limit_w": self.power_limit_w(),
            "temperature_c": self.temperature_c(),
        }


def driver_version() -> str | None:
    try:
        return _text(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001 - no NVML: unknown
        return None


class PowerSampler:
    """Samples power in a daemon thread and integrates it (trapezoid rule): the fallback and the cross-check.

    ``read_power`` returns watts or None. The first sample is taken at :meth:`start`, the last at :meth:`stop`.
    """

    def __init__(self, read_power: Callable[[], float | None], interval_s: float = 0.05) -> None:
        self.read_power = read_power
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        value = self.read_power()
        if value is not None:
            self.samples.append((time.perf_counter(), float(value)))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> PowerSampler:
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="perfpredict-power", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> tuple[float | None, float | None, int]:
        """Stop sampling; ``(average watts, integrated joules, samples)``, Nones when fewer than two samples."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 5 * self.interval_s))
        self._sample()
        s = self.samples
        if len(s) < 2 or s[-1][0] <= s[0][0]:
            return None, None, len(s)
        joules = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(s, s[1:]))
        return joules / (s[-1][0] - s[0][0]), joules, len(s)
