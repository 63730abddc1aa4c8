"""Which catalog GPUs a GPU is at least as fast as on every datasheet figure, in the same architecture.

A GPU that matches or beats another of its architecture on every datasheet figure (each FLOP/s peak, memory
bandwidth and capacity, SM count, boost clock, L2, board power) runs any kernel at least as fast: it is the same
design with more of everything. The learned device time cannot know that on its own: each GPU's level comes from
the public rows that cover it (an A100-80GB PCIe's from NeuSight's per-call timings and its neighbours, an SXM's
from Vidur's kernel traces), and two protocols or two neighbour sets can put the better card a few percent behind. Where they do, the card whose
level was measured is believed and the other one moves (``GpuEfficiencyModel._held_in_order``).
:func:`dominated` names the GPUs a device must never be slower than, and :func:`dominating` those it must never be
faster than, for ``predictors/gpu_efficiency.GpuEfficiencyModel.efficiency`` to hold it to them.
"""

from __future__ import annotations

from typing import Any


def figures(device: Any) -> dict[str, float]:
    """The datasheet figures a faster GPU is at least as large in (a power cap counts as the board power)."""
    out = {f"peak_flops_per_s.{k}": float(v) for k, v in device.peak_flops_per_s.items() if v}
    out.update(
        memory_bandwidth_bytes_per_s=float(device.memory_bandwidth_bytes_per_s),
        memory_bytes=float(device.memory_bytes),
        sm_count=float(device.sm_count),
        boost_clock_mhz=float(device.boost_clock_mhz),
        l2_bytes=float(device.l2_bytes),
        board_power_w=float(device.power_limit_w or device.tdp_w),
    )
    return out


def at_least_as_fast(a: Any, b: Any) -> bool:
    """Whether ``a`` matches or beats ``b`` on every datasheet figure, in the same architecture."""
    if a.kind != "gpu" or b.kind != "gpu" or not a.compute_capability:
        return False
    if (a.arch, a.compute_capability) != (b.arch, b.compute_capability):
        return False
    mine = figures(a)
    return all(mine.get(key, 0.0) >= value for key, value in figures(b).items())


def dominated(device: Any) -> tuple[Any, ...]:
    """The catalog GPUs (datasheet basis, whole GPUs) other than ``device`` that it is at least as fast as (read
    afresh each time: a device file can add GPUs to the catalog)."""
    from perfpredict.hardware.devices import datasheet_device

    sheet = datasheet_device(device)
    if sheet.kind != "gpu" or sheet.parent:
        return ()
    return tuple(d for d in _others(sheet) if at_least_as_fast(sheet, d))


def dominating(device: Any) -> tuple[Any, ...]:
    """The catalog GPUs (datasheet basis, whole GPUs) other than ``device`` that are at least as fast as it."""
    from perfpredict.hardware.devices import datasheet_device

    sheet = datasheet_device(device)
    if sheet.kind != "gpu" or sheet.parent:
        return ()
    return tuple(d for d in _others(sheet) if at_least_as_fast(d, sheet))


def _others(sheet: Any) -> list[Any]:
    from perfpredict.hardware.devices import datasheet_device, list_devices

    return [datasheet_device(d) for d in list_devices() if d.kind == "gpu" and d.name != sheet.name]
