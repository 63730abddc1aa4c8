"""The one way in: ``predict(request)`` answers a :class:`perfpredict.request.Request`, whichever door built it.

The Python API, the CLI, the torch.compile backend and the web page all build a Request and call :func:`predict`.
The request's source gives the OpGraph (``source.graph_for(request, device)``, or an OpGraph as it is); a
``parallel`` plan sends it to :mod:`perfpredict.parallel`, else :func:`perfpredict.graph_report.report_for_graph`
makes the single-GPU PerfReport. The pipeline imports no door, so every door can call it.
"""

from __future__ import annotations

from typing import Any

from perfpredict.core.graph import OpGraph
from perfpredict.request import Captured, Request


def predict(request: Request) -> Any:
    """The PerfReport (a ParallelReport where ``request.parallel`` names a plan) answering ``request``."""
    return predict_with_graph(request)[0]


def predict_with_graph(request: Request) -> tuple[Any, OpGraph]:
    """:func:`predict`'s report and the OpGraph it predicted (for a roofline plot of its ops)."""
    from perfpredict.graph_report import report_for_graph
    from perfpredict.hardware.devices import Device, get_device
    from perfpredict.render.delivery import forget

    forget()  # a prediction that fails must not leave the previous model's report as last_report()
    device = request.device if isinstance(request.device, Device) else get_device(request.device)  # fail fast
    _check_device_options(request, device)
    captured = capture(request, device)
    run = request.but(device=device, precision=captured.precision, model_name=request.model_name or captured.name)
    if request.parallel is not None:
        from perfpredict.parallel import parallel_report

        return parallel_report(captured.graph, request.parallel, run), captured.graph
    report = report_for_graph(captured.graph, run, assumed=captured.assumed, weights_default=captured.weights_built_in)
    return report, captured.graph


def _check_device_options(request: Request, device: Any) -> None:
    """What the device cannot do, refused before the capture: float8 without float8 tensor cores, a power cap
    outside the board's range."""
    from perfpredict.compiler_hooks.float8_linears import check_device
    from perfpredict.hardware.power_limit import power_limited

    check_device(request.float8, device)
    power_limited(device, request.power_limit_w)


def capture(request: Request, device: Any) -> Captured:
    """The source's graph for ``request`` on ``device`` (a source may choose the run dtype per device)."""
    source = request.source
    if isinstance(source, OpGraph):
        from perfpredict.graph_report import FIXED_BY_THE_GRAPH, refuse_fixed_by_the_graph

        refuse_fixed_by_the_graph({name: getattr(request, name) for name in FIXED_BY_THE_GRAPH})
        return Captured(source, request.model_name or source.name, request.precision)
    if source is None or not hasattr(source, "graph_for"):
        from perfpredict.core.errors import InvalidInputError

        raise InvalidInputError(
            f"Request(source={source!r}) is not a model source: give an OpGraph, perfpredict.api.ModuleSource, or "
            "perfpredict.model_sources.HFSource / OnnxSource (or call perfpredict.predict(model, inputs))"
        )
    return source.graph_for(request, device)
