"""Few-shot adaptation for a search: fit a latency model to a handful of candidates measured on the target GPU.

Zero-shot, the two-timeline model predicts a step from per-op costs: host dispatch (the default GPU host's) and
device time (roofline over an efficiency). On a GPU and software stack it has never seen, three things move a
ranking most, and a few measured candidates pin them down:

- ``host_scale``: how slow the measuring host dispatches an op, against the default GPU host
  (``host_model.DEFAULT_HOST``);
- ``memory_scale`` and ``depthwise_scale``: how far the GPU's memory-bound kernels and its depthwise convolutions
  (grouped per channel: compute-bound at a few percent of peak on older GPUs) are from the zero-shot device time;
- ``queue_depth``: how many kernels the host runs ahead of the GPU. The zero-shot model lets it run ~1,000 ahead
  (CUDA's launch queue); HELP's latency set behaves as if it ran 1-4 ahead, so a heavy block's device time adds
  to the step instead of hiding behind the host work of the blocks after it;

plus ``offset_ms``, a fixed cost per step (the timing harness, a final copy). Convolution and matmul compute
efficiency stays the zero-shot model's.

``adapt`` fits on the **datasheet basis** (``learned_device=False``: device time is the roofline at fixed
achieved fractions, not the efficiency learned from GPU op rows). The learned efficiency ranks better zero-shot,
but on a GPU it has no rows for its per-shape variation is not one that four scales can correct: on HELP's
RTX 2080 Ti at batch 64, 10 shots on the learned basis ranked the rest at Spearman 0.71 (zero-shot 0.82), on
the datasheet basis at 0.99 (``tests/nas/test_nas_adapt.py``). The fit is a grid search over the four, then a least-squares refinement
of the continuous ones, on log latency (so a 10% miss weighs the same on every candidate). Where every parameter
is at its zero-shot value the adapted model gives exactly the zero-shot eager latency.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError

#: the host's run-ahead the grid tries (kernels); the zero-shot model's is timeline.QUEUE_DEPTH
QUEUE_DEPTHS = (1, 2, 3, 4, 8, 32, 1024)
_DEPTHWISE_GRID = np.geomspace(1.0, 40.0, 8)
_MEMORY_GRID = np.geomspace(0.5, 4.0, 7)
_HOST_GRID = np.geomspace(0.25, 4.0, 9)  # a measuring host 4x faster or slower than the reference
MEMORY, DENSE, DEPTHWISE = 0, 1, 2  # node groups


@dataclass(frozen=True)
class NodeParts:
    """One candidate on one device, per node: the zero-shot device seconds and the roofline's compute and memory
    terms behind them (``[nodes, batches]``, one column per batch asked for), the host's dispatch and launch
    seconds, the node's group, and whether it is a view (no kernel)."""

    device_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    dispatch_s: np.ndarray
    launch_s: np.ndarray
    group: np.ndarray
    view: np.ndarray
    learned_device: bool = True  # device_s from the learned efficiency (zero-shot) or the datasheet basis

    def at(self, batch_index: int) -> NodeParts:
        """The parts at one of the batches (a fit reads each candidate at one batch)."""
        one = slice(batch_index, batch_index + 1)
        return replace(
            self, device_s=self.device_s[:, one], compute_s=self.compute_s[:, one], memory_s=self.memory_s[:, one]
        )


@dataclass(frozen=True)
class AdaptedLatency:
    """A latency model fitted to measured candidates on one device (see the module's docstring)."""

    device: str
    host_scale: float = 1.0
    memory_scale: float = 1.0
    depthwise_scale: float = 1.0
    queue_depth: int = 1024
    offset_ms: float = 0.0
    shots: int = 0
    log_rmse: float = 0.0  # on the shots, after the fit
    learned_device: bool = True  # the zero-shot device time (learned efficiency) or the datasheet basis (adapt)

    def latency_ms(self, parts: Sequence[NodeParts]) -> np.ndarray:
        """The adapted latency of each candidate at the first batch of its parts."""
        return np.array([walls_ms(p, [self])[0, 0] for p in parts])

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def zero_shot(device: str) -> AdaptedLatency:
    """The parameters at which the adapted model is the zero-shot two-timeline model."""
    from perfpredict.predictors.timeline import QUEUE_DEPTH

    return AdaptedLatency(device=device, queue_depth=QUEUE_DEPTH)


def node_parts(arrays: Any, device: Any, batches: Any, config: Any = None, learned_device: bool = True) -> NodeParts:
    """A candidate's CostArrays as NodeParts at ``batches`` (one or several) on ``device`` (eager inference), with
    the zero-shot device time (``learned_device``) or the datasheet basis an adapted model is fitted on."""
    from perfpredict.predictors import host_model
    from perfpredict.predictors.analytical import AnalyticalPredictor
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.registry import get_predictor
    from perfpredict.predictors.two_timeline import TwoTimelinePredictor

    config = config or RunConfig()
    if config.phase != "inference" or config.mode != "eager" or device.kind != "gpu":
        raise InvalidInputError("adaptation models an eager inference step on a GPU; predict the rest zero-shot")
    predictor = get_predictor("two_timeline") if learned_device else TwoTimelinePredictor(learned=False)
    predictor = predictor.for_host(config.host)  # the host the zero-shot answer would use (RunConfig.host)
    batches = np.atleast_1d(np.asarray(batches, dtype=float))
    ev = AnalyticalPredictor().evaluate(arrays, device, config, batches)
    device_s = predictor.device_node_s(arrays, device, config, batches, ev)
    host = predictor.profile_for(device)
    unit = replace(host, dispatch_scale={"gpu": 1.0})
    dispatch = host_model.node_host_s(arrays.graph, unit, 0.0, gpu=True)
    launch = host_model.node_host_s(arrays.graph, unit, predictor.launch_s(device), gpu=True) - dispatch
    return NodeParts(
        device_s=device_s,
        compute_s=ev.compute_s,
        memory_s=ev.memory_s,
        dispatch_s=dispatch * host.dispatch_scale.get("gpu", 1.0),
        launch_s=launch,
        group=np.array([_group(n) for n in arrays.graph.nodes], dtype=np.int64),
        view=np.array([n.is_view for n in arrays.graph.nodes], dtype=bool),
        learned_device=learned_device,
    )


def _group(node: Any) -> int:
    if node.op == ops.CONV:
        groups = node.attrs.get("groups", 1)
        channels = node.inputs[0].shape[1] if node.inputs and len(node.inputs[0].shape) > 1 else 0
        return DEPTHWISE if groups > 1 and groups == channels else DENSE
    return DENSE if node.op == ops.MATMUL else MEMORY


def walls_ms(parts: NodeParts, models: Sequence[AdaptedLatency]) -> np.ndarray:
    """The step's wall time (ms) of one candidate under each of ``models`` at each of its batches, in one
    simulation: ``[batches, models]``."""
    host_s, device_s, depth, offset = _timelines(parts, models)
    wall = simulate(host_s, device_s, depth) * 1e3 + offset
    return wall.reshape(parts.device_s.shape[1], len(models))


def first_batch_walls_ms(parts: Sequence[NodeParts], models: Sequence[AdaptedLatency]) -> np.ndarray:
    """``[candidates, models]``: every candidate at its first batch under every model, in one simulation (the
    shorter candidates padded with empty ops, which change no wall time)."""
    rows = [
        _timelines(
            replace(p, device_s=p.device_s[:, :1], compute_s=p.compute_s[:, :1], memory_s=p.memory_s[:, :1]), models
        )
        for p in parts
    ]
    n = max(r[0].shape[0] for r in rows)
    host_s = np.hstack([np.pad(r[0], ((0, n - r[0].shape[0]), (0, 0))) for r in rows])
    device_s = np.hstack([np.pad(r[1], ((0, n - r[1].shape[0]), (0, 0))) for r in rows])
    wall = simulate(host_s, device_s, np.concatenate([r[2] for r in rows])) * 1e3 + np.concatenate([r[3] for r in rows])
    return wall.reshape(len(parts), len(models))


def _timelines(parts: NodeParts, models: Sequence[AdaptedLatency]) -> tuple[np.ndarray, ...]:
    """Host and device seconds ``[nodes, batches x models]`` (column b * len(models) + j: batch b, model j), and
    each column's queue depth and offset."""
    from perfpredict.predictors.two_timeline import MIN_KERNEL_S

    batches, k = parts.device_s.shape[1], len(models)
    depthwise = np.tile([m.depthwise_scale for m in models], batches)
    memory = np.tile([m.memory_scale for m in models], batches)
    compute_scale = np.where(parts.group[:, None] == DEPTHWISE, depthwise[None, :], 1.0)
    c, m = np.repeat(parts.compute_s, k, axis=1), np.repeat(parts.memory_s, k, axis=1)
    # the zero-shot device time, moved by how much the scaled roofline bound moves
    change = np.maximum(compute_scale * c, memory[None, :] * m) / np.maximum(np.maximum(c, m), 1e-30)
    device_s = np.repeat(parts.device_s, k, axis=1) * change
    device_s = np.where(parts.view[:, None], 0.0, np.maximum(device_s, MIN_KERNEL_S))
    host = np.tile([m.host_scale for m in models], batches)
    host_s = parts.dispatch_s[:, None] * host[None, :] + parts.launch_s[:, None]
    depth = np.tile([m.queue_depth for m in models], batches)
    return host_s, device_s, depth, np.tile([m.offset_ms for m in models], batches)


def simulate(host_s: np.ndarray, device_s: np.ndarray, queue_depth: np.ndarray) -> np.ndarray:
    """timeline.overlapped with a queue depth per column: op i is enqueued once the host has dispatched it and
    op i - depth has finished; it runs once op i-1 has. Returns the wall seconds per column."""
    n, k = host_s.shape
    columns = np.arange(k)
    host_t, device_end = np.zeros(k), np.zeros(k)
    ends = np.zeros((n, k))
    for i in range(n):
        host_t = host_t + host_s[i]
        back = i - queue_depth
        waits = back >= 0
        if waits.any():
            host_t = np.where(waits, np.maximum(host_t, ends[np.maximum(back, 0), columns]), host_t)
        device_end = np.maximum(host_t, device_end) + device_s[i]
        ends[i] = device_end
    return np.maximum(device_end, host_t)


def fit(parts: Sequence[NodeParts], measured_ms: Iterable[float], device: str) -> AdaptedLatency:
    """The parameters that best explain ``measured_ms`` (one per candidate of ``parts``), on log latency."""
    from scipy.optimize import least_squares

    y = np.asarray(list(measured_ms), dtype=float)
    if len(y) != len(parts) or len(y) < 3:
        raise InvalidInputError(f"adapt needs at least 3 measured candidates, one latency each (got {len(y)})")
    if len({p.learned_device for p in parts}) > 1:
        raise InvalidInputError("the parts mix device bases; build them all with the same node_parts(learned_device=)")
    if not np.isfinite(y).all() or (y <= 0).any():
        raise InvalidInputError("measured latencies must be positive milliseconds")
    best = _grid_search(parts, y, device)

    def residuals(v: np.ndarray) -> np.ndarray:
        model = replace(best, depthwise_scale=np.exp(v[0]), memory_scale=np.exp(v[1]), host_scale=np.exp(v[2]))
        model = replace(model, offset_ms=float(v[3]))
        return np.log(first_batch_walls_ms(parts, [model])[:, 0]) - np.log(y)

    start = np.array([np.log(best.depthwise_scale), np.log(best.memory_scale), np.log(best.host_scale), best.offset_ms])
    refined = least_squares(
        residuals,
        start,
        bounds=([0.0, -2.0, -3.0, 0.0], [np.log(200.0), 3.0, 3.0, float(y.max())]),
        diff_step=1e-3,  # the timeline has kinks (max): a step this size sees across them
    )
    v = refined.x
    model = replace(
        best, depthwise_scale=float(np.exp(v[0])), memory_scale=float(np.exp(v[1])), host_scale=float(np.exp(v[2]))
    )
    model = replace(model, offset_ms=float(v[3]), shots=len(y))
    rmse = float(np.sqrt(np.mean(residuals(v) ** 2)))
    return replace(model, log_rmse=rmse, learned_device=parts[0].learned_device)


def _grid_search(parts: Sequence[NodeParts], y: np.ndarray, device: str) -> AdaptedLatency:
    """The grid point (queue depth, depthwise, memory and host scales) of least log error, with the offset that
    closes the mean gap at that point."""
    grid = [
        AdaptedLatency(device=device, depthwise_scale=a, memory_scale=b, host_scale=g, queue_depth=q)
        for q, a, b, g in itertools.product(QUEUE_DEPTHS, _DEPTHWISE_GRID, _MEMORY_GRID, _HOST_GRID)
    ]
    walls = first_batch_walls_ms(parts, grid)  # [candidates, grid]
    offsets = np.clip(np.mean(y[:, None] - walls, axis=0), 0.0, None)
    error = np.mean((np.log(walls + offsets) - np.log(y[:, None])) ** 2, axis=0)
    j = int(np.argmin(error))
    return replace(grid[j], offset_ms=float(offsets[j]))


def adapt(
    models: Iterable[Any],
    example_inputs: Any,
    measured_ms: Iterable[float],
    *,
    device: str,
    batch_size: int | None = None,
    dtype: str | None = None,
) -> AdaptedLatency:
    """Fit a latency model for ``device`` to ``models`` measured at ``measured_ms`` (10 are plenty).

    ``example_inputs`` are the inputs each model was timed with (or a callable ``model -> inputs``);
    ``batch_size`` overrides their batch. Pass the result to ``perfpredict.predict_models(..., adapted=...)``.
    """
    from perfpredict.hardware.devices import get_device
    from perfpredict.nas.candidates import Candidates

    target = get_device(device)
    candidates = Candidates(batch_sizes=None if batch_size is None else [batch_size], dtype=dtype)
    parts = []
    for model in models:
        arrays = candidates.arrays(model, example_inputs(model) if callable(example_inputs) else example_inputs)
        parts.append(node_parts(arrays, target, candidates.batches_for(arrays), learned_device=False))
    return fit(parts, measured_ms, target.name)
