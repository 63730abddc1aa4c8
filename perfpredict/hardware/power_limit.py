"""A board power cap: what ``--power-limit`` (``power_limit_w``) does to a device's peaks.

``nvidia-smi -pl W`` sets the board's power limit; the driver's power management then lowers the graphics clock
until the board draws at most W under load (the memory clock stays). The model: a board at full load draws its idle
power plus a dynamic part, and dynamic power scales as C V^2 f with the supply voltage rising about in proportion to
the frequency along the GPU's voltage-frequency curve, so as f^3 (the classic DVFS relation; e.g. Hennessy and
Patterson, "Computer Architecture", section 1.5). The clock that meets a cap W is therefore
``f / f_max = ((W - idle) / (TDP - idle))^(1/3)``: every FLOP/s peak scales by that ratio, the memory bandwidth
does not. An H100-SXM (700 W, 87.5 W idle) capped at 500 W keeps 88% of its clock. This is a model, not a
measurement: a memory-bound step draws less than TDP and is slowed less than it says.

The capped device's ``tdp_w`` is the cap, so the power a run draws (``power_draw``: idle plus activity up to the
board power) never exceeds it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.hardware.device_types import frozen_mapping


def clock_share(device: Any, watts: float) -> float:
    """The share of its top clock ``device`` runs at under a cap of ``watts`` (see the module docstring)."""
    idle = device.idle_power_w
    return max(min((watts - idle) / (device.tdp_w - idle), 1.0), 0.0) ** (1 / 3)


def power_limited(device: Any, watts: float | None) -> Any:
    """``device`` under a board power cap of ``watts`` (None: as it is): peaks scaled by the clock that meets the
    cap, the board power lowered to it. Refused below the GPU's minimum power limit and above its board power."""
    if watts is None or getattr(device, "power_limit_w", None) == watts:
        return device
    if device.kind != "gpu":
        raise InvalidInputError(f"power_limit_w caps a GPU's board power; {device.name} is a {device.kind}")
    lowest = device.min_power_limit_w or device.idle_power_w
    if watts < lowest:
        what = (
            "minimum power limit"
            if device.min_power_limit_w
            else "idle power (its minimum limit is not in the catalog)"
        )
        raise InvalidInputError(
            f"power_limit_w={watts:g} is below {device.name}'s {what}, {lowest:g} W; choose {lowest:g} to "
            f"{device.tdp_w:g} W"
        )
    if watts > device.tdp_w:
        raise InvalidInputError(
            f"power_limit_w={watts:g} is above {device.name}'s board power ({device.tdp_w:g} W), which a cap can only "
            f"lower; choose {lowest:g} to {device.tdp_w:g} W"
        )
    share = clock_share(device, watts)
    return dataclasses.replace(
        device,
        peak_flops_per_s=frozen_mapping({k: v * share for k, v in device.peak_flops_per_s.items()}),
        boost_clock_mhz=device.boost_clock_mhz * share,
        tdp_w=float(watts),
        power_limit_w=float(watts),
        notes=f"{device.notes} {CAPPED}{_sentence(device, watts, share)}".strip(),
    )


CAPPED = "Power-capped: "


def _sentence(device: Any, watts: float, share: float) -> str:
    return (
        f"board power limited to {watts:g} W of {device.tdp_w:g} W; the driver lowers the graphics clock to meet "
        f"it, modelled as dynamic power ~ f^3 above the {device.idle_power_w:g} W idle (hardware/power_limit.py): clock "
        f"and FLOP/s peaks x {share:.3f}, memory bandwidth unchanged"
    )


def describe(device: Any) -> str:
    """The assumption line of a power-capped device ("" where none is set)."""
    notes = getattr(device, "notes", "") or ""
    return notes.split(CAPPED, 1)[1] if getattr(device, "power_limit_w", None) and CAPPED in notes else ""
