"""The assumptions behind issue 46's plan keys, in the words the report states them (``ParallelReport.assumptions``):
the pipeline schedule, FSDP's strategy and overlap, the network between nodes, context parallelism, async TP,
activation checkpointing's recompute and how MFU and HFU are counted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfpredict.parallel import schedules

if TYPE_CHECKING:
    from perfpredict.parallel.plan import ParallelPlan
    from perfpredict.parallel.simulate import Links

_SCHEDULES = {
    schedules.GPIPE: "GPipe: every microbatch's forward, then every backward; bubble (p-1)/m of the compute; every "
    "stage holds all m microbatches' activations",
    schedules.ONE_F_ONE_B: "1F1B: step = sum of stage times + (microbatches - 1) x the slowest; bubble (p-1)/m of the "
    "compute; stage s holds min(p - s, m) microbatches",
    schedules.INTERLEAVED: "interleaved 1F1B with {v} model chunks per rank: bubble (p-1)/(v m) of the compute, "
    "{v}x the point-to-point sends; stage s holds Megatron-LM's warm-up count (p-s-1) x 2 + (v-1) x p + 1 "
    "chunks of 1/v of the stage",
    schedules.ZB1P: "ZB-1P (zero bubble): the backward split into input gradients (B) and weight gradients (W), W "
    "deferred into the bubble at 1F1B's memory; bubble (p-1)(F+B-W) of 1F1B's (p-1)(F+B+W) (ZB-H1, Qi et al. "
    "2024), W read off the graph's parameter-gradient ops",
}


def fsdp_overlap(plan: ParallelPlan) -> str:
    ahead = {0: "no prefetch (each gather waits for the layer before)", 1: "prefetching one layer ahead"}.get(
        plan.fsdp_prefetch, f"prefetching {plan.fsdp_prefetch} layers ahead"
    )
    gathers = (
        "all-gathered before its forward only and kept to its backward (SHARD_GRAD_OP, reshard_after_forward=False)"
        if plan.fsdp_strategy == "shard_grad_op"
        else "all-gathered before its forward and again before its backward (reshard_after_forward=True)"
    )
    text = (
        f"FSDP2 {plan.fsdp_strategy.upper()}: each layer's parameters {gathers}, {ahead}; gradients reduce-scattered "
        "after each layer's backward, every microbatch, overlapping the next"
    )
    if plan.fsdp_strategy == "hybrid_shard":
        text += (
            f"; sharded over groups of {plan.shard_ranks} ranks, each gradient shard then all-reduced across the "
            f"{plan.dp * plan.cp // plan.shard_ranks} replicas"
        )
    dtypes = [f"gathers in {plan.fsdp_param_dtype}"] if plan.fsdp_param_dtype else []
    dtypes += [f"reduces in {plan.fsdp_reduce_dtype}"] if plan.fsdp_reduce_dtype else []
    return text + (f" (MixedPrecisionPolicy: {', '.join(dtypes)})" if dtypes else "")


def assumptions(plan: ParallelPlan, links: Links, training: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    if plan.pp > 1:
        out["pipeline"] = _SCHEDULES[plan.schedule].format(v=plan.virtual_stages) + (
            "; stages balanced by roofline time; activation sends on the critical path"
        )
    if any(link is not None and link.nodes > 1 for link in (links.tp, links.dp, links.pp, links.cp, links.replicate)):
        out["network"] = (
            "between nodes: a ring over the NICs pooled per node (nccl-tests' bus bandwidth), or for an all-reduce "
            "NCCL's tree (latency 2((g-1) intra + log2(nodes) inter hops), 0.92 of the bandwidth) or the "
            "hierarchical split (reduce-scatter in the node, all-reduce of 1/g between nodes, all-gather in the "
            "node), whichever is fastest"
            + (f"; {plan.inter_node_gbps:g} Gb/s per GPU as given" if plan.inter_node_gbps else "")
        )
    if plan.cp > 1:
        out["context_parallel"] = (
            f"ring attention over cp={plan.cp}: each rank holds 1/{plan.cp} of the sequence (zigzag-balanced causal "
            "attention, so 1/cp of the compute each), passes its K/V block cp-1 times per layer (and K/V with their "
            "gradients in the backward), each send overlapped with the attention of the block in hand; gradients "
            "reduced over dp x cp"
        )
    if plan.async_tp:
        out["async_tp"] = (
            "async TP: each sequence-parallel all-gather and reduce-scatter cut into tp chunks overlapped with its "
            "matmul (PyTorch symmetric memory / Wang et al. ASPLOS'23): exposed max(0, comm - matmul) plus one "
            "launch per chunk"
        )
    if training:
        out["mfu"] = (
            "MFU: model FLOPs 6N + 12 L d s per token (PaLM appendix B; llm-foundry's formula, no causal discount) "
            "over the step, against the datasheet's dense peak for the compute dtype; HFU adds the recomputed FLOPs"
        )
    return out
