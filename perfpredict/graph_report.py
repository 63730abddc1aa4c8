"""A PerfReport for one OpGraph on one device, under a Request's run and report options: the single-GPU path.

The pipeline (:func:`perfpredict.pipeline.predict`) ends here for one GPU, and the parallel path runs it for each
rank's graph. It lives apart from the pipeline because the pipeline also dispatches to the parallel path, which
calls this back (one module holding both would be an import cycle).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfpredict.core.errors import FrontendError, InvalidInputError
from perfpredict.core.graph import OpGraph
from perfpredict.core.report import PerfReport
from perfpredict.predictors.base import MEASURED_BUILD_DTYPE
from perfpredict.request import Request

#: Request fields a captured graph has already fixed: asking for another value must not pass silently
FIXED_BY_THE_GRAPH = ("dtype", "batch", "seq", "attn_implementation", "model_class")


def refuse_fixed_by_the_graph(values: Mapping[str, Any]) -> None:
    """Raise where ``values`` asks a captured graph for another dtype, batch or sequence length."""
    asked = [f"{name}={values[name]!r}" for name in FIXED_BY_THE_GRAPH if values.get(name) is not None]
    if asked:
        raise InvalidInputError(
            f"{', '.join(asked)} cannot change a graph already captured: capture the model again with those inputs "
            "(perfpredict.featurize or perfpredict.predict with the model and its example inputs)"
        )


def training_graph(graph: OpGraph, request: Request, device: Any) -> OpGraph:
    """``graph`` as the request's training run executes it: activation checkpointing's recompute in the backward
    (compiler_hooks/recompute.py), QLoRA's dequantize ops (nf4_base.py), float8 linears with their casts
    (float8_linears.py). A graph already rewritten is returned as it is, so a rank's graph that the parallel path
    rewrote before splitting it is not rewritten twice."""
    from perfpredict.compiler_hooks import float8_linears, nf4_base, recompute

    graph = recompute.apply(graph, request.activation_checkpointing)
    if request.qlora:
        graph = nf4_base.apply(graph)
    return float8_linears.apply(graph, request.float8, device)


def report_for_graph(
    graph: OpGraph,
    request: Request | None = None,
    *,
    assumed: Mapping[str, str] | None = None,
    weights_default: str | None = MEASURED_BUILD_DTYPE,
    **fields: Any,
) -> PerfReport:
    """A PerfReport for an OpGraph any frontend produced (FX, AOT, Relax, ONNX), under ``request`` with ``fields``
    (Request field names) changed. ``assumed``: choices made for the user that the report should state (see
    perfpredict.assumptions). ``weights_default``: what ``weights_built_in="auto"`` means for this graph (float32: a
    graph captured from a torch module, built in float32 before any cast). ``request.parallel`` is not read here:
    :func:`perfpredict.pipeline.predict` sends a plan to the parallel path."""
    from perfpredict.assemble import build_report
    from perfpredict.hardware.devices import Device, get_device
    from perfpredict.render.delivery import forget, record

    refuse_fixed_by_the_graph(fields)
    if fields.get("parallel") is not None:
        raise InvalidInputError(
            "report_for_graph answers for one GPU: for a multi-GPU plan call perfpredict.parallel_report(graph, plan) "
            "or perfpredict.predict(model, inputs, parallel=...)"
        )
    request = (request or Request()).but(**fields)
    forget()
    if not graph.nodes:
        raise FrontendError(
            f"the graph of {request.model_name or graph.name or 'the model'!r} holds no operation to predict (source "
            f"{graph.source!r}); check that the model computes something with these inputs and input shapes"
        )
    from perfpredict.hardware.power_limit import power_limited

    device = request.device
    dev = power_limited(device if isinstance(device, Device) else get_device(device), request.power_limit_w)
    graph = training_graph(graph, request, dev)
    config = request.run_config(request.phase or graph.phase, request.resolved_weights_built_in(weights_default))
    report = build_report(
        graph,
        dev,
        config,
        request.predictor,
        model_name=request.model_name or graph.name or "model",
        max_latency_ms=request.max_latency_ms,
        min_throughput_per_s=request.min_throughput_per_s,
        grid_g_per_kwh=request.grid_g_per_kwh,
        workload_calls=request.workload_calls,
        assumed=assumed,
    )
    record(report)
    return report
