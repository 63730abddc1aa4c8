"""perfpredict: predict a model's latency, memory, energy, carbon, cost and MIG fit at compile time.

``import perfpredict`` stays light: torch and every optional dependency load only when a function needs them.

    >>> model = torch.compile(model, backend="perfpredict", options={"device": "H100-SXM"})
    >>> model(x); perfpredict.show()  # the last report, as tables
    >>> perfpredict.predict(model, (x,), device="A100-40GB-SXM", phase="training")
"""

from __future__ import annotations

from perfpredict.core.lazy import lazy_exports

__version__ = "0.1.0"

# Public name -> module that defines it; resolved on first access (PEP 562).
_LAZY = {
    "predict": "perfpredict.api",
    "predict_many": "perfpredict.api",
    "predict_models": "perfpredict.nas.batch",
    "predict_generation": "perfpredict.llm.generation",
    "parallel_report": "perfpredict.parallel.api",
    "ParallelReport": "perfpredict.parallel.report",
    "featurize": "perfpredict.api",
    "report_for_graph": "perfpredict.pipeline",
    "ManyPredictions": "perfpredict.api",
    "last_report": "perfpredict.render.delivery",
    "show": "perfpredict.render.delivery",
    "render_text": "perfpredict.render.text",
    "PerfReport": "perfpredict.core.report",
    "Prediction": "perfpredict.core.report",
    "OpGraph": "perfpredict.core.graph",
    "OpNode": "perfpredict.core.graph",
    "Device": "perfpredict.hardware.devices",
    "get_device": "perfpredict.hardware.devices",
    "list_devices": "perfpredict.hardware.devices",
    "load_device_file": "perfpredict.hardware.devices",
    "register_predictor": "perfpredict.predictors.registry",
    "get_predictor": "perfpredict.predictors.registry",
    "list_predictors": "perfpredict.predictors.registry",
    "PerfPredictError": "perfpredict.core.errors",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
