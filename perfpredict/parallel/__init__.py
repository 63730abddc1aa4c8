"""Multi-GPU prediction: data, tensor, pipeline and sequence parallelism, ZeRO and FSDP (issue 31).

``parallel_report(graph, {"dp": 2, "tp": 4, "pp": 2, "microbatches": 8}, device="H100-SXM")`` returns a
:class:`ParallelReport`; ``render_parallel_text(report)`` shows it. Nothing heavy is imported here.
"""

from __future__ import annotations

from perfpredict.core.lazy import lazy_exports

_LAZY = {
    "Interconnect": "perfpredict.parallel.interconnect",
    "ParallelPlan": "perfpredict.parallel.plan",
    "ParallelReport": "perfpredict.parallel.report",
    "interconnect_for": "perfpredict.parallel.interconnect",
    "parallel_report": "perfpredict.parallel.api",
    "parse_plan": "perfpredict.parallel.plan",
    "render_parallel_text": "perfpredict.parallel.render",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
