"""What trainers read off a training step: tokens (or samples) per second per GPU, MFU and HFU, and where the step
goes. Data and arithmetic only; the single-GPU report (``assemble``) and the multi-GPU one
(``parallel.trainer_metrics``) fill them in.

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

from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfpredict.core import ops

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph


@dataclass(frozen=True)
class TrainerMetrics:
    """The run as trainers state it: throughput per GPU, MFU and HFU against the dense peak."""

    tokens_per_step: int | None  # the global batch in tokens (None without a sequence length)
    tokens_per_s_per_gpu: float | None
    samples_per_s_per_gpu: float
    model_flops_per_step: float  # 6N + attention per token, over the global batch
    hardware_flops_per_step: float  # + what activation checkpointing recomputes
    mfu: float
    hfu: float
    peak_flops_per_s: float  # the datasheet's dense peak for compute_dtype
    compute_dtype: str
    model_flops_rule: str


@dataclass(frozen=True)
class StepSplit:
    """The step in five parts that sum to it (milliseconds)."""

    compute_ms: float
    exposed_communication_ms: float
    bubble_ms: float
    recompute_ms: float
    host_ms: float  # the GPU idle waiting for the host (a host-bound rank)

    def rows(self) -> list[tuple[str, float]]:
        return [
            ("compute", self.compute_ms),
            ("exposed communication", self.exposed_communication_ms),
            ("pipeline bubble", self.bubble_ms),
            ("recompute", self.recompute_ms),
            ("host", self.host_ms),
        ]


def forward_end(graph: OpGraph) -> int:
    """Index of the first backward op. A joint graph lists the forward, ending with the forward's outputs (the
    loss or the logits), and then the backward; a matmul in the backward carries no ``backward`` marker, so the
    last forward output is the better boundary than ``OpGraph.backward_start``."""
    if graph.phase != "training":
        return len(graph.nodes)
    outputs = graph.keep_alive - graph.grad_outputs
    return max(outputs) + 1 if outputs else graph.backward_start


def model_flops_per_microbatch(graph: OpGraph, start: int | None = None) -> tuple[float, str]:
    """(model FLOPs of one training step of ``graph``'s batch, the rule used)."""
    forward = graph.nodes[: forward_end(graph) if start is None else start]
    if graph.seq_len:
        tokens = graph.batch_size * graph.seq_len
        attention = sum(n.flops for n in forward if n.op == ops.ATTENTION)
        return 6.0 * graph.param_count * tokens + 3.0 * attention, "6N + 12 L d s per token (PaLM, llm-foundry)"
    return 3.0 * sum(n.flops for n in forward), "3 x the forward's FLOPs"


def compute_dtype(graph_dtype: str, precision: str | None, float8: str | None = None) -> str:
    """The dtype the matmuls run in: float8 where a float8 recipe is asked (``float8``: "tensorwise", "rowwise",
    "delayed"; None or "none": not), else the precision recipe's half type, else the graph's."""
    if float8 not in (None, "none"):
        return "float8_e4m3fn"
    if precision and "bf16" in precision:
        return "bfloat16"
    if precision and "fp16" in precision:
        return "float16"
    if precision == "fp32":
        return "float32"
    return graph_dtype


def metrics(
    graph: OpGraph,
    step_s: float,
    gpus: int,
    samples: int,
    model_flops: float,
    hardware_flops: float,
    peak_flops_per_s: float,
    dtype: str,
    rule: str,
) -> TrainerMetrics:
    """Per-GPU rates and utilisations of a step of ``samples`` samples over ``gpus`` GPUs taking ``step_s``."""
    tokens = samples * graph.seq_len if graph.seq_len else None
    denominator = step_s * gpus * peak_flops_per_s
    return TrainerMetrics(
        tokens_per_step=tokens,
        tokens_per_s_per_gpu=tokens / step_s / gpus if tokens and step_s else None,
        samples_per_s_per_gpu=samples / step_s / gpus if step_s else 0.0,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        mfu=model_flops / denominator if denominator else 0.0,
        hfu=hardware_flops / denominator if denominator else 0.0,
        peak_flops_per_s=peak_flops_per_s,
        compute_dtype=dtype,
        model_flops_rule=rule,
    )


def split(step_s: float, exposed_s: float, bubble_s: float, recompute_s: float, host_s: float) -> StepSplit:
    """The step in five parts that sum to it: compute is what is left of the step."""
    compute = max(step_s - exposed_s - bubble_s - recompute_s - host_s, 0.0)
    return StepSplit(compute * 1e3, exposed_s * 1e3, bubble_s * 1e3, recompute_s * 1e3, host_s * 1e3)
