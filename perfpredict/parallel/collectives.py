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

Across nodes an all-reduce has two more ways (:func:`algorithm_times`), and the fastest is taken, as NCCL's tuner
takes it: NCCL's **tree** (a chain inside each node, a double binary tree between nodes: latency
``base + 2((g-1) intra + log2(nodes) inter)``, bandwidth 0.92 of the ring's bus bandwidth at half the algorithm
bandwidth, ``tuning.cc``), which wins on small messages over many nodes; and the **hierarchical** decomposition
(:func:`hierarchical_parts`): a reduce-scatter inside each node, an all-reduce between nodes over 1/g of the data
on each GPU's own NIC, an all-gather inside the node, each part costed apart with its own latency, as NCCL's
NVLS-tree and PyTorch's HSDP run it. The flat ring pipelines its chunks through both fabrics at once, so at large
messages it stays the fastest: its bus bandwidth is min(NVLink, the node's NICs pooled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
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
TREE_BANDWIDTH_SHARE = 0.92  # tuning.cc: a tree all-reduce's busBw *= .92 (and /3.8 more with LL)
TREE_LL_SHARE = 1 / 3.8
RING, TREE, HIERARCHICAL = "ring", "tree", "hierarchical"


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
    """Seconds for one call on ``ranks`` ranks whose links give ``link``: the fastest algorithm and protocol."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    return min(algorithm_times(kind, size_bytes, ranks, link).values())


def algorithm_of(kind: str, size_bytes: float, ranks: int, link: GroupLink) -> str:
    """The algorithm :func:`collective_s` takes: "ring", "tree" or "hierarchical"."""
    times = algorithm_times(kind, size_bytes, ranks, link)
    return min(times, key=times.get)


def algorithm_times(kind: str, size_bytes: float, ranks: int, link: GroupLink) -> dict[str, float]:
    """Seconds per algorithm: the ring always; across nodes, an all-reduce's tree and hierarchical ones too."""
    out = {RING: ring_s(kind, size_bytes, ranks, link)}
    if kind == ALL_REDUCE and link.nodes > 1 and ranks > link.nodes:
        out[TREE] = tree_s(size_bytes, ranks, link)
        out[HIERARCHICAL] = sum(hierarchical_parts(kind, size_bytes, ranks, link))
    elif kind == ALL_REDUCE and link.nodes > 1:
        out[TREE] = tree_s(size_bytes, ranks, link)
    return out


def tree_s(size_bytes: float, ranks: int, link: GroupLink) -> float:
    """NCCL's tree all-reduce across ``link.nodes`` nodes (``tuning.cc``): latency ``base + 2((g-1) x intra hop +
    log2(nodes) x inter hop)``, algorithm bandwidth half the bus bandwidth times 0.92 (LL: /3.8 more)."""
    per_node = max(ranks // max(link.nodes, 1), 1)
    hops = int(math.log2(link.nodes)) if link.nodes > 1 else 0
    best = float("inf")
    for proto, share in (("ll", TREE_BANDWIDTH_SHARE * TREE_LL_SHARE), ("simple", TREE_BANDWIDTH_SHARE)):
        latency_us = link.base_us(proto, tree=True) + 2 * (
            (per_node - 1) * link.step_us(proto, inter=False, tree=True) + hops * link.step_us(proto, True, tree=True)
        )
        best = min(best, latency_us * 1e-6 + 2 * size_bytes / (link.bus_bandwidth_gb_per_s * 1e9 * share))
    return best


def hierarchical_parts(kind: str, size_bytes: float, ranks: int, link: GroupLink) -> tuple[float, float]:
    """(intra-node seconds, inter-node seconds) of a collective split by fabric, g of its ranks per node over
    n nodes: an all-reduce is a reduce-scatter of S inside the node, an all-reduce of S/g between nodes on each
    GPU's NIC and an all-gather of S inside the node; an all-gather gathers S/g between nodes, then S inside the
    node; a reduce-scatter the reverse. Inside one node it is all intra-node."""
    nodes = max(link.nodes, 1)
    if nodes == 1 or ranks <= nodes:
        return (
            (ring_s(kind, size_bytes, ranks, link), 0.0) if nodes == 1 else (0.0, ring_s(kind, size_bytes, ranks, link))
        )
    per_node = ranks // nodes
    inside = replace(link, bus_bandwidth_gb_per_s=link.intra_bus_gb_per_s, nodes=1)
    between = replace(link, bus_bandwidth_gb_per_s=link.nic_gb_per_s or link.bus_bandwidth_gb_per_s)
    if kind == ALL_REDUCE:
        intra = ring_s(REDUCE_SCATTER, size_bytes, per_node, inside) + ring_s(ALL_GATHER, size_bytes, per_node, inside)
        return intra, ring_s(ALL_REDUCE, size_bytes / per_node, nodes, between)
    if kind in (ALL_GATHER, REDUCE_SCATTER):
        return ring_s(kind, size_bytes, per_node, inside), ring_s(kind, size_bytes / per_node, nodes, between)
    return 0.0, ring_s(kind, size_bytes, ranks, link)


def ring_s(kind: str, size_bytes: float, ranks: int, link: GroupLink) -> float:
    """NCCL's ring: the faster of its LL and Simple protocols (module docstring)."""
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
