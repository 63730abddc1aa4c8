"""Finish the native ``perfpredict-roofline`` JSON: composite ceilings, catalog name, fractions of peak.

The executable prints per-kernel min/median/max (no Python, no NVML); this adds what needs the catalog.
"""

from __future__ import annotations

from typing import Any

from perfpredict.kernels.ceilings import SCHEMA, add_composites, datasheet_value, fraction, gpu_theoretical


def finish_native(raw: dict[str, Any], command: str = "") -> dict[str, Any]:
    from perfpredict.core.errors import UnknownDeviceError
    from perfpredict.hardware.devices import get_device

    name = raw.get("device_name_reported", "")
    try:
        device = get_device(name)
        catalog_name = device.name
    except UnknownDeviceError:
        device, catalog_name = None, name
    attrs = raw.get("device_attributes", {})
    ceilings: dict[str, dict[str, Any]] = {}
    for k in raw.get("kernels", []):
        key = k.get("ceiling")
        if not key or not k.get("check_ok", True):
            continue
        latency = k.get("unit") == "s"
        cur = ceilings.get(key)
        if cur is None or (k["min"] < cur["min"] if latency else k["max"] > cur["max"]):
            ceilings[key] = {
                f: k[f]
                for f in (
                    "min",
                    "median",
                    "max",
                    "unit",
                    "kernel",
                    "implementation",
                    "method",
                    "samples",
                    "spread",
                    "spread_flagged",
                )
            }
    add_composites(ceilings, "cuda")
    sm_mhz = attrs.get("clock_khz", 0) / 1e3 or None
    mem_mhz = attrs.get("mem_clock_khz", 0) / 1e3 or None
    for key, c in ceilings.items():
        best = c["min"] if c["unit"] == "s" else c["max"]
        sheet = datasheet_value(device, key)
        theo = gpu_theoretical(
            key,
            cc=attrs.get("cc", ""),
            sm_count=attrs.get("sms", 0),
            sm_clock_mhz=sm_mhz,
            mem_clock_mhz=mem_mhz,
            bus_width_bits=attrs.get("bus_width_bits"),
        )
        c.update(
            datasheet=sheet,
            fraction_of_datasheet=None if c["unit"] == "s" else fraction(best, sheet),
            theoretical_at_observed_clock=theo,
            fraction_at_observed_clock=fraction(best, theo),
            clock_note="theoretical at the device's reported max clock (no NVML in the native path)",
        )
    return {
        **raw,
        "schema": SCHEMA,
        "device": catalog_name,
        "ceilings": dict(sorted(ceilings.items())),
        "command": command,
        "warnings": [f"{k}: spread {c['spread']:.1%} over 5%" for k, c in ceilings.items() if c.get("spread_flagged")],
    }
