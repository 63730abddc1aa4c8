"""perfpredict: predict a model's latency, memory, energy, carbon, cost and MIG fit at compile time.

``import perfpredict`` stays light: torch and every optional dependency load only when a function needs them.

    >>> model = torch.compile(model, backend="perfpredict", options={"device": "H100-SXM"})
    >>> model(x); perfpredict.show()  # the last report, as tables
    >>> perfpredict.predict(model, (x,), device="A100-40GB-SXM", phase="training")
"""

from __future__ import annotations

from perfpredict.core.lazy import lazy_exports

__version__ = "0.1.0"

# Module -> the public names it defines; each is imported on first access (PEP 562).
_LAZY = {
    "perfpredict.api": ("predict", "predict_many", "featurize", "ManyPredictions"),
    "perfpredict.nas.batch": ("predict_models",),
    "perfpredict.llm.generation": ("predict_generation",),
    "perfpredict.llm.serving": ("predict_serving",),
    "perfpredict.llm.deploy": ("search_deployments",),
    "perfpredict.parallel.api": ("parallel_report",),
    "perfpredict.parallel.report": ("ParallelReport",),
    "perfpredict.graph_report": ("report_for_graph",),
    "perfpredict.request": ("Request",),
    "perfpredict.render.delivery": ("last_report", "show"),
    "perfpredict.render.text": ("render_text",),
    "perfpredict.core.report": ("PerfReport", "Prediction"),
    "perfpredict.core.graph": ("OpGraph", "OpNode"),
    "perfpredict.hardware.devices": ("Device", "get_device", "list_devices", "load_device_file"),
    "perfpredict.predictors.registry": ("register_predictor", "get_predictor", "list_predictors"),
    "perfpredict.core.errors": ("PerfPredictError",),
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY)
