"""A GPU's power over a stretch of time: an idle floor, plus what its kernels' activity draws while they run.

    power = idle + (TDP - idle) x busy fraction x activity          (per GPU)

- ``busy fraction``: the share of the wall time the GPU runs kernels. A host-bound serving step leaves it idle
  while the CPU schedules, prepares inputs or streams tokens, and a tensor-parallel rank waits in its collectives:
  such a GPU draws little more than its idle power (host-bound A100 ranks measured about 110 W where a model
  that takes them busy predicts over 230 W).
- ``activity``: how hard the running kernels drive the chip, from the roofline: the time the step would take at
  the datasheet's peak (compute, or memory at ``MEMORY_POWER_WEIGHT``: moving bytes draws less than FMA units)
  over the time it does take, between 0 and 1. A decode step streaming weights at 70% of the bandwidth has an
  activity of about 0.7 x 0.7 = 0.49; a compute-bound prefill at 60% of peak, 0.6.
- NCCL's collectives run on a few SMs and move bytes at the link's rate, far below the memory's:
  ``COMM_ACTIVITY``.

``idle_power_w`` and ``tdp_w`` are the catalog's (``devices.json``; idle is 12.5% of TDP for datacenter boards, an
assumption it states).
"""

from __future__ import annotations

from typing import Any

COMM_ACTIVITY = 0.1  # a collective's activity: a few SMs copying at NVLink's rate (a tenth of HBM's)


def gpu_power_w(device: Any, busy_fraction: float, activity: float) -> float:
    """One GPU's mean power: ``idle + (tdp - idle) x busy_fraction x activity`` (both clipped to [0, 1])."""
    busy = min(max(float(busy_fraction), 0.0), 1.0)
    act = min(max(float(activity), 0.0), 1.0)
    return device.idle_power_w + (device.tdp_w - device.idle_power_w) * busy * act


def mean_activity(parts: list[tuple[float, float]]) -> float:
    """The time-weighted activity of (seconds, activity) parts of the GPU's busy time."""
    busy = sum(s for s, _ in parts)
    return sum(s * a for s, a in parts) / busy if busy > 0 else 0.0
