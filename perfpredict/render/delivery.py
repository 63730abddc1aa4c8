"""Where a finished report goes: ``last_report()``, a user callback or file, and one log line.

Every frontend (the torch.compile backend, the Relax pass, the CLI's API calls) delivers through here, so the
three channels behave the same everywhere.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Union

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.units import GIB

if TYPE_CHECKING:
    from perfpredict.core.report import PerfReport

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

ReportTarget = Union[str, "os.PathLike[str]", Callable[["PerfReport"], object], None]
_LAST: list[PerfReport] = []


def last_report() -> PerfReport | None:
    """The most recent report any frontend or ``perfpredict.predict`` produced in this process; None before the
    first one, and after a prediction that failed."""
    return _LAST[-1] if _LAST else None


def forget() -> None:
    """Clear the last report: called as a prediction starts, so that one that fails leaves ``last_report()``
    None rather than the previous model's report."""
    _LAST.clear()


def record(report: PerfReport) -> None:
    """Make ``report`` the last one (every finished prediction, delivered or not)."""
    _LAST[:] = [report]


def deliver(report: PerfReport, target: ReportTarget = None) -> None:
    """Record ``report`` as the last one, hand it to ``target`` (callable or path), and log one line."""
    record(report)
    if callable(target):
        target(report)
    elif target is not None:
        if not isinstance(target, (str, os.PathLike)):
            raise InvalidInputError(
                f"report target {target!r} is neither a path nor a callable; pass e.g. 'report.html' or print"
            )
        if not hasattr(report, "latency_ms") and not str(target).lower().endswith(".json"):  # a ParallelReport
            raise InvalidInputError(
                f"a multi-GPU report is written as JSON only, not to {str(target)!r}: pass e.g. 'report.json'"
            )
        from perfpredict.render.html import write_report

        write_report(report, target)
    if not hasattr(report, "latency_ms"):  # a ParallelReport (the parallel option)
        logger.info("perfpredict: %s on %d x %s: step %.3f ms", report.model_name, report.world_size, report.device,
                    report.step_ms)  # fmt: skip
        return
    logger.info(
        "perfpredict: %s on %s (%s, batch %d): %.3f ms [%.3f, %.3f], peak memory %.2f GiB, %s predictor",
        report.model_name or "model",
        report.device,
        report.phase,
        report.batch_size,
        report.latency_ms.value,
        report.latency_ms.low,
        report.latency_ms.high,
        report.peak_memory_bytes.value / GIB,
        report.predictor,
    )


def show(report: PerfReport | None = None, top_ops: int | None = 10) -> None:
    """Print ``report`` (by default the last one, :func:`perfpredict.last_report`) as the terminal tables."""
    from perfpredict.render.text import print_report

    report = report if report is not None else last_report()
    if report is None:
        print("no report yet: call perfpredict.predict(...) or run a model compiled with backend='perfpredict'")
        return
    print_report(report, top_ops=top_ops)
