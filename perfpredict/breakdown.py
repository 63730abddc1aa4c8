"""Where the time goes, in totals a reader can act on: per op kind, and per repeated block (``12 x encoder.layer``).

The per-op table lists single ops; in a 300-op model the top 20 may cover a fifth of the time, the rest spread
over hundreds of small launch-bound rows. These totals are taken over every op of the graph (not the listed top
ones). A repeated block is a module path with an integer segment (``model.layers.7.mlp.up_proj``): the blocks
``model.layers.*`` are summed over their repeats, and split by the module under them (``mlp``, ``self_attn``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from perfpredict.report import BlockShare, OpContribution, TimeShare

# dynamo's prefix for the traced module or its first argument: L['self'].encoder..., L['args'][0].model...
_ROOT = re.compile(r"^L\[[^\]]*\](\[\d+\])?\.?")


def by_kind(rows: Sequence[OpContribution]) -> tuple[TimeShare, ...]:
    """Time per canonical op kind, largest first."""
    total = sum(r.time_ms for r in rows) or 1.0
    times: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        times[r.op] += r.time_ms
        counts[r.op] += 1
    return tuple(sorted((TimeShare(k, t, t / total, counts[k]) for k, t in times.items()), key=lambda s: -s.time_ms))


def repeated_blocks(rows: Sequence[OpContribution], top: int = 5) -> tuple[BlockShare, ...]:
    """The repeated blocks (at least two repeats) by total time, each split by the module under it."""
    total = sum(r.time_ms for r in rows) or 1.0
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
