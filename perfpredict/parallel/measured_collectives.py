"""Collective time from measurements: Vidur's NCCL all-reduce and send/recv curves, by message size.

``perfpredict/data/measured_collectives.json`` holds each measured curve's anchors (``collective_fit``: octave
medians of Vidur's kernel times, non-decreasing) and which curve each catalog device runs on. A time is read off
the curve: between anchors by a monotone cubic (PCHIP, Fritsch-Carlson slopes) in log size and log time, which
never overshoots the anchors; below them the latency term (the first anchor's time); above them the bus bandwidth
of the last decade of anchors.

A question the measurements do not cover exactly is answered from the nearest curve of the same system, rescaled
(each rescaling named in the curve's ``source``):

- **another collective** on the same ranks (all-gather, reduce-scatter, all-to-all, broadcast): the all-reduce
  curve's latency term, and its time above that scaled by the ratio of nccl-tests' algorithm factors
  ((n-1)/n against 2(n-1)/n: half the all-reduce's bytes on the wire);
- **another number of ranks** in a node: the latency term scaled as NCCL's ring latency (a base plus one step per
  ring hop, ``interconnects.json``'s LL constants), the rest by the algorithm factors' ratio (the bus bandwidth of
  a ring is the same for any number of ranks);
- **another device** of the same kind of fabric: a ``bandwidth_scale`` (line-rate ratio) on the time above the
  latency term, and the device's own curves otherwise (H200 runs DGX H100's; B200 DGX H100's at twice the NVLink
  bandwidth; PCIe boxes the PCIe ring of Vidur's 4-GPU A100 pairs, scaled by their PCIe generation).

Anything else (a device of the catalog without a mapping, H100 all-reduce across nodes, which Vidur did not time)
returns None, and the caller falls back on NCCL's own latency model (``collectives.collective_s``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.parallel.collectives import ALL_REDUCE, SEND_RECV, bus_factor

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "measured_collectives.json"
ALL_TO_ALL = "all_to_all"  # not an nccl-tests kind of collectives.py: its bus factor is (n-1)/n, as all-gather's


@dataclass(frozen=True)
class Curve:
    """One collective's time against its size: anchors (bytes, seconds), and what it was measured as."""

    sizes: tuple[float, ...]
    times_s: tuple[float, ...]
    source: str = ""

    @classmethod
    def of(cls, sizes: Any, times_s: Any, source: str = "") -> Curve:
        sizes, times = np.asarray(sizes, dtype=float), np.asarray(times_s, dtype=float)
        if sizes.size < 2 or np.any(np.diff(sizes) <= 0):
            raise ValueError(f"a curve needs two or more increasing sizes, got {sizes.tolist()!r}")
        return cls(tuple(sizes.tolist()), tuple(np.maximum.accumulate(times).tolist()), source)

    @property
    def latency_s(self) -> float:
        """The latency term: what a message at or below the first anchor costs."""
        return self.times_s[0]

    @property
    def seconds_per_byte(self) -> float:
        """What one more byte costs a large message: the least-squares slope of the anchors of the last decade of
        sizes (two neighbouring anchors alone scatter by tens of percent)."""
        s, t = np.asarray(self.sizes), np.asarray(self.times_s)
        top = s >= s[-1] / 10
        if top.sum() < 2:
            top[-2:] = True
        slope = np.polyfit(s[top], t[top], 1)[0]
        return max(float(slope), 0.0)

    def busbw_gb_per_s(self, kind: str, ranks: int) -> float:
        """The bus bandwidth of a large message (nccl-tests' busbw), for a curve of ``kind`` on ``ranks``."""
        slope = self.seconds_per_byte
        return bus_factor(kind, ranks) / slope / 1e9 if slope > 0 else float("inf")

    def seconds(self, size_bytes: float) -> float:
        if size_bytes <= 0:
            return 0.0
        s, t = self.sizes, self.times_s
        if size_bytes <= s[0]:
            return t[0]
        if size_bytes >= s[-1]:
            return t[-1] + (size_bytes - s[-1]) * self.seconds_per_byte
        return float(np.exp(_pchip(np.log(s), np.log(t), np.log(size_bytes))))

    def scaled(self, latency: float, above: float, why: str) -> Curve:
        """This curve with its latency term times ``latency`` and the time above it times ``above``."""
        if latency == 1.0 and above == 1.0:
            return self
        t0 = self.times_s[0]
        times = tuple(t0 * latency + (t - t0) * above for t in self.times_s)
        return replace(self, times_s=times, source=f"{self.source}; {why}")


@functools.lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    return json.loads(DATA_FILE.read_text())


def covered(device: Any) -> dict[str, Any] | None:
    """The measured system a device runs on ({"system", "bandwidth_scale", "pcie_ring", "p2p_same_node", "why"}),
    or None."""
    name = getattr(device, "parent", None) or getattr(device, "name", device)
    return _data()["devices"].get(name)


def curve(kind: str, ranks: int, device: Any, ranks_per_node: int = 8) -> Curve | None:
    """The time curve of one ``kind`` of collective on ``ranks`` GPUs of ``device`` (ranks packed in nodes of
    ``ranks_per_node``), from the measurements; None where they do not cover it."""
    entry = covered(device)
    if entry is None or ranks < 2:
        return None
    base_kind = SEND_RECV if kind == SEND_RECV else ALL_REDUCE
    per_node = min(ranks, ranks_per_node)
    measured = _data()["curves"][entry["system"]].get(base_kind, {})
    picked = _nearest(measured, ranks, per_node, entry.get("pcie_ring"), base_kind == SEND_RECV)
    if picked is None or (picked == (2, 2) and base_kind == SEND_RECV and not entry.get("p2p_same_node", True)):
        return None
    n0, p0 = picked
    anchors = measured[f"{n0}x{p0}"]
    sizes = np.asarray(anchors["size_bytes"], dtype=float)
    out = Curve.of(sizes, np.asarray(anchors["time_us"]) * 1e-6, f"Vidur {entry['system']} {base_kind} {n0}x{p0}")
    if base_kind == SEND_RECV:
        return out.scaled(1.0, 1.0 / entry.get("bandwidth_scale", 1.0), f"bandwidth x{entry.get('bandwidth_scale')}")
    latency = _ring_latency(device, ranks) / _ring_latency(device, n0) if per_node == ranks else 1.0
    above = _factor(kind, ranks) / _factor(ALL_REDUCE, n0) / entry.get("bandwidth_scale", 1.0)
    why = f"as {kind} on {ranks} ranks" if (kind, ranks) != (ALL_REDUCE, n0) else ""
    if entry.get("bandwidth_scale", 1.0) != 1.0:
        why = f"{why}, bandwidth x{entry['bandwidth_scale']:g}".lstrip(", ")
    return out.scaled(latency, above, why)


def seconds(kind: str, size_bytes: float, ranks: int, device: Any, ranks_per_node: int = 8) -> float | None:
    """Seconds of one collective from the measurements (None: not covered; use ``collectives.collective_s``)."""
    c = curve(kind, ranks, device, ranks_per_node)
    return None if c is None else c.seconds(size_bytes)


def _pchip(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """Monotone piecewise-cubic Hermite interpolation at ``at`` (Fritsch and Carlson's slopes, as scipy's
    PchipInterpolator: where neighbouring secants differ in sign or one is flat the slope is 0, else their weighted
    harmonic mean; one-sided three-point slopes at the ends)."""
    h, delta = np.diff(x), np.diff(y) / np.diff(x)
    d = np.zeros_like(y)
    for k in range(1, len(x) - 1):
        if delta[k - 1] * delta[k] > 0:
            w1, w2 = 2 * h[k] + h[k - 1], h[k] + 2 * h[k - 1]
            d[k] = (w1 + w2) / (w1 / delta[k - 1] + w2 / delta[k])
    for end, (k, j) in ((0, (0, 1)), (-1, (-1, -2))):
        if len(x) == 2:
            d[end] = delta[0]
            continue
        slope = ((2 * h[k] + h[j]) * delta[k] - h[k] * delta[j]) / (h[k] + h[j])
        if np.sign(slope) != np.sign(delta[k]):
            slope = 0.0
        elif np.sign(delta[k]) != np.sign(delta[j]) and abs(slope) > abs(3 * delta[k]):
            slope = 3 * delta[k]
        d[end] = slope
    i = int(np.clip(np.searchsorted(x, at) - 1, 0, len(x) - 2))
    t = (at - x[i]) / h[i]
    h00, h10, h01, h11 = 2 * t**3 - 3 * t**2 + 1, t**3 - 2 * t**2 + t, -2 * t**3 + 3 * t**2, t**3 - t**2
    return float(h00 * y[i] + h10 * h[i] * d[i] + h01 * y[i + 1] + h11 * h[i] * d[i + 1])


def _nearest(measured: dict, ranks: int, per_node: int, pcie_ring: str | None, p2p: bool) -> tuple[int, int] | None:
    """The measured (ranks, per node) closest to the question: a PCIe box reads the PCIe ring (``pcie_ring``) at
    any size of group in a node; a send/recv reads the same-node or the cross-node pair."""
    keys = [tuple(int(x) for x in k.split("x")) for k in measured]
    if p2p:
        want = (2, 2) if per_node >= 2 else (2, 1)
        return want if want in keys else None
    if pcie_ring and per_node == ranks:
        return tuple(int(x) for x in pcie_ring.split("x"))  # type: ignore[return-value]
    same_layout = [k for k in keys if (k[1] == k[0]) == (per_node == ranks) and (per_node == ranks or k[1] == per_node)]
    if not same_layout:
        return None
    return min(same_layout, key=lambda k: (abs(k[0] - ranks), -k[0]))


def _factor(kind: str, ranks: int) -> float:
    return (ranks - 1) / ranks if kind == ALL_TO_ALL else bus_factor(kind, ranks)


def _ring_latency(device: Any, ranks: int) -> float:
    """NCCL's LL ring latency on the device's intra-node link: base + 2(n-1) steps (its tuning constants)."""
    from perfpredict.parallel.interconnect import interconnect_for

    link = interconnect_for(device).intra.latency_us
    return link["base_ll"] + 2 * (ranks - 1) * link["step_ll"]
