"""Where the time goes, in totals a reader can act on: per op kind, and per repeated block (``12 x encoder.layer``).

The per-op table lists single ops; in a 300-op model the top 20 may cover a fifth of the time, the rest spread
over hundreds of small launch-bound rows. These totals are taken over every op of the graph (not the listed top
ones). A repeated block is a module path with an integer segment (``model.layers.7.mlp.up_proj``): the blocks
``model.layers.*`` are summed over their repeats, and split by the module under them (``mlp``, ``self_attn``).

Every share is of the latency the rows belong to (:func:`of_latency`), so the op-kind rows plus the report's
``outside_ops_ms`` line (host time the device does not hide, for the two-timeline predictor) add up to the latency.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from perfpredict.core.report import BlockShare, OpContribution, TimeShare

# dynamo's prefix for the traced module or its first argument: L['self'].encoder..., L['args'][0].model...
_ROOT = re.compile(r"^L\[[^\]]*\](\[\d+\])?\.?")


def by_kind(rows: Sequence[OpContribution], latency_ms: float | None = None) -> tuple[TimeShare, ...]:
    """Time, FLOPs and bytes per canonical op kind, largest time first; shares of ``latency_ms`` (None: of the
    rows' sum)."""
    total = latency_ms or sum(r.time_ms for r in rows) or 1.0
    times: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    flops: dict[str, int] = defaultdict(int)
    moved: dict[str, int] = defaultdict(int)
    for r in rows:
        times[r.op] += r.time_ms
        counts[r.op] += 1
        flops[r.op] += r.flops
        moved[r.op] += r.bytes_moved
    return tuple(
        sorted(
            (TimeShare(k, t, t / total, counts[k], flops[k], moved[k]) for k, t in times.items()),
            key=lambda s: -s.time_ms,
        )
    )


def compute_share(rows: Sequence[OpContribution]) -> float:
    """The share of the rows' time in compute-bound ops (``bound == "compute"``): what decides whether a step is
    compute- or memory-bound (``core.report.step_bound``)."""
    total = sum(r.time_ms for r in rows)
    return sum(r.time_ms for r in rows if r.bound == "compute") / total if total > 0 else 0.0


def repeated_blocks(
    rows: Sequence[OpContribution], top: int = 5, latency_ms: float | None = None
) -> tuple[BlockShare, ...]:
    """The repeated blocks (at least two repeats) by total time, each split by the module under it; a block's share
    is of ``latency_ms`` (None: of the rows' sum), a part's of its block."""
    total = latency_ms or sum(r.time_ms for r in rows) or 1.0
    blocks: dict[str, dict] = {}
    for r in rows:
        found = _split(r.module_path)
        if found is None:
            continue
        prefix, index, part = found
        b = blocks.setdefault(
            prefix, {"indices": set(), "time": 0.0, "parts": defaultdict(float), "counts": defaultdict(int)}
        )
        b["indices"].add(index)
        b["time"] += r.time_ms
        b["parts"][part] += r.time_ms
        b["counts"][part] += 1
    out = []
    for prefix, b in blocks.items():
        if len(b["indices"]) < 2:
            continue
        parts = tuple(
            sorted(
                (TimeShare(p, t, t / b["time"] if b["time"] else 0.0, b["counts"][p]) for p, t in b["parts"].items()),
                key=lambda s: -s.time_ms,
            )
        )
        out.append(BlockShare(f"{prefix}.*", len(b["indices"]), b["time"], b["time"] / total, parts))
    return tuple(sorted(out, key=lambda s: -s.time_ms)[:top])


def _split(path: str) -> tuple[str, int, str] | None:
    """(block prefix, repeat index, the module under the block) of a module path, or None without an index."""
    segments = _ROOT.sub("", path).split(".")
    for i, seg in enumerate(segments):
        if seg.isdigit() and i > 0:
            rest = segments[i + 1 :]
            return ".".join(segments[:i]), int(seg), rest[0] if rest else "(the block itself)"
    return None


def of_latency(
    per_op: Sequence[OpContribution],
    kinds: Sequence[TimeShare],
    blocks: Sequence[BlockShare],
    latency_ms: float,
) -> tuple[tuple[OpContribution, ...], tuple[TimeShare, ...], tuple[BlockShare, ...], float]:
    """The rows with every share taken of ``latency_ms``, and what the latency holds beyond the summed op time
    (``latency - sum(kinds)``: host time not hidden under device time, for the two-timeline predictor)."""
    total = latency_ms or 1.0
    ops = tuple(dataclasses.replace(o, share=o.time_ms / total) for o in per_op)
    kinds = tuple(dataclasses.replace(k, share=k.time_ms / total) for k in kinds)
    blocks = tuple(dataclasses.replace(b, share=b.time_ms / total) for b in blocks)
    return ops, kinds, blocks, latency_ms - sum(k.time_ms for k in kinds)


@dataclass(frozen=True)
class OpGroup:
    """Identical ops (same kind, target, time, FLOPs and bytes; module paths equal up to the repeat index)."""

    first: OpContribution
    count: int
    module_path: str  # with the repeat index as ``*`` where the group spans repeats
    time_ms: float  # summed over the group
    share: float  # summed over the group


def group_ops(rows: Sequence[OpContribution]) -> list[OpGroup]:
    """Identical rows merged into one (``12 x transformer.h.*.mlp.c_fc``), by summed time, largest first."""
    groups: dict[tuple, list[OpContribution]] = {}
    for r in rows:
        path = _INDEX.sub("*", _ROOT.sub("", r.module_path))
        key = (r.op, r.target, path, f"{r.time_ms:.4g}", r.flops, r.bytes_moved, r.bound)
        groups.setdefault(key, []).append(r)
    out = []
    for key, members in groups.items():
        path = members[0].module_path if len(members) == 1 else key[2]
        out.append(
            OpGroup(members[0], len(members), path, sum(m.time_ms for m in members), sum(m.share for m in members))
        )
    return sorted(out, key=lambda g: -g.time_ms)


_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")
