"""Run the roofline suite on a target ("cuda" or "cpu") and assemble DeviceCeilings.

    >>> from perfpredict.kernels.suite import run_roofline
    >>> data = run_roofline("cpu", quick=True)          # runs here, on any machine
    >>> data = run_roofline("cuda", kernels=["hbm"])    # needs a CUDA GPU plus cupy (and numba)

Each kernel is warmed up, then timed ``reps`` times (CPU: ``perf_counter_ns``; GPU: CUDA events); every sample
is kept in the output. The environment (CPU model or GPU name, driver, clocks, power, load) is recorded before
and after the run.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError, PerfPredictError
from perfpredict.kernels import table
from perfpredict.kernels.ceilings import KernelResult, build_ceilings, cpu_theoretical

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

TARGETS = ("cpu", "cuda")
# target -> the module that runs its kernels (run(specs, quick, reps, say, started, command, ...))
SUITES = {"cpu": "perfpredict.kernels.cpu_suite", "cuda": "perfpredict.kernels.gpu_suite"}
Progress = Callable[[str], None]


class NoCudaDeviceError(PerfPredictError):
    """The CUDA roofline was asked for on a machine without a usable CUDA device."""


def cuda_status() -> tuple[bool, str]:
    """(usable, reason): a CUDA device seen through CuPy (or Numba), or why not."""
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        try:
            if cupy.cuda.is_available():
                return True, f"{cupy.cuda.runtime.getDeviceCount()} CUDA device(s) via CuPy"
        except Exception as err:  # noqa: BLE001 - a broken driver reports in many ways
            return False, f"CuPy cannot reach a CUDA driver ({type(err).__name__})"
        return False, "CuPy is installed but sees no CUDA device or driver"
    try:
        from numba import cuda
    except ImportError:
        return False, 'neither cupy nor numba is installed (pip install "perfpredict[gpu]")'
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False, "NUMBA_ENABLE_CUDASIM=1 is set: the simulator cannot measure ceilings"
    return (True, "CUDA device via Numba") if cuda.is_available() else (False, "Numba sees no CUDA device")


def run_roofline(
    target: str = "cpu",
    *,
    quick: bool = False,
    kernels: Sequence[str] | None = None,
    implementation: str = "auto",
    reps: int | None = None,
    progress: Progress | None = None,
    command: str = "",
) -> dict[str, Any]:
    """Measure ``target``'s ceilings; returns the DeviceCeilings dict (write it with ``write_ceilings``)."""
    if target not in TARGETS:
        raise InvalidInputError(f"roofline target must be one of {', '.join(TARGETS)}, got {target!r}")
    if reps is not None and not 3 <= reps <= 1000:
        raise InvalidInputError(f"reps must be between 3 and 1000, got {reps!r}")
    specs = table.select(target, list(kernels or []))
    say = progress or (lambda msg: logger.info("%s", msg))
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    if target == "cuda":
        ok, reason = cuda_status()
        if not ok:
            raise NoCudaDeviceError(no_cuda_message(reason))
    options = {"implementation": implementation} if target == "cuda" else {}
    suite = importlib.import_module(SUITES[target])  # each suite imports its own kernels, and nothing of this module
    return suite.run(specs, quick=quick, reps=reps, say=say, started=started, command=command, **options)


def no_cuda_message(reason: str) -> str:
    return (
        f"no CUDA device: {reason}. Run `perfpredict roofline --device cuda` on a machine with an NVIDIA GPU "
        f'and `pip install "perfpredict[gpu]"`, or measure this CPU with `perfpredict roofline --device cpu`.'
    )


def default_out_path(device_name: str) -> Path:
    slug = "".join(c if c.isalnum() else "-" for c in device_name.lower()).strip("-") or "device"
    return Path("measured") / f"{slug}.json"


__all__ = [
    "run_roofline",
    "cuda_status",
    "NoCudaDeviceError",
    "KernelResult",
    "build_ceilings",
    "cpu_theoretical",
    "TARGETS",
]
