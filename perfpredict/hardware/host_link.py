"""The host link: the PCIe link between a GPU and its host CPU, which ZeRO-Offload's copies run on.

``Device.host_link`` names it ("PCIe Gen5 x16"); its bandwidth per direction is the generation's line rate (lanes x
transfer rate x 128/130), and pinned copies reach the same share of it as NCCL's PCIe transfers
(``data/interconnects.json``: 0.80, nvbandwidth's ~80% of a Gen4 x16 link).
"""

from __future__ import annotations

import re
from typing import Any

from perfpredict.core.errors import InvalidInputError

#: per-lane rate per direction in GB/s after 128b/130b encoding (PCIe 3.0: 8 GT/s, 4.0: 16, 5.0: 32, 6.0: 64)
PCIE_LANE_GB_PER_S = {3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8, 5: 32 * 128 / 130 / 8, 6: 64 * 128 / 130 / 8}
HOST_COPY_FRACTION = 0.80  # interconnects.json links.pcie.achievable_fraction
_PCIE = re.compile(r"PCIe\s*Gen\s*(\d)\s*x\s*(\d+)", re.IGNORECASE)


def host_link_bytes_per_s(device: Any) -> float:
    """Bytes per second a pinned copy moves between ``device`` and its host, one way; refused where the device
    names no host link."""
    match = _PCIE.search(getattr(device, "host_link", "") or "")
    if not match or int(match.group(1)) not in PCIE_LANE_GB_PER_S:
        raise InvalidInputError(
            f"{device.name} names no host link (host_link, e.g. 'PCIe Gen5 x16'), which ZeRO-Offload's copies run "
            "on: add it to the device's record (load_device_file, docs/devices.md)"
        )
    return PCIE_LANE_GB_PER_S[int(match.group(1))] * int(match.group(2)) * 1e9 * HOST_COPY_FRACTION
