"""Shards: N disjoint parts of a collection plan whose union is the plan, one per worker (SLURM task, Ray actor).

    perfpredict collect --device cuda --out /shared/data/v3/h100 --shard 3/8

A batch sweep stays whole: every row of one (architecture, phase, seq, dtype) group goes to the same shard, because
an OOM or too-slow row skips the larger batches of its group (``collect.Skips``) and the graph-feature cache
extrapolates within a group; split across workers, both would be lost.

Groups are dealt round-robin in the order of a stable hash (SHA-256 of the group key), so every worker derives the
same assignment from the plan alone, on any host and whatever order it sees the plan in, and shards differ by at
most one group. A hash alone (hash mod N) would leave shards a few groups apart; dealing in plan order would hand
one family to every second shard when the plan alternates two families. Within its shard a worker keeps the plan's
order (a round-robin over families), so a budget cut still spans every family on every worker.

The assignment depends on the plan's groups and N; change either between runs and groups move. That is safe:
resume skips a key found anywhere in the folder, part folders included.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from perfpredict.core.errors import InvalidInputError

if TYPE_CHECKING:
    from perfpredict.profiling.zoo import ModelSpec


def check_shard(index: int, count: int) -> None:
    if not (isinstance(index, int) and isinstance(count, int) and count >= 1 and 0 <= index < count):
        raise InvalidInputError(
            f"shard {index!r}/{count!r}: need N >= 1 and 0 <= I < N (I counts from 0, as SLURM's --array=0-<N-1> does)"
        )


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` (``--shard 3/8``) as ``(3, 8)``."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if match is None:
        raise InvalidInputError(f"--shard {text!r} is not I/N (for example 0/8; I runs from 0 to N-1)")
    index, count = int(match[1]), int(match[2])
    check_shard(index, count)
    return index, count


def _digest(group: str) -> str:
    return hashlib.sha256(group.encode()).hexdigest()


def assign(groups: Iterable[str], count: int) -> dict[str, int]:
    """The shard of each group: dealt round-robin in hash order."""
    ordered = sorted(set(groups), key=lambda g: (_digest(g), g))
    return {g: i % count for i, g in enumerate(ordered)}


def select(specs: Sequence[ModelSpec], index: int, count: int) -> list[ModelSpec]:
    """The specs of shard ``index`` of ``count``, in plan order (all of them when ``count`` is 1)."""
    check_shard(index, count)
    if count == 1:
        return list(specs)
    owner = assign((s.group_key() for s in specs), count)
    return [s for s in specs if owner[s.group_key()] == index]
