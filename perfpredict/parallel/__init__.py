"""Multi-GPU prediction: data, tensor, pipeline and sequence parallelism, ZeRO and FSDP (issue 31).

``parallel_report(graph, {"dp": 2, "tp": 4, "pp": 2, "microbatches": 8}, device="H100-SXM")`` returns a
:class:`ParallelReport`; ``render_parallel_text(report)`` shows it. Nothing heavy is imported here.
"""

from __future__ import annotations

from perfpredict.core.lazy import lazy_exports

_LAZY = {
    "perfpredict.parallel.interconnect": ("Interconnect", "interconnect_for"),
    "perfpredict.parallel.plan": ("ParallelPlan", "parse_plan"),
    "perfpredict.parallel.report": ("ParallelReport",),
    "perfpredict.parallel.api": ("parallel_report",),
    "perfpredict.parallel.render": ("render_parallel_text",),
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY)
