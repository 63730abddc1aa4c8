"""``PredictPerformance``: a TVM Relax module pass that predicts the module's performance and changes nothing.

    import tvm
    from tvm import relax
    from perfpredict.backends.relax_pass import PredictPerformance

    seq = tvm.transform.Sequential([PredictPerformance(device="H100-SXM"), relax.get_pipeline("default")])
    ex = tvm.compile(mod, target="llvm", relax_pipeline=seq)
    report = perfpredict.last_report()               # or json.loads(str(mod_after.attrs["perfpredict_report"]))

The pass walks the Relax calls of the entry function (see ``relax_frontend.py``), predicts with the same
predictors as the torch.compile backend, attaches the report as JSON to the module
(``mod.with_attr("perfpredict_report", ...)``), and delivers it through ``report=`` (a callable or a path) and
:func:`perfpredict.last_report`. Run it before ``LegalizeOps``: afterwards every op is a ``call_tir`` into
generated TIR, the op names are gone, and the pass says so (warning + note) instead of guessing.

Relay was removed from TVM; apache-tvm 0.25+ has only Relax, so this is a Relax pass. Importing this module
does not import tvm; :func:`PredictPerformance` does.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Mapping
from typing import Any

from perfpredict.core.errors import InvalidInputError, PerfPredictError, require
from perfpredict.predictors.base import DEFAULT_MODE, DEFAULT_PREDICTOR
from perfpredict.request import DEFAULT_DEVICE

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

ATTR_NAME = "perfpredict_report"
PIPELINE_NAME = "perfpredict"

_WARNED: set[str] = set()
# Seconds spent inside the pass by the last run (read by benchmarks/relax_overhead.py).
LAST_PASS_SECONDS: list[float] = [0.0]


def predict_module(
    mod: Any,
    *,
    device: Any = DEFAULT_DEVICE,
    phase: str = "inference",
    predictor: str = DEFAULT_PREDICTOR,
    mode: str = DEFAULT_MODE,
    shape_hints: Mapping[str, int] | None = None,
    func_name: str | None = None,
    model_name: str | None = None,
    weights_built_in: str | None = None,
    **report_kwargs: Any,
) -> Any:
    """A PerfReport for a Relax IRModule (no pass machinery): the function the pass calls. A compiled module holds
    its parameters in their own dtype, so by default no float32 copy exists at load (``weights_built_in=None``, as
    for an ONNX file and the CLI)."""
    from perfpredict.compiler_hooks.relax_frontend import graph_from_relax
    from perfpredict.graph_report import report_for_graph

    if phase not in ("inference", "training"):
        raise InvalidInputError(f"phase {phase!r} is not one of 'inference', 'training'")
    graph = graph_from_relax(
        mod, func_name=func_name, shape_hints=shape_hints, phase=phase, name=model_name or "relax_module"
    )
    lowered = [n for n in graph.notes if "legalised" in n]
    if lowered:
        _warn_once(lowered[0])
    elif graph.coverage < 1.0:
        unknown = ", ".join(f"{k} x{v}" for k, v in sorted(graph.unknown_targets.items()))
        _warn_once(
            f"perfpredict: {graph.coverage:.0%} of the module's ops have a cost model; no cost model for "
            f"{unknown} (counted as launch overhead only)"
        )
    return report_for_graph(
        graph,
        device=device,
        phase=phase,
        predictor=predictor,
        mode=mode,
        model_name=model_name,
        weights_built_in=weights_built_in,
        **report_kwargs,
    )


def PredictPerformance(  # noqa: N802 - TVM pass style
    device: Any = DEFAULT_DEVICE,
    phase: str = "inference",
    predictor: str = DEFAULT_PREDICTOR,
    report: Any = None,
    shape_hints: Mapping[str, int] | None = None,
    *,
    mode: str = DEFAULT_MODE,
    func_name: str | None = None,
    model_name: str | None = None,
    strict: bool = False,
    attach: bool = True,
    **report_kwargs: Any,
) -> Any:
    """A ``tvm.transform.module_pass(opt_level=0, name="PredictPerformance")`` that observes the module.

    ``report`` is a callable that receives the PerfReport or a path (.json, .html, .txt) to write it to.
    ``shape_hints`` gives sizes for symbolic dimensions ({"n": 128}). ``predictor`` and ``mode`` default to what
    every other door uses (``predictors.base.DEFAULT_PREDICTOR``, ``DEFAULT_MODE``). Other keywords
    (``optimizer``, ``tf32``, ``max_latency_ms``, ``grid_g_per_kwh``...) go to
    :func:`perfpredict.graph_report.report_for_graph`. If predicting fails, the pass warns once and returns the module
    unchanged; ``strict=True`` raises instead.
    """
    tvm = require("tvm", "tvm")
    if phase not in ("inference", "training"):
        raise InvalidInputError(f"phase {phase!r} is not one of 'inference', 'training'")
    from perfpredict.hardware.devices import get_device

    if not hasattr(device, "name"):
        get_device(device)  # an unknown device name fails here, with the catalog's suggestions
    hints = dict(shape_hints or {})

    def transform(mod: Any, ctx: Any) -> Any:
        from perfpredict.render.delivery import deliver, forget

        forget()  # a failure must not leave the previous module's report as last_report()
        start = time.perf_counter()
        try:
            result = predict_module(
                mod,
                device=device,
                phase=phase,
                predictor=predictor,
                mode=mode,
                shape_hints=hints,
                func_name=func_name,
                model_name=model_name,
                **report_kwargs,
            )
            deliver(result, report)
            if attach:
                mod = mod.with_attr(ATTR_NAME, json.dumps(_report_dict(result), default=str))
        except Exception as err:
            if strict:
                raise
            _warn_once(
                f"perfpredict: PredictPerformance could not predict this module ({type(err).__name__}: "
                f"{err}); the module is passed on unchanged"
            )
        finally:
            LAST_PASS_SECONDS[0] = time.perf_counter() - start
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="PredictPerformance")


def report_from_module(mod: Any) -> dict[str, Any] | None:
    """The report a PredictPerformance pass attached to ``mod``, as a dict (None when there is none)."""
    attrs = getattr(mod, "attrs", None)
    if attrs is None or ATTR_NAME not in attrs:
        return None
    return json.loads(str(attrs[ATTR_NAME]))


def pipeline_with_prediction(base: str = "default", **options: Any) -> Any:
    """``PredictPerformance(**options)`` followed by the named Relax pipeline (``"default"``, ``"zero"``...)."""
    tvm = require("tvm", "tvm")
    from tvm import relax

    return tvm.transform.Sequential(
        [PredictPerformance(**options), relax.get_pipeline(base)], name=f"perfpredict+{base}"
    )


def register_pipeline(name: str = PIPELINE_NAME, base: str = "default") -> str:
    """Register ``relax.get_pipeline(name, device=..., ...)``: PredictPerformance, then the ``base`` pipeline.

    Idempotent: registering the same name twice keeps the first registration. Returns the name.
    """
    require("tvm", "tvm")
    from tvm import relax
    from tvm.relax import pipeline as pipelines

    if name in getattr(pipelines, "PIPELINE_MAP", {}):
        return name

    def make(**options: Any) -> Any:
        return pipeline_with_prediction(base, **options)

    relax.register_pipeline(name)(make)
    return name


def instrument(device: Any = DEFAULT_DEVICE, before: str = "LegalizeOps", **options: Any) -> Any:
    """A ``tvm.instrument`` pass instrument that predicts the module as it enters the pass named ``before``.

    Use it when you cannot edit the pipeline: ``with tvm.transform.PassContext(instruments=[instrument()])``.
    It delivers the report (``last_report()``, ``report=``) but cannot attach it to the module.
    """
    tvm = require("tvm", "tvm")
    report_target = options.pop("report", None)

    @tvm.instrument.pass_instrument
    class PredictBefore:
        def __init__(self) -> None:
            self.done = False

        def run_before_pass(self, mod: Any, info: Any) -> None:
            if self.done or str(info.name) != before:
                return
            self.done = True
            from perfpredict.render.delivery import deliver

            try:
                deliver(predict_module(mod, device=device, **options), report_target)
            except Exception as err:  # noqa: BLE001 - an instrument must not break the build either
                _warn_once(f"perfpredict: prediction before {before} failed ({type(err).__name__}: {err})")

    return PredictBefore()


def _report_dict(report: Any) -> dict[str, Any]:
    to_dict = getattr(report, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    to_json = getattr(report, "to_json", None)
    if callable(to_json):
        return json.loads(to_json())
    import dataclasses

    return dataclasses.asdict(report)


def _warn_once(message: str) -> None:
    if message in _WARNED:
        return
    _WARNED.add(message)
    warnings.warn(message, stacklevel=3)
    logger.warning(message)


__all__ = [
    "ATTR_NAME",
    "PredictPerformance",
    "PerfPredictError",
    "instrument",
    "pipeline_with_prediction",
    "predict_module",
    "register_pipeline",
    "report_from_module",
]
