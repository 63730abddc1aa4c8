"""Rounds: a row's label is the median of several rounds' medians, the rounds interleaved with other rows.

Why. A row's own coefficient of variation sees only its timed window. The host and the GPU drift between windows
seconds or minutes apart (data/README.md, "Noise between timed windows"), and that drift, not the CV, is the
label's error. So protocol v3 measures each row in at least ``min_rounds`` rounds, with the other rows of its block
measured in between, takes the median of the round medians as the label, and records the rounds' spread:
``(max - min) / label`` of the round medians. A row whose spread exceeds ``max_spread`` (3%) is measured again, up
to ``max_rounds``.

:func:`interleave` runs that schedule over any items (model specs, single ops) and is resumable: rounds already in
the store count, so a collector killed mid-block picks up where it stopped.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from perfpredict.core.errors import InvalidInputError


@dataclass(frozen=True)
class RoundLabel:
    value: float  # median of the round medians
    round_medians: tuple[float, ...]
    spread: float  # (max - min) / value over the round medians; 0 for one round

    @property
    def rounds(self) -> int:
        return len(self.round_medians)


def label(round_medians: Sequence[float]) -> RoundLabel:
    """The label of a row from its rounds' medians."""
    values = [float(v) for v in round_medians if v is not None]
    if not values:
        raise InvalidInputError("a label needs at least one round median")
    value = statistics.median(values)
    spread = (max(values) - min(values)) / value if value > 0 and len(values) > 1 else 0.0
    return RoundLabel(value, tuple(values), spread)


@dataclass(frozen=True)
class RoundPolicy:
    """How many rounds a row gets: ``min_rounds``, more while its spread on ``metric`` exceeds ``max_spread``,
    never more than ``max_rounds``."""

    min_rounds: int = 3
    max_rounds: int = 5
    max_spread: float = 0.03
    metric: str = "device_ms"

    def __post_init__(self) -> None:
        if not 1 <= self.min_rounds <= self.max_rounds:
            raise InvalidInputError(
                f"rounds: need 1 <= min_rounds ({self.min_rounds}) <= max_rounds ({self.max_rounds})"
            )
        if not self.max_spread > 0:
            raise InvalidInputError(f"max_spread={self.max_spread!r} must be > 0")

    def wants_more(self, records: Sequence[dict[str, Any]]) -> bool:
        """True while the row needs another round (failed rounds end it: see :func:`failed`)."""
        if records and failed(records[-1]):
            return False
        values = [r[self.metric] for r in records if r.get(self.metric) is not None]
        if len(values) < self.min_rounds:
            return len(records) < self.max_rounds
        if len(records) >= self.max_rounds:
            return False
        return label(values).spread > self.max_spread


def failed(record: dict[str, Any]) -> bool:
    return record.get("status", "ok") != "ok"


def interleave(
    keys: Sequence[str],
    rounds: dict[str, list[dict[str, Any]]],
    measure: Callable[[str, list[dict[str, Any]]], dict[str, Any]],
    finish: Callable[[str, list[dict[str, Any]]], None],
    policy: RoundPolicy,
    *,
    block: int = 12,
    stop: Callable[[], bool] = lambda: False,
) -> bool:
    """Measure ``keys`` in blocks of ``block``: one round of every unfinished key of the block, then the next round,
    until the policy is satisfied for each; ``finish(key, records)`` closes a key.

    ``rounds`` holds the records already taken (resumed from the store) and gains the new ones; ``measure(key,
    records_so_far)`` takes one round (it is expected to store it durably itself). Returns False when ``stop()``
    said so before every key finished."""
    if block < 1:
        raise InvalidInputError(f"block={block!r} must be at least 1")
    for start in range(0, len(keys), block):
        pending = list(keys[start : start + block])
        for key in list(pending):  # rows resumed complete: close them at once
            if rounds.get(key) and not policy.wants_more(rounds[key]):
                finish(key, rounds[key])
                pending.remove(key)
        while pending:
            for key in list(pending):
                if stop():
                    return False
                rounds.setdefault(key, []).append(measure(key, rounds.get(key, [])))
            for key in list(pending):
                if not policy.wants_more(rounds[key]):
                    finish(key, rounds[key])
                    pending.remove(key)
    return True
