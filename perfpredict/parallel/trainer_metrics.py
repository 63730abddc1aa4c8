"""What trainers read off a run: tokens (or samples) per second per GPU, MFU and HFU, and where the step goes.

**Model FLOPs** per token, for a sequence model, are ``6 N + 12 L d s``: 6 per parameter (a multiply-add in the
forward, two in the backward) and the attention's scores and values, ``4 s^2 d`` per layer and sequence in the
forward, three times over in training, with no discount for a causal mask. This is the PaLM paper's appendix B
(Chowdhery et al. 2022: ``6N + 12LHQT``) and llm-foundry's ``scripts/train/benchmarking/README.md``
(``mfu = (3 flops_per_seq + 3 attn_flops_per_seq) seq_per_sec / (gpus x peak)`` with ``flops_per_token = 2
n_params`` and ``attn_flops_per_seq = n_layers x 2 x 2 x d_model x seq^2``). N is every parameter (embeddings
included, a tied one once), as llm-foundry counts it; the attention term is read off the graph's forward attention
ops (their FLOPs are ``4 b h s_q s_k d_head``: the same count, for any head layout). A model without a sequence
length counts 3 x its forward FLOPs.

**Hardware FLOPs** add what activation checkpointing recomputes (the checkpointed blocks' forward again), so HFU =
MFU x 4/3 with every block recomputed, as llm-foundry's HFU column counts it. Both are against the GPU's **dense
datasheet peak** for the compute dtype (H100 SXM bf16: 989 TFLOP/s; A100: 312), not a measured ceiling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfpredict.core import ops
from perfpredict.parallel.report import StepSplit, TrainerMetrics

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.parallel.plan import ParallelPlan

FP8 = "float8_e4m3fn"


def model_flops_per_microbatch(graph: OpGraph, start: int) -> tuple[float, str]:
    """(model FLOPs of one microbatch's training step, the rule used)."""
    forward = graph.nodes[:start]
    if graph.seq_len:
        tokens = graph.batch_size * graph.seq_len
        attention = sum(n.flops for n in forward if n.op == ops.ATTENTION)
        return 6.0 * graph.param_count * tokens + 3.0 * attention, "6N + 12 L d s per token (PaLM, llm-foundry)"
    return 3.0 * sum(n.flops for n in forward), "3 x the forward's FLOPs"


def compute_dtype(graph: OpGraph, precision: str | None, request: Any) -> str:
    """The dtype the matmuls run in: float8 where the Request asks for it (the memory side's ``float8`` field),
    else the precision recipe's half type, else the graph's."""
    if getattr(request, "float8", None):
        return FP8
    if precision and ("bf16" in precision):
        return "bfloat16"
    if precision and ("fp16" in precision):
        return "float16"
    if precision in ("fp32",):
        return "float32"
    return graph.dtype


def dense_peak(device: Any, dtype: str, tf32: bool) -> float:
    """The datasheet's dense tensor-core peak for ``dtype`` (FLOP/s)."""
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
    samples = graph.batch_size * plan.microbatches * plan.dp
    tokens = samples * graph.seq_len if graph.seq_len else None
    per_mb, rule = model_flops_per_microbatch(graph, start)
    model = per_mb * plan.microbatches * plan.dp
    hardware = model + recompute_flops_per_microbatch * plan.microbatches * plan.dp
    peak = dense_peak(device, dtype, tf32)
    gpus = plan.world_size
    denominator = step_s * gpus * peak if step_s else 0.0
    return TrainerMetrics(
        tokens_per_step=tokens,
        tokens_per_s_per_gpu=tokens / step_s / gpus if tokens and step_s else None,
        samples_per_s_per_gpu=samples / step_s / gpus if step_s else 0.0,
        model_flops_per_step=model,
        hardware_flops_per_step=hardware,
        mfu=model / denominator if denominator else 0.0,
        hfu=hardware / denominator if denominator else 0.0,
        peak_flops_per_s=peak,
        compute_dtype=dtype,
        model_flops_rule=rule,
    )


def split(step_s: float, exposed_s: float, bubble_s: float, recompute_s: float, host_s: float) -> StepSplit:
    """The step in five parts that sum to it: compute is what is left of the step."""
    compute = max(step_s - exposed_s - bubble_s - recompute_s - host_s, 0.0)
    return StepSplit(compute * 1e3, exposed_s * 1e3, bubble_s * 1e3, recompute_s * 1e3, host_s * 1e3)
