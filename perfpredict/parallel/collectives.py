"""Collectives and their time on a link, with nccl-tests' conventions (NVIDIA/nccl-tests doc/PERFORMANCE.md).

``size_bytes`` is nccl-tests' S: the whole buffer of an all-reduce, the gathered output of an all-gather, the
input of a reduce-scatter, the message of a broadcast or a send. nccl-tests defines a bus bandwidth that is the
same for any number of ranks n: ``busbw = algbw * factor`` with factor 2(n-1)/n for all-reduce, (n-1)/n for
all-gather and reduce-scatter, 1 for broadcast, reduce and send/receive. So a collective of S bytes on a group
whose links sustain a bus bandwidth B takes ``S * factor / B``, plus a latency term.

The latency term is NCCL's own model (``src/graph/tuning.cc``): a base cost per call plus a cost per ring step,
2(n-1) steps for an all-reduce and n-1 for the others, for its low-latency LL protocol and its Simple one. LL
moves 8-byte words that carry 4 bytes of data and a 4-byte flag, so it runs at half the bandwidth; NCCL picks
the faster protocol for each size, and so does :func:`collective_s`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfpredict.parallel.interconnect import GroupLink

ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
BROADCAST = "broadcast"
REDUCE = "reduce"
SEND_RECV = "send_recv"
KINDS = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, REDUCE, SEND_RECV)
LL_BANDWIDTH_SHARE = 0.5  # LL: 4 bytes of data per 8-byte store


@dataclass(frozen=True)
class Collective:
    """One collective of one rank's step. ``node`` is the op of the rank's graph it belongs to (the op whose
    output it sends, or whose input it gathers; -1: none); ``hidden`` marks one that its framework overlaps by
    construction (sequence parallelism's backward re-gather)."""

    kind: str
    size_bytes: int
    group: str  # "tp", "dp" or "pp"
    phase: str  # "forward", "backward" or "step"
    node: int = -1
    hidden: bool = False
    what: str = ""


def bus_factor(kind: str, ranks: int) -> float:
    """nccl-tests' algbw -> busbw factor."""
    if ranks <= 1:
        return 0.0
    if kind == ALL_REDUCE:
        return 2 * (ranks - 1) / ranks
    if kind in (ALL_GATHER, REDUCE_SCATTER):
        return (ranks - 1) / ranks
    return 1.0


def ring_steps(kind: str, ranks: int) -> int:
    """Ring steps of one call: 2(n-1) for an all-reduce, n-1 for the others, 1 for a send."""
    if ranks <= 1:
        return 0
    if kind == SEND_RECV:
        return 1
    return 2 * (ranks - 1) if kind == ALL_REDUCE else ranks - 1


def collective_s(kind: str, size_bytes: float, ranks: int, link: GroupLink) -> float:
    """Seconds for one call on ``ranks`` ranks whose links give ``link``: the faster of NCCL's two protocols."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    steps = ring_steps(kind, ranks)
    inter = min(steps, link.inter_steps(kind))
    wire_s = size_bytes * bus_factor(kind, ranks) / (link.bus_bandwidth_gb_per_s * 1e9)
    best = float("inf")
    for proto, share in (("ll", LL_BANDWIDTH_SHARE), ("simple", 1.0)):
        latency_us = (
            link.base_us(proto)
            + (steps - inter) * link.step_us(proto, inter=False)
            + inter * link.step_us(proto, inter=True)
        )
        best = min(best, latency_us * 1e-6 + wire_s / share)
    return best


def bus_bandwidth_gb_per_s(kind: str, size_bytes: float, ranks: int, link: GroupLink) -> float:
    """The busbw nccl-tests would print for this call: algbw (S / t) times the bus factor."""
    seconds = collective_s(kind, size_bytes, ranks, link)
    return size_bytes / seconds * bus_factor(kind, ranks) / 1e9 if seconds else 0.0
