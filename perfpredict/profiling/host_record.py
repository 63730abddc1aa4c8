"""A CPU dataset records the CPU that measured it, as a device file naming ``cpu``.

The catalog's ``cpu`` is the host the process runs on (``hardware/cpu_detection.py``), so rows measured on one CPU
and scored on another are predicted for the wrong machine: ``data/v3/cpu-amd-epyc-2c`` was measured on an EPYC with
native bf16 and, scored on one without, its analytical MAPE went 50% -> 305%. ``host_device.json`` in the dataset
folder is that CPU as this host detected it at collection time; ``load_device_file`` on it (what
``benchmarks/measuring_host.py`` does) makes ``get_device("cpu")`` the measuring CPU again.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

HOST_DEVICE_FILE = "host_device.json"
# The Device fields a CPU's predictions read (the rest are the catalog's defaults for any CPU record)
_FIELDS = (
    "vendor",
    "arch",
    "memory_bytes",
    "memory_bandwidth_bytes_per_s",
    "tdp_w",
    "idle_power_w",
    "launch_overhead_s",
    "sm_count",
    "boost_clock_mhz",
    "l2_bytes",
    "source",
    "sources",
    "notes",
)


def host_cpu_record() -> dict[str, Any]:
    """This host's detected CPU as a device-file record named ``cpu`` (JSON-ready; no calibration applied)."""
    from perfpredict.hardware.cpu_detection import detect_local_cpu

    cpu = detect_local_cpu()
    return {"name": "cpu", **{k: getattr(cpu, k) for k in _FIELDS}, "peak_flops_per_s": dict(cpu.peak_flops_per_s)}


def record_host_cpu(folder: Path, torch_device: str) -> None:
    """Write ``folder``'s measuring-CPU record when a CPU collection starts there. A dataset resumed on a CPU
    with other peaks keeps its first record and warns: its rows now come from two machines."""
    if torch_device != "cpu":
        return
    record, path = host_cpu_record(), Path(folder) / HOST_DEVICE_FILE
    if path.exists():
        (first,) = json.loads(path.read_text())["devices"]
        if first.get("peak_flops_per_s") != record["peak_flops_per_s"]:
            warnings.warn(
                f"{folder} was started on another CPU ({first.get('notes', '?')}); this one is "
                f"{record['notes']}: its rows will be scored as the first CPU's (collect into a new folder)",
                stacklevel=2,
            )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"devices": [record]}, indent=2) + "\n")
