"""One progress display for long work (collecting rows, building features, training): a ``rich`` bar on stderr
with the count, rows per minute and an ETA.

Silent, and nothing of rich even imported, unless stderr is a terminal: a log file, a pipe, ``nohup`` and the
tests see nothing, and under ``--json`` the caller passes ``enabled=False`` so that only the answer is printed.
The counts are kept either way (``count``, ``counted``, ``rows_per_minute``), so a caller's summary can use them.

    with Progress("collect", total=len(plan), unit="rows") as bar:
        for spec in plan:
            ...
            bar.advance()                 # a measured row: counts toward rows per minute
            bar.advance(counted=False)    # a skipped one: moves the bar only

    for row in Progress("features", total=len(rows)).track(rows):  # a plain loop, one step per item
        ...

A learner's epoch loops sit deep inside ``fit``; they show a bar only inside ``with shown_in_fits():``, which the
training and adaptation commands enter, so a library user fitting in a terminal gets no bars unless asked.

The rate and the ETA are over the whole run, not a recent window: a row takes seconds to minutes, so a window
of a few rows would swing. The ETA is the rows left at that rate, capped by ``budget_s`` where the run has one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any, TypeVar

T = TypeVar("T")
_IN_FITS: ContextVar[bool] = ContextVar("perfpredict_progress_in_fits", default=False)


@contextmanager
def shown_in_fits(shown: bool = True) -> Iterator[None]:
    """Inside this block, learners' epoch loops show their bars (:func:`in_fits`)."""
    token = _IN_FITS.set(shown)
    try:
        yield
    finally:
        _IN_FITS.reset(token)


def in_fits() -> bool:
    """Whether a learner's epoch loop should show a bar here (off unless :func:`shown_in_fits` says so)."""
    return _IN_FITS.get()


class Progress:
    """Counts work done and, on a terminal, shows it (see the module docstring)."""

    def __init__(
        self,
        description: str,
        total: int | None = None,
        *,
        unit: str = "rows",
        enabled: bool = True,
        budget_s: float | None = None,
        stream: IO[str] | None = None,
    ) -> None:
        self.description = description
        self.total = total
        self.unit = unit
        self.budget_s = budget_s
        self.count = 0  # every step, skipped ones too (the bar's position)
        self.counted = 0  # steps that did work (the rate's numerator)
        self.t0 = time.monotonic()
        self._stream = sys.stderr if stream is None else stream
        self.shown = enabled and _is_terminal(self._stream)
        self._live: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        self.t0 = time.monotonic()
        if self.shown:
            self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._live = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn() if self.total is not None else TextColumn("{task.completed}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=Console(file=self._stream),
            transient=False,
        )
        self._task = self._live.add_task(self.description, total=self.total, rate="", eta="")
        self._live.start()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    @property
    def rows_per_minute(self) -> float:
        elapsed = self.elapsed_s
        return 60.0 * self.counted / elapsed if elapsed > 0 else 0.0

    def eta_s(self) -> float | None:
        """Seconds left at today's rate (capped by the budget); None before the first counted step."""
        left = None
        if self.total is not None and self.counted:
            left = max(0, self.total - self.count) * self.elapsed_s / self.counted
        if self.budget_s is not None:
            budget_left = max(0.0, self.budget_s - self.elapsed_s)
            left = budget_left if left is None else min(left, budget_left)
        return left

    def advance(self, steps: int = 1, *, counted: bool = True, note: str | None = None) -> None:
        """``steps`` more done; ``counted=False`` for skipped work; ``note`` replaces the description's detail."""
        self.count += steps
        if counted:
            self.counted += steps
        if self._live is not None:
            eta = self.eta_s()
            description = f"{self.description} ({note})" if note else self.description
            self._live.update(
                self._task,
                advance=steps,
                description=description,
                rate=f"{self.rows_per_minute:.1f} {self.unit}/min",
                eta="" if eta is None else f"ETA {_clock(eta)}",
            )

    def track(self, items: Iterable[T]) -> Iterator[T]:
        """``items``, one step each, shown while they are drawn (``rich.progress.track``'s shape)."""
        with self:
            for item in items:
                yield item
                self.advance()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or a file-like stream without isatty
        return False


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
