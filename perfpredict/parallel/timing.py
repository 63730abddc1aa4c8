"""One rank's compute time, from the existing single-GPU predictors on the rank's own graph.

``perfpredict.graph_report.report_for_graph`` gives the step's latency with the chosen predictor (two-timeline by default), its memory
and its activations. The parallel model also needs that time split: forward and backward, per layer, and the
optimizer step apart (it runs once per step, not per microbatch). The split follows the analytical (roofline)
time of each op, scaled to the predictor's total; the optimizer's share is the analytical model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfpredict.request import Request, field_names

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.core.report import PerfReport


def rank_request(request: Request, training: bool) -> Request:
    """The single-GPU run of one rank: ``request``'s run fields, the precision's compute-equivalent recipe in
    training (None in inference: the graph's dtype), and no build-dtype peak (the parallel memory model counts each
    rank's weights itself). Its report options are the defaults: only its latency and memory are read."""
    from perfpredict.parallel.memory import compute_precision

    run = {name: getattr(request, name) for name in field_names("run") if name != "parallel"}
    run.update(precision=compute_precision(request.precision) if training else None, weights_built_in=None)
    return Request(**run)


def rank_report(graph: OpGraph, device: Any, request: Request) -> PerfReport:
    """The single-GPU report of ``graph`` under a rank's request (:func:`rank_request`)."""
    from perfpredict.graph_report import report_for_graph

    return report_for_graph(graph, request, device=device)


@dataclass(frozen=True)
class RankTime:
    """Seconds of one microbatch's forward and backward on one rank, per layer label, and of its optimizer step."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    layer_forward_s: dict[int, float]
    layer_backward_s: dict[int, float]
    report: PerfReport
    node_s: Any = None  # seconds per op of the graph (numpy), the predictor's total split by the roofline
    weight_grad_s: float = 0.0  # the part of backward_s that makes parameter gradients (ZB-1P's W)
    layer_attention_s: dict[int, tuple[float, float]] | None = None  # per layer: attention (forward, backward)


def rank_time(graph: OpGraph, device: Any, options: Request, labels: list[int], start: int) -> RankTime:
    """Predict ``graph`` with the single-GPU path and split its latency (see the module docstring)."""
    import numpy as np

    report = rank_report(graph, device, options)
    node_s, optimizer_s = analytical_node_s(graph, device, options)
    total_s = report.latency_ms.value / 1e3
    optimizer_s = min(optimizer_s, total_s)
    work_s = total_s - optimizer_s
    share = node_s * (work_s / node_s.sum()) if node_s.sum() > 0 else np.zeros_like(node_s)
    fwd: dict[int, float] = {}
    bwd: dict[int, float] = {}
    attention: dict[int, tuple[float, float]] = {}
    for i, seconds in enumerate(share):
        table = fwd if i < start else bwd
        table[labels[i]] = table.get(labels[i], 0.0) + float(seconds)
        if graph.nodes[i].op == "attention":
            f, b = attention.get(labels[i], (0.0, 0.0))
            attention[labels[i]] = (f + float(seconds), b) if i < start else (f, b + float(seconds))
    weight = float(sum(share[i] for i in weight_gradient_ops(graph, start)))
    return RankTime(
        float(share[:start].sum()), float(share[start:].sum()), optimizer_s, fwd, bwd, report, share, weight, attention
    )


def weight_gradient_ops(graph: OpGraph, start: int) -> list[int]:
    """Backward ops that make parameter gradients (their output is one, itself or through views): the weight
    gradients' matmuls and reductions, what ZB-1P defers as W."""
    from perfpredict.parallel.tensor_parallel import feeds_gradient

    feeds = feeds_gradient(graph)
    return [i for i in range(start, len(graph.nodes)) if feeds[i] and not graph.nodes[i].is_view]


def analytical_node_s(graph: OpGraph, device: Any, options: Request):
    """(roofline seconds per op, the optimizer step's seconds) from the analytical predictor."""
    import numpy as np

    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors.analytical import AnalyticalPredictor
    from perfpredict.predictors.cost_arrays import CostArrays

    dev = get_device(device) if isinstance(device, str) else device
    config = options.run_config(graph.phase, options.weights_built_in)  # a rank's request: see rank_request
    ev = AnalyticalPredictor().evaluate(CostArrays.from_graph(graph), dev, config, np.array([graph.batch_size]))
    return ev.node_s[:, 0], float(ev.optimizer_s[0])
