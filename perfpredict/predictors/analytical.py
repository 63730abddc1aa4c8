"""The analytical roofline predictor: per-op max(compute time, memory time) plus a launch overhead.

Each op runs as its own kernel (no fusion): time = max(FLOPs / attainable FLOP/s, bytes / attainable bandwidth)
+ launch overhead. Views launch nothing. Attainable = datasheet peak x a typical achieved fraction (below), or
the measured ceiling itself when a roofline run exists for the device. Energy integrates a power model that
moves between idle and TDP with each op's utilisation of its binding ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perfpredict.core import breakdown, op_kinds, ops
from perfpredict.core.report import OpContribution, Prediction
from perfpredict.predictors import optimizer_step
from perfpredict.predictors.base import PredictorOutput, RunConfig
from perfpredict.predictors.cost_arrays import CostArrays
from perfpredict.predictors.intervals import bracket
from perfpredict.predictors.memory_model import (
    activation_peak_parts,
    backward_born_peak,
    cpu_math_attention_bytes,
    element_bytes,
    free_steps,
    gpu_conv_workspace_bytes,
    memory_terms,
    picked_elements,
    training_bytes,
    without_gradients,
)

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph, OpNode
    from perfpredict.hardware.devices import Device

NAME = "analytical"
VERSION = "1"

# Achieved fractions of datasheet peaks, from the sanity bands in the roofline references (gpus.md): cuBLAS
# reaches about 75-87% of dense tensor-core peak, stream kernels 88-95% of HBM, FMA-bound code most of the
# FP32 vector peak. CPU eager kernels reach far less of a theoretical AVX peak. Measured fractions replace these
# (a GPU: those of a roofline run, hardware/attainable.py; a CPU: its measured ceilings).
ACHIEVED_FRACTION = {
    "gpu": {"tensor": 0.80, "vector": 0.85, "memory": 0.90},
    "cpu": {"tensor": 0.50, "vector": 0.50, "memory": 0.70},
}
# The interval is a heuristic band, not a calibrated confidence interval: the low end is the pure roofline at
# 100% of peak; the high end allows for what the model ignores (kernel selection, wave quantisation, small-op
# inefficiency). Learned predictors replace it with intervals fitted to measurements.
HIGH_FACTOR = 1.6
ENERGY_BAND = 0.3  # +-30% on energy and power: the power model is not calibrated per device
# Share of TDP drawn when memory-bound at full bandwidth, relative to compute-bound at full FLOP rate.
MEMORY_POWER_WEIGHT = 0.7


def _attainable(device: Device, key: str, kind: str) -> float:
    """Attainable rate for a peak key ("bf16_tensor", "fp32", ...) or "memory". A GPU: its datasheet times the
    measured fraction of that ceiling (``hardware/attainable.py``: its own roofline run's, else a measured GPU's of
    its architecture, or of any), else the typical fraction below; one basis for every GPU. A CPU: its measured
    ceiling, else the typical fraction of its estimate."""
    if device.kind == "gpu":
        from perfpredict.hardware.attainable import measured_fractions
        from perfpredict.hardware.devices import datasheet_device

        sheet = datasheet_device(device)
        peak = sheet.memory_bandwidth_bytes_per_s if key == "memory" else sheet.peak_flops_per_s.get(key, 0.0)
        return peak * measured_fractions(device)[0].get(key, ACHIEVED_FRACTION["gpu"][kind])
    measured = device.measured
    if key == "memory":
        peak = device.memory_bandwidth_bytes_per_s
        is_measured = "memory_bandwidth_bytes_per_s" in measured
        fraction = ACHIEVED_FRACTION[device.kind]["memory"]
    else:
        peak = device.peak_flops_per_s.get(key, 0.0)
        is_measured = key in measured or f"peak_flops_per_s.{key}" in measured
        fraction = ACHIEVED_FRACTION[device.kind][kind]
    return peak if is_measured else peak * fraction


def attainable_bandwidth(device: Device) -> float:
    """Bytes per second an op can stream on ``device``: measured, else datasheet x the achieved fraction."""
    return _attainable(device, "memory", "memory")


def ridge_flop_per_byte(graph: OpGraph, device: Device, config: RunConfig) -> float:
    """The arithmetic intensity above which the graph's heaviest op (most FLOPs: a GEMM or a convolution, in the
    dtype and on the unit it runs on) is compute-bound on ``device``: its attainable FLOP/s over the attainable
    bandwidth, the rule each op's bound follows (``compute_s >= memory_s``). 0.0 for a graph without FLOPs."""
    heaviest = max(graph.nodes, key=lambda n: n.flops, default=None)
    if heaviest is None or heaviest.flops <= 0:
        return 0.0
    return _node_rate(heaviest, graph.dtype, device, config, ideal=False) / attainable_bandwidth(device)


def _node_rates(graph: OpGraph, device: Device, config: RunConfig, ideal: bool) -> np.ndarray:
    """FLOP/s each node can attain: its dtype's tensor-core or vector rate (datasheet peak when ``ideal``)."""
    basis, attained = sheet(device), {}
    return np.array(
        [_node_rate(node, graph.dtype, device, config, ideal, basis, attained) for node in graph.nodes], dtype=float
    )


def _node_rate(
    node: Any,
    graph_dtype: str,
    device: Device,
    config: RunConfig,
    ideal: bool,
    basis: Device | None = None,
    attained: dict[str, float] | None = None,
) -> float:
    """``basis``: ``sheet(device)`` and ``attained``, a memo of attainable rates by key, where the caller rates many
    nodes."""
    # a float8 GEMM (compiler_hooks/float8_linears.py) computes in float8 and writes its own dtype
    dtype = node.attrs.get("compute_dtype") or (node.outputs[0].dtype if node.outputs else graph_dtype)
    basis = basis or sheet(device)
    peak, key = op_kinds.attainable_rate(node.op, dtype, basis, tf32=config.tf32, conv_tf32=config.conv_tf32)
    if ideal:
        return peak
    attained = {} if attained is None else attained
    if key not in attained:
        attained[key] = _attainable(device, key, "tensor" if key.endswith("_tensor") else "vector")
    return attained[key]


def sheet(device: Device) -> Device:
    """The peaks a GPU's ideal roofline reads: its datasheet's, every GPU on one basis (a CPU: its own)."""
    if device.kind != "gpu":
        return device
    from perfpredict.hardware.devices import datasheet_device

    return datasheet_device(device)


@dataclass(frozen=True)
class Evaluation:
    """Times per node and config ([nodes, configs]) and per-config totals, all in SI units."""

    node_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    optimizer_s: np.ndarray
    latency_s: np.ndarray
    ideal_latency_s: np.ndarray
    activations_bytes: np.ndarray
    power_w: np.ndarray
    # parts of activations_bytes that are not activations, and whether the peak is the optimizer step's
    workspace_bytes: np.ndarray | None = None
    optimizer_temporaries_bytes: np.ndarray | None = None
    peak_at_optimizer_step: np.ndarray | None = None


class AnalyticalPredictor:
    name = NAME
    version = VERSION

    def evaluate(
        self,
        arrays: CostArrays,
        device: Device,
        config: RunConfig,
        batches: np.ndarray,
        forward_outputs_kept: bool | None = None,
    ) -> Evaluation:
        """``forward_outputs_kept`` overrides the device's liveness rule for a training step's forward outputs
        (:func:`free_steps`; None: kept on a CPU, freed on a GPU), to compare the two rules on measured rows."""
        graph = arrays.graph
        flops, moved, out_bytes, input_bytes = arrays.at(batches)
        views = np.array([n.is_view for n in graph.nodes], dtype=bool)[:, None]
        launch = np.where(views, 0.0, device.launch_overhead_s)
        compute = np.where(views, 0.0, flops / _node_rates(graph, device, config, ideal=False)[:, None])
        memory = np.where(views, 0.0, moved / _attainable(device, "memory", "memory"))
        node_s = np.maximum(compute, memory) + launch
        ideal = np.maximum(
            flops / _node_rates(graph, device, config, ideal=True)[:, None],
            moved / sheet(device).memory_bandwidth_bytes_per_s,
        )
        ideal_s = np.where(views, 0.0, ideal + launch).sum(axis=0)
        optimizer_s = np.full(len(batches), _optimizer_step_s(graph, device, config))
        if config.phase == "training" and config.offload_optimizer and device.kind == "gpu":
            backward = node_s[graph.backward_start :].sum(axis=0)
            optimizer_s = optimizer_step.offload_s(graph, device, config, backward)
        if optimizer_s[0] > 0:  # the ideal step moves the optimizer's bytes at the full datasheet bandwidth
            ideal_s = ideal_s + _optimizer_bytes(graph, config) / sheet(device).memory_bandwidth_bytes_per_s
        latency = node_s.sum(axis=0) + optimizer_s
        if device.kind == "cpu" and config.phase == "training":
            out_bytes = out_bytes + cpu_math_attention_bytes(graph, out_bytes)
        picked = picked_elements(graph)  # one walk, shared by the byte split and the liveness
        gpu = device.kind == "gpu"  # GPU memory model 3 (memory_model.GPU_MEMORY_MODEL_VERSION)
        workspace = gpu_conv_workspace_bytes(graph, moved, out_bytes) if gpu else None
        kept = not gpu if forward_outputs_kept is None else forward_outputs_kept
        frees = free_steps(graph, picked, forward_outputs_kept=kept)
        born = gpu and config.phase == "training"  # gradients born in the backward
        walk = element_bytes(graph, out_bytes, picked, gradients_walk=born)
        if born and config.offload_optimizer:  # ZeRO-Offload streams each gradient out as it is made
            walk = without_gradients(graph, walk, picked)
        if born:
            trainable = 0.0 if config.offload_optimizer else float(training_bytes(graph, config).gradients)
            parts = backward_born_peak(
                graph,
                walk,
                frees,
                workspace,
                set(picked),
                trainable,
                optimizer_step.scratch_bytes(graph, config, trainable),
            )
            peak, scratch, temporaries, at_step = (
                parts.total,
                parts.workspace,
                parts.optimizer_temporaries,
                parts.at_optimizer_step,
            )
        else:
            peak, scratch = activation_peak_parts(walk, frees, workspace)
            temporaries, at_step = np.zeros_like(peak), np.zeros(len(peak), dtype=bool)
        activations = peak + input_bytes
        busy = np.maximum(compute, MEMORY_POWER_WEIGHT * memory).sum(axis=0) + MEMORY_POWER_WEIGHT * optimizer_s
        utilisation = np.clip(busy / np.maximum(latency, 1e-30), 0.0, 1.0)
        power = device.idle_power_w + (device.tdp_w - device.idle_power_w) * utilisation
        return Evaluation(
            node_s,
            compute,
            memory,
            optimizer_s,
            latency,
            np.minimum(ideal_s, latency),
            activations,
            power,
            scratch,
            temporaries,
            at_step,
        )

    def latency_s(self, graph: OpGraph, device: Device, config: RunConfig) -> float:
        arrays = CostArrays.from_graph(graph)
        return float(self.evaluate(arrays, device, config, np.array([graph.batch_size])).latency_s[0])

    def predict(self, graph: OpGraph, device: Device, config: RunConfig) -> PredictorOutput:
        ev = self.evaluate(CostArrays.from_graph(graph), device, config, np.array([graph.batch_size]))
        return self.output(graph, device, config, ev)

    def output(self, graph: OpGraph, device: Device, config: RunConfig, ev: Evaluation) -> PredictorOutput:
        """The prediction from an evaluation at the graph's own batch (the two-timeline predictor reuses it)."""
        latency_s, power_w = float(ev.latency_s[0]), float(ev.power_w[0])
        memory = memory_terms(graph, device, config, float(ev.activations_bytes[0]), *_peak_parts(ev, config))
        energy_j = power_w * latency_s
        rows = _contributions(graph, ev, latency_s, config)
        # a launch-bound step's pure roofline is its point: the low end then mirrors the high one (intervals.py)
        low_ms, high_ms = bracket(latency_s * 1e3, float(ev.ideal_latency_s[0]) * 1e3, latency_s * HIGH_FACTOR * 1e3)
        return PredictorOutput(
            latency_ms=Prediction(latency_s * 1e3, "ms", low_ms, high_ms, NAME, VERSION),
            # NB: the memory model is structural (sizes are exact); the band covers allocator rounding and
            # workspace (cuBLAS, cuDNN) that the graph does not show.
            peak_memory_bytes=Prediction(
                float(memory.total_bytes), "bytes", memory.total_bytes * 0.9, memory.total_bytes * 1.25, NAME, VERSION
            ),
            memory=memory,
            energy_j=Prediction(energy_j, "J", energy_j * (1 - ENERGY_BAND), energy_j * HIGH_FACTOR, NAME, VERSION),
            avg_power_w=Prediction(
                power_w,
                "W",
                power_w * (1 - ENERGY_BAND),
                max(power_w, min(device.tdp_w, power_w * (1 + ENERGY_BAND))),
                NAME,
                VERSION,
            ),
            per_op=rows[: config.top_ops],
            by_kind=breakdown.by_kind(rows),
            blocks=breakdown.repeated_blocks(rows),
            recompute_ms=recompute_s(graph, ev.node_s[:, 0]) * 1e3,
        )


def recompute_s(graph: OpGraph, node_s: np.ndarray) -> float:
    """Seconds of the ops activation checkpointing recomputes (``attrs["recompute"]``), from per-node seconds."""
    marked = [i for i, n in enumerate(graph.nodes) if n.attrs.get("recompute")]
    return float(node_s[marked].sum()) if marked else 0.0


def _peak_parts(ev: Evaluation, config: RunConfig) -> tuple[float, float, str]:
    """(workspace, optimizer temporaries, where the peak falls) at the graph's own batch, for ``memory_terms``."""
    if ev.workspace_bytes is None:
        return 0.0, 0.0, ""
    at_step = bool(ev.peak_at_optimizer_step[0])
    where = "forward" if config.phase == "inference" else ("optimizer step" if at_step else "backward")
    return float(ev.workspace_bytes[0]), float(ev.optimizer_temporaries_bytes[0]), where


def _optimizer_step_s(graph: OpGraph, device: Device, config: RunConfig) -> float:
    """An optimizer step is memory-bound: read parameter, gradient and states, write parameter and states."""
    if config.phase != "training" or config.optimizer == "none" or config.offload_optimizer:
        return 0.0
    # NB: a foreach or fused step's launches overlap its long memory-bound kernels (about 4 exposed); a for-loop
    # step's dozen short kernels per parameter do not (optimizer_step.device_launches)
    launches = optimizer_step.device_launches(graph, config)
    return (
        _optimizer_bytes(graph, config) / _attainable(device, "memory", "memory") + launches * device.launch_overhead_s
    )


def _optimizer_bytes(graph: OpGraph, config: RunConfig) -> int:
    """The step reads the gradients and reads and writes the weights and the state."""
    held = training_bytes(graph, config)  # the trainable weights take the bytes their gradients do
    return int(3 * held.gradients + 2 * held.optimizer_state)


def op_contribution(node: OpNode, time_s: float, share: float, bound: str) -> OpContribution:
    """One per-op row of a report: the node's names, FLOPs and bytes, with its time, share and what bounds it."""
    moved = node.bytes_read + node.bytes_written
    return OpContribution(
        name=node.name,
        op=node.op,
        target=node.target,
        module_path=node.module_path,
        time_ms=time_s * 1e3,
        share=share,
        bound=bound,
        flops=node.flops,
        bytes_moved=moved,
        arithmetic_intensity_flop_per_byte=node.flops / moved if moved else 0.0,
    )


def _contributions(graph: OpGraph, ev: Evaluation, latency_s: float, config: RunConfig) -> tuple[OpContribution, ...]:
    rows = []
    for i, node in enumerate(graph.nodes):
        t, compute_s, memory_s = float(ev.node_s[i, 0]), float(ev.compute_s[i, 0]), float(ev.memory_s[i, 0])
        if t <= 0:
            continue
        work_s = max(compute_s, memory_s)
        bound = "overhead" if t - work_s > work_s else ("compute" if compute_s >= memory_s else "memory")
        rows.append(op_contribution(node, t, t / latency_s if latency_s else 0.0, bound))
    optimizer_s = float(ev.optimizer_s[0])
    if optimizer_s > 0:
        rows.append(optimizer_row(graph, config, optimizer_s, latency_s))
    rows.sort(key=lambda r: r.time_ms, reverse=True)
    return tuple(rows)  # every op: the caller keeps the top ones and totals them all


def optimizer_row(graph: Any, config: Any, optimizer_s: float, total_s: float) -> OpContribution:
    """The optimizer step as a per-op row (memory-bound: it streams the parameters, gradients and state)."""
    return OpContribution(
        name="optimizer_step",
        op=ops.OPTIMIZER,
        target=config.optimizer,
        module_path="",
        time_ms=optimizer_s * 1e3,
        share=optimizer_s / total_s if total_s else 0.0,
        bound="memory",
        flops=10 * graph.trainable_param_count,
        bytes_moved=_optimizer_bytes(graph, config),
        arithmetic_intensity_flop_per_byte=0.0,
    )


def make_predictor() -> AnalyticalPredictor:
    return AnalyticalPredictor()
