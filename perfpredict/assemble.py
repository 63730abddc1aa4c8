"""Turn a predictor's output into a PerfReport: throughput, carbon, cost, MIG advice, warnings.

Predictors say how long one call takes and how much memory and energy it needs; everything derived from those
(per-sample figures, a workload's carbon and cost, which MIG slice fits) is computed once, here.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

from perfpredict.core.report import GraphSummary, PerfReport, Prediction
from perfpredict.core.units import GIB
from perfpredict.predictors.base import PredictorOutput, RunConfig
from perfpredict.predictors.registry import get_predictor, resolve_predictor

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.hardware.devices import Device

INFERENCE_WORKLOAD_SAMPLES = 1000
TRAINING_WORKLOAD_STEPS = 1000
COVERAGE_WARNING_BELOW = 0.95


def build_report(
    graph: OpGraph,
    device: Device,
    config: RunConfig,
    predictor: str = "auto",
    *,
    model_name: str = "",
    max_latency_ms: float | None = None,
    min_throughput_per_s: float | None = None,
    grid_g_per_kwh: float | None = None,
    price_usd_per_hour: float | None = None,
    workload_calls: int | None = None,
    assumed: Mapping[str, str] | None = None,
) -> PerfReport:
    """The report for ``graph`` on ``device``. ``assumed``: what the caller chose for the user (where the dtype
    came from, ...), listed first in the report's assumptions."""
    from perfpredict.assumptions import assumptions, dtype_warnings
    from perfpredict.core import breakdown
    from perfpredict.hardware import carbon, cost, mig

    predictor, choice_note = resolve_predictor(predictor, device.parent or device.name)
    model = get_predictor(predictor)
    out = _bracketed(model.predict(graph, device, config))
    batch = max(1, graph.batch_size)
    calls, workload = _workload(config.phase, batch, workload_calls)
    grid = carbon.grid_intensity_g_per_kwh(grid_g_per_kwh)
    price = price_usd_per_hour if price_usd_per_hour is not None else cost.price_usd_per_hour(device)
    lat = out.latency_ms
    throughput = Prediction(
        batch / lat.value * 1e3,
        "samples/s",
        batch / lat.high * 1e3,
        batch / max(lat.low, 1e-12) * 1e3,
        lat.predictor,
        lat.predictor_version,
        lat.ood,
    )
    carbon_per_call = out.energy_j.scaled(calls * carbon.carbon_g(1.0, grid), "g")
    cost_pred = lat.scaled(calls * cost.cost_usd(1e-3, price or 0.0), "USD")
    advice = None
    if device.mig_profiles:
        advice = mig.advise_mig(
            device,
            int(out.peak_memory_bytes.value),
            lambda d: _latency_ms(model, graph, d, config),
            batch,
            max_latency_ms=max_latency_ms,
            min_throughput_per_s=min_throughput_per_s,
        )
    fits = out.peak_memory_bytes.value <= device.memory_bytes
    per_op, by_kind, blocks, outside_ms = breakdown.of_latency(out.per_op, out.by_kind, out.blocks, lat.value)
    memory = _memory_of_peak(out)
    return PerfReport(
        model_name=model_name or graph.name,
        device=device.name,
        phase=config.phase,
        batch_size=batch,
        seq_len=graph.seq_len,
        dtype=graph.dtype,
        latency_ms=lat,
        throughput_per_s=throughput,
        peak_memory_bytes=out.peak_memory_bytes,
        memory=memory,
        fits_in_memory=fits,
        device_memory_bytes=device.memory_bytes,
        energy_j=out.energy_j,
        energy_per_sample_j=out.energy_j.scaled(1.0 / batch),
        avg_power_w=out.avg_power_w,
        carbon_g=carbon_per_call,
        grid_intensity_g_per_kwh=grid,
        cost_usd=cost_pred,
        price_usd_per_hour=price,
        workload=workload,
        workload_calls=calls,
        per_op=per_op,
        by_kind=by_kind,
        blocks=blocks,
        outside_ops_ms=outside_ms,
        outside_ops_label=_outside_label(out, outside_ms),
        coverage=graph.coverage,
        graph=GraphSummary(
            len(graph.nodes),
            len(graph.edges),
            graph.subgraphs,
            graph.total_flops,
            graph.total_bytes,
            graph.param_count,
            graph.source,
        ),
        mig=advice,
        warnings=(_warnings(graph, device, config, out) + out.warnings + dtype_warnings(graph, device)),
        notes=(
            _notes(graph, device, predictor, price)
            + _load_note(graph, config, out)
            + ((choice_note,) if choice_note else ())
        ),
        device_source=device.source,
        timeline=out.timeline,
        assumptions=assumptions(graph, device, config, out, assumed),
        **_trainer_terms(graph, device, config, lat.value / 1e3, out),
        recompute=_recompute(graph, out),
    )


def _trainer_terms(graph: OpGraph, device: Device, config: RunConfig, step_s: float, out: PredictorOutput) -> dict:
    """A training step as trainers state it (``perfpredict.core.trainer``): one GPU's tokens/s, MFU and HFU (the
    checkpointing recompute's FLOPs counted in HFU only), and the step split (no communication or bubble on one GPU;
    the recompute's time is its own part)."""
    if config.phase != "training":
        return {}
    from perfpredict.compiler_hooks.recompute import recompute_summary
    from perfpredict.core import trainer
    from perfpredict.hardware.devices import datasheet_device

    model, rule = trainer.model_flops_per_microbatch(graph)
    dtype = trainer.compute_dtype(graph.dtype, config.precision, getattr(config, "float8", None))
    tensor_core = dtype != "float32" or config.tf32
    peak = datasheet_device(device).peak_flops(dtype, tensor_core=tensor_core)[0]
    hardware = model + recompute_summary(graph)[2]
    metrics = trainer.metrics(graph, step_s, 1, graph.batch_size, model, hardware, peak, dtype, rule)
    timeline = out.timeline
    host_s = max(timeline.wall_ms - timeline.device_ms, 0.0) / 1e3 if timeline is not None else 0.0
    return {"trainer": metrics, "step_split": trainer.split(step_s, 0.0, 0.0, out.recompute_ms / 1e3, host_s)}


def _recompute(graph: OpGraph, out: PredictorOutput):
    """The checkpointing recompute's FLOPs and time, where the graph recomputes anything."""
    from perfpredict.compiler_hooks.recompute import recompute_summary
    from perfpredict.core.report import RecomputeShare

    policy, regions, flops = recompute_summary(graph)
    if not regions:
        return None
    latency = out.latency_ms.value
    return RecomputeShare(policy, regions, flops, out.recompute_ms, out.recompute_ms / latency if latency else 0.0)


def _memory_of_peak(out: PredictorOutput):
    """The memory terms, with what a whole-model predictor's peak holds beyond them as a term of its own, so they
    sum to the peak the report states."""
    rest = round(out.peak_memory_bytes.value) - (out.memory.total_bytes - out.memory.unattributed_bytes)
    if abs(rest) <= 1:
        return out.memory
    return dataclasses.replace(out.memory, unattributed_bytes=int(rest))


def _outside_label(out: PredictorOutput, outside_ms: float) -> str:
    """What the latency holds beyond the op rows: the predictor's word for it, or, where a whole-model predictor's
    latency differs from the roofline op rows it lists, that."""
    if out.outside_ops_label:
        return out.outside_ops_label
    if abs(outside_ms) <= 1e-3 * out.latency_ms.value:  # the rows are the latency (analytical)
        return ""
    return (
        f"not attributed to ops: {out.latency_ms.predictor} predicts the step as a whole, the op rows are the "
        "roofline's"
    )


def _latency_ms(model, graph: OpGraph, device: Device, config: RunConfig) -> float:
    fast = getattr(model, "latency_s", None)
    if fast is not None:
        return fast(graph, device, config) * 1e3
    return model.predict(graph, device, config).latency_ms.value


def _workload(phase: str, batch: int, workload_calls: int | None) -> tuple[int, str]:
    if workload_calls is not None:
        calls = int(workload_calls)
        what = "inferences" if phase == "inference" else "training steps"
        return calls, f"{calls:,} calls ({calls * batch:,} samples)" if phase == "inference" else f"{calls:,} {what}"
    if phase == "training":
        return TRAINING_WORKLOAD_STEPS, f"a training run of {TRAINING_WORKLOAD_STEPS:,} steps"
    calls = math.ceil(INFERENCE_WORKLOAD_SAMPLES / batch)
    return calls, f"{INFERENCE_WORKLOAD_SAMPLES:,} inferences ({calls:,} calls of batch {batch})"


def _levers(graph: OpGraph, device: Device):
    """What a single-device run can change: its batch, its dtype, and (a whole GPU) more GPUs."""
    from perfpredict.core.memory_advice import Levers

    gpu = device.kind == "gpu"
    half = "bfloat16" if not gpu or device.supports_dtype("bfloat16") else "float16"
    return Levers(batch=graph.batch_size, dtype=graph.dtype, half_dtype=half, multi_gpu=gpu and device.parent is None)


def _warnings(graph: OpGraph, device: Device, config: RunConfig, out_: PredictorOutput) -> tuple[str, ...]:
    from perfpredict.core.memory_advice import memory_warning

    out = []
    if graph.coverage < COVERAGE_WARNING_BELOW:
        unknown = sorted(graph.unknown_targets.items(), key=lambda kv: -kv[1])
        names = ", ".join(f"{name} x{count}" for name, count in unknown[:8])
        message = (
            f"coverage {graph.coverage:.0%}: no cost model for {names}; they are charged memory traffic "
            "and launch overhead only"
        )
        warnings.warn(f"perfpredict: {message}", UserWarning, stacklevel=3)
        out.append(message)
    elif graph.unknown_targets:
        names = ", ".join(sorted(graph.unknown_targets))
        out.append(f"ops without a cost model (charged memory traffic only): {names}")
    m = out_.memory
    tight = memory_warning(
        out_.peak_memory_bytes.value,
        device.memory_bytes,
        config.phase,
        {
            "weights": m.params_bytes,
            "gradients": m.gradients_bytes,
            "optimizer state": m.optimizer_state_bytes,
            "optimizer temporaries": m.optimizer_temporaries_bytes,
            "activations": m.activations_bytes,
        },
        optimizer=config.optimizer,
        where=f"{device.name}: ",
        levers=_levers(graph, device),
    )
    if tight:
        out.append(tight)
    return tuple(out)


def _load_note(graph: OpGraph, config: RunConfig, out: PredictorOutput) -> tuple[str, ...]:
    extra = out.memory.load_transient_bytes
    if extra <= 0:
        return ()
    return (
        f"peak memory includes {extra / GIB:.2f} GiB for building the weights in {config.weights_built_in} "
        f"and casting them to {graph.dtype}; loaded straight in {graph.dtype} (weights_built_in=None) the peak "
        f"is {(out.peak_memory_bytes.value - extra) / GIB:.2f} GiB",
    )


def _bracketed(out: PredictorOutput) -> PredictorOutput:
    """Every interval brackets its point, whichever predictor made it (predictors/intervals.py). The average power
    is the exception at the board's TDP: it cannot go higher, so its high end may be its point."""
    from dataclasses import replace

    from perfpredict.predictors.intervals import bracketed

    power = out.avg_power_w
    return replace(
        out,
        latency_ms=bracketed(out.latency_ms),
        peak_memory_bytes=bracketed(out.peak_memory_bytes),
        energy_j=bracketed(out.energy_j),
        avg_power_w=power if power.low < power.value else replace(power, low=bracketed(power).low),
    )


def _notes(graph: OpGraph, device: Device, predictor: str, price: float | None) -> tuple[str, ...]:
    from perfpredict.assumptions import CAPTURE_NOTES

    notes = [n for n in graph.notes if not n.startswith(tuple(CAPTURE_NOTES))]  # stated among the assumptions
    if predictor == "analytical":
        notes.append(
            "analytical estimate: per-op roofline without fusion, not calibrated against measurements; "
            "the interval is a heuristic band"
        )
    if graph.subgraphs > 1:
        notes.append(f"{graph.subgraphs} subgraphs (graph breaks) summed; time between them is not modelled")
    if device.measured and device.kind != "gpu":
        notes.append(f"measured ceilings used for: {', '.join(sorted(device.measured))}")
    if price is None:
        notes.append(f"no price known for {device.name}: cost shown as 0; pass price_usd_per_hour")
    return tuple(notes)
