"""What share of its datasheet a GPU attains: one basis for every GPU's roofline, measured where we can.

The learned device time reads every GPU on its datasheet (``predictors/gpu_op_features.datasheet_basis``). The
analytical roofline, the bound of each op and the roofline plot read attainable rates, and a GPU with a roofline run
(``perfpredict/data/measured``: the H100 SXM) carries measured ones: 823 of 989 TFLOP/s bf16, 2.89 of 3.35 TB/s.
Reading that GPU at its measurements and the others at their datasheets would compare two GPUs on two bases (an
H200, the H100's die with more memory, would show 20% more compute). So every GPU is read at its datasheet times the
**measured fraction** of each ceiling: its own where it was measured, else that of the measured GPUs of its
architecture, else of every measured GPU (the H200 and the B200 take the H100's, and the report says so); a ceiling
no run measured keeps the analytical roofline's typical fraction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MEMORY = "memory"  # the key of the device-memory bandwidth among the FLOP keys

_MEMO: dict[tuple[int, Any], tuple[dict[str, float], tuple[str, ...]]] = {}


def measured_fractions(device: Any) -> tuple[dict[str, float], tuple[str, ...]]:
    """(per ceiling key, FLOP keys and ``"memory"``: the measured share of the datasheet ``device`` is read at;
    the GPUs it was measured on). Empty for a CPU, or where no GPU of the catalog carries a roofline run."""
    from perfpredict.hardware.devices import catalog_generation

    if device.kind != "gpu":
        return {}, ()
    # the whole device (its measured values, not only which fields were measured) and the catalog it sits in
    key = (catalog_generation(), device.parent or "", device if not device.parent else None)
    if any(k[0] != key[0] for k in _MEMO):  # a rebuilt catalog: what was derived from the old one goes
        _MEMO.clear()
    if key not in _MEMO:
        _MEMO[key] = _fractions(device)
    return _MEMO[key]


def _fractions(device: Any) -> tuple[dict[str, float], tuple[str, ...]]:
    from perfpredict.hardware.devices import get_device, list_devices

    whole = get_device(device.parent) if device.parent else device
    if whole.measured:
        return own_fractions(whole), (whole.name,)
    runs = [d for d in list_devices() if d.kind == "gpu" and d.measured]
    same = [d for d in runs if d.arch == whole.arch]
    runs = same or runs
    per_run = [own_fractions(d) for d in runs]
    keys = sorted({k for f in per_run for k in f})
    return {k: float(np.median([f[k] for f in per_run if k in f])) for k in keys}, tuple(d.name for d in runs)


def own_fractions(device: Any) -> dict[str, float]:
    """A measured GPU's measured ceilings over its datasheet's, per key."""
    from perfpredict.hardware.devices import datasheet_device

    sheet = datasheet_device(device)
    out = {}
    for key, value in device.peak_flops_per_s.items():
        if f"peak_flops_per_s.{key}" in device.measured and sheet.peak_flops_per_s.get(key):
            out[key] = float(value) / float(sheet.peak_flops_per_s[key])
    if "memory_bandwidth_bytes_per_s" in device.measured:
        out[MEMORY] = device.memory_bandwidth_bytes_per_s / datasheet_device(device).memory_bandwidth_bytes_per_s
    return out


def attained_peak(device: Any, key: str) -> float:
    """The FLOP/s peak ``key`` of ``device``'s datasheet times its measured fraction (1 where none was measured):
    two peaks of one GPU compared on the basis the GPU is read at."""
    from perfpredict.hardware.devices import datasheet_device

    sheet = datasheet_device(device) if device.kind == "gpu" else device
    return float(sheet.peak_flops_per_s.get(key, 0.0)) * measured_fractions(device)[0].get(key, 1.0)
