"""The multi-GPU step as trainers state it (``perfpredict.core.trainer`` holds the definitions and arithmetic):
tokens/s per GPU, MFU and HFU against the datasheet's dense peak, and the step split into compute, exposed
communication, bubble, recompute and host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfpredict.core import trainer
from perfpredict.core.trainer import TrainerMetrics, split

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.parallel.plan import ParallelPlan

__all__ = ["compute_dtype", "dense_peak", "metrics", "split"]


def compute_dtype(graph: OpGraph, precision: str | None, request: Any) -> str:
    """The dtype the matmuls run in (float8 where the Request has the memory side's ``float8`` field set)."""
    return trainer.compute_dtype(graph.dtype, precision, getattr(request, "float8", None))


def dense_peak(device: Any, dtype: str, tf32: bool) -> float:
    """The datasheet's dense peak for ``dtype`` (FLOP/s): tensor cores, except float32 without TF32."""
    from perfpredict.hardware.devices import datasheet_device

    return datasheet_device(device).peak_flops(dtype, tensor_core=dtype != "float32" or bool(tf32))[0]


def metrics(
    graph: OpGraph,
    plan: ParallelPlan,
    step_s: float,
    recompute_flops_per_microbatch: float,
    device: Any,
    dtype: str,
    tf32: bool,
    start: int,
) -> TrainerMetrics:
    """The global step's figures: ``microbatches x dp`` micro-batches over the plan's GPUs."""
    per_mb, rule = trainer.model_flops_per_microbatch(graph, start)
    copies = plan.microbatches * plan.dp
    return trainer.metrics(
        graph,
        step_s,
        plan.world_size,
        graph.batch_size * copies,
        per_mb * copies,
        (per_mb + recompute_flops_per_microbatch) * copies,
        dense_peak(device, dtype, tf32),
        dtype,
        rule,
    )
