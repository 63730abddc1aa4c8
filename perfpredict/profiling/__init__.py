"""Measurement: the profiler hook (Monitor), the model zoo and the dataset collector.

Nothing heavy is imported here; ``from perfpredict.profiling import Monitor`` loads torch on first use.
"""

from __future__ import annotations

from perfpredict.core.lazy import lazy_exports

_LAZY = {
    "perfpredict.profiling.monitor": ("Monitor", "measure", "measure_compiled"),
    "perfpredict.profiling.measurement": ("Measurement", "Environment"),
    "perfpredict.profiling.zoo": ("ModelSpec", "list_families", "sample_specs"),
    "perfpredict.profiling.dataset": ("load_dataset",),
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY)
