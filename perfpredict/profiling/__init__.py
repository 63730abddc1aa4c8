"""Measurement: the profiler hook (Monitor), the model zoo and the dataset collector.

Nothing heavy is imported here; ``from perfpredict.profiling import Monitor`` loads torch on first use.
"""

from __future__ import annotations

from perfpredict.core.lazy import lazy_exports

_LAZY = {
    "Monitor": "perfpredict.profiling.monitor",
    "measure": "perfpredict.profiling.monitor",
    "measure_compiled": "perfpredict.profiling.monitor",
    "Measurement": "perfpredict.profiling.measurement",
    "Environment": "perfpredict.profiling.measurement",
    "ModelSpec": "perfpredict.profiling.zoo",
    "list_families": "perfpredict.profiling.zoo",
    "sample_specs": "perfpredict.profiling.zoo",
    "load_dataset": "perfpredict.profiling.dataset",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
