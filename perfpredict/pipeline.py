"""The report pipeline every entry point shares: an OpGraph, a device and a run config in, a PerfReport out.

The Python API (:mod:`perfpredict.api`), the torch.compile backend and the CLI all end here. It imports neither
of them, so the API and the backend can both call it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfpredict.core.errors import FrontendError
from perfpredict.core.graph import OpGraph
from perfpredict.core.report import PerfReport
from perfpredict.predictors.base import DEFAULT_MODE, DEFAULT_PREDICTOR, MEASURED_BUILD_DTYPE

DEFAULT_DEVICE = "H100-SXM"


def report_for_graph(
    graph: OpGraph,
    *,
    device: Any = DEFAULT_DEVICE,
    phase: str | None = None,
    predictor: str = DEFAULT_PREDICTOR,
    optimizer: str = "adamw",
    tf32: bool = False,
    max_latency_ms: float | None = None,
    min_throughput_per_s: float | None = None,
    grid_g_per_kwh: float | None = None,
    workload_calls: int | None = None,
    top_ops: int = 25,
    model_name: str | None = None,
    weights_built_in: str | None = MEASURED_BUILD_DTYPE,
    mode: str = DEFAULT_MODE,
    precision: str | None = None,
    assumed: Mapping[str, str] | None = None,
    host: str | None = None,
) -> PerfReport:
    """A PerfReport for an OpGraph any frontend produced (FX, AOT, Relax, ONNX). ``assumed``: choices made for the
    user that the report should state (see perfpredict.assumptions). ``host``: the host that drives the device, by
    name (``perfpredict.predictors.host_model.HOSTS``) or ``"calibrated"``; None: the calibrated one, else the
    default for the device's kind (a GPU server)."""
    from perfpredict.assemble import build_report
    from perfpredict.hardware.devices import Device, get_device
    from perfpredict.predictors.base import RunConfig
    from perfpredict.render.delivery import forget, record

    forget()
    if not graph.nodes:
        raise FrontendError(
            f"the graph of {model_name or graph.name or 'the model'!r} holds no operation to predict (source "
            f"{graph.source!r}); check that the model computes something with these inputs and input shapes"
        )
    dev = device if isinstance(device, Device) else get_device(device)
    config = RunConfig(
        phase=phase or graph.phase,
        optimizer=optimizer,
        tf32=tf32,
        top_ops=top_ops,
        weights_built_in=weights_built_in,
        mode=mode,
        precision=precision,
        host=host,
    )
    report = build_report(
        graph,
        dev,
        config,
        predictor,
        model_name=model_name or graph.name or "model",
        max_latency_ms=max_latency_ms,
        min_throughput_per_s=min_throughput_per_s,
        grid_g_per_kwh=grid_g_per_kwh,
        workload_calls=workload_calls,
        assumed=assumed,
    )
    record(report)
    return report
