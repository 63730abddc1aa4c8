"""Multi-GPU prediction: data, tensor, pipeline and sequence parallelism, ZeRO and FSDP (issue 31).

``parallel_report(graph, {"dp": 2, "tp": 4, "pp": 2, "microbatches": 8}, device="H100-SXM")`` returns a
:class:`ParallelReport`; ``render_parallel_text(report)`` shows it. Nothing heavy is imported here.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Interconnect",
    "ParallelPlan",
    "ParallelReport",
    "interconnect_for",
    "parallel_report",
    "parse_plan",
    "render_parallel_text",
]


def __getattr__(name: str) -> Any:
    if name in ("ParallelPlan", "parse_plan"):
        from perfpredict.parallel import plan

        return getattr(plan, name)
    if name == "ParallelReport":
        from perfpredict.parallel.report import ParallelReport

        return ParallelReport
    if name == "parallel_report":
        from perfpredict.parallel.api import parallel_report

        return parallel_report
    if name in ("Interconnect", "interconnect_for"):
        from perfpredict.parallel import interconnect

        return getattr(interconnect, name)
    if name == "render_parallel_text":
        from perfpredict.parallel.render import render_parallel_text

        return render_parallel_text
    raise AttributeError(f"module 'perfpredict.parallel' has no attribute {name!r}")
