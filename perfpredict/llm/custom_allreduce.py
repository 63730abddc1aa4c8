"""vLLM's custom all-reduce: when vLLM 0.6 uses it instead of NCCL, which of its two kernels runs, and its time.

When (``vllm/distributed/device_communicators/custom_all_reduce.py``, v0.6.x): the tensor-parallel group must be
in one node, of 2, 4, 6 or 8 GPUs, fully connected by NVLink when it has more than two (``world_size > 2 and not
full_nvlink``: "not supported on more than two PCIe-only GPUs"), with GPU peer-to-peer access; a message is taken
while it is under the buffer's ``max_size`` of 8 MiB (``inp_size < self.max_size``) and a multiple of 16 bytes.
Otherwise vLLM calls NCCL (pynccl). Which kernel (``csrc/custom_all_reduce.cuh``): the **one-shot**
``cross_device_reduce_1stage`` (every GPU reads every peer's whole buffer and reduces it) for two GPUs, or for
four under 512 KiB, or for six and eight under 256 KiB; else the **two-shot** ``cross_device_reduce_2stage`` (a
reduce-scatter, then an all-gather, over NVLink loads). PCIe boxes (L4, L40S, A10G, A100/H100 PCIe) are taken
to have no peer-to-peer access between their GPUs, as their cloud instances do, so vLLM's P2P test disables the
kernel there [assumption]; H100 NVL's bridged pairs have it at two GPUs.

Time: ``alpha_n + f x bytes / busbw``, with ``f`` the bytes each GPU reads per byte of message (``n - 1`` for the
one-shot kernel, ``2(n-1)/n`` for the two-shot) and, per GPU family and kernel, one bus bandwidth for every group
size and one latency term per group size: non-negative least squares on the published timings of vLLM's kernel
(``data/custom_allreduce.json``, eager calls: an upper bound for a CUDA-graph replay). A group size without
points takes the nearest one's latency.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "custom_allreduce.json"
MAX_BYTES = 8 * 1024 * 1024  # CustomAllreduce(max_size=8192 * 1024); should_custom_ar: inp_size < max_size
WORLD_SIZES = (2, 4, 6, 8)
ONE_SHOT, TWO_SHOT = "one-shot", "two-shot"


def why_not(size_bytes: float, ranks: int, device: Any, nodes: int = 1) -> str | None:
    """None where vLLM 0.6 runs its custom all-reduce on this message, else the reason it calls NCCL."""
    if nodes > 1:
        return "the group spans nodes"
    if ranks not in WORLD_SIZES:
        return f"{ranks} GPUs (it supports {', '.join(map(str, WORLD_SIZES))})"
    if _family(device) is None:
        return "no GPU peer-to-peer access on this PCIe box [assumption]"
    if ranks > 2 and not full_nvlink(device):
        return "more than two GPUs without full NVLink"
    if size_bytes >= MAX_BYTES:
        return f"{size_bytes / 2**20:.1f} MiB is not under its 8 MiB buffer"
    if int(size_bytes) % 16:
        return "not a multiple of 16 bytes"
    return None


def kernel(size_bytes: float, ranks: int) -> str:
    """Which of vLLM's two kernels runs (``custom_all_reduce.cuh``'s REDUCE_CASE, on a fully NVLinked group)."""
    if ranks == 2 or (ranks <= 4 and size_bytes < 512 * 1024) or (ranks <= 8 and size_bytes < 256 * 1024):
        return ONE_SHOT
    return TWO_SHOT


def seconds(size_bytes: float, ranks: int, device: Any) -> float:
    """Seconds of one call of vLLM's custom all-reduce (the caller checked ``why_not``)."""
    k = kernel(size_bytes, ranks)
    alphas, busbw = _fit(_family(device), k)
    nearest = min(alphas, key=lambda n: (abs(n - ranks), -n))
    return alphas[nearest] + _reads(k, ranks) * size_bytes / busbw


def full_nvlink(device: Any) -> bool:
    """Every pair of GPUs in a node joined by NVLink (an NVSwitch or an NVLink mesh), not bridged pairs."""
    from perfpredict.parallel.interconnect import interconnect_for

    return interconnect_for(device).intra.name == "nvlink"


def _reads(k: str, ranks: int) -> float:
    return float(ranks - 1) if k == ONE_SHOT else 2 * (ranks - 1) / ranks


@functools.lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    return json.loads(DATA_FILE.read_text())


def _family(device: Any) -> str | None:
    name = getattr(device, "parent", None) or getattr(device, "name", device)
    return _data()["families"].get(name)


@functools.cache
def _fit(family: str, k: str) -> tuple[dict[int, float], float]:
    """({ranks: latency seconds}, bus bandwidth bytes/s) of one family's kernel, by NNLS on its points."""
    from scipy.optimize import nnls

    rows = [
        (int(n), size, us * 1e-6)
        for n, points in _data()["points"][family].items()
        for size, us in points
        if kernel(size, int(n)) == k
    ]
    sizes = sorted({n for n, _, _ in rows})
    a = np.array([[float(n == m) for m in sizes] + [_reads(k, n) * size] for n, size, _ in rows])
    b = np.array([t for _, _, t in rows])
    x, _ = nnls(a, b)
    per_byte = x[-1] if x[-1] > 0 else 1e-12
    return dict(zip(sizes, x[:-1].tolist())), 1.0 / per_byte
