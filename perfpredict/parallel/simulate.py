"""The parallel step, joined: tensor-parallel shard -> pipeline stages -> per-stage compute from the single-GPU
predictors (a cp rank's share of it) -> communication on the interconnect -> the pipeline schedule -> a
ParallelReport.

Per stage and microbatch, a rank computes its forward and backward (the predictor's time on the stage's graph;
under context parallelism its 1/cp share, plus what the KV ring exposes; with activation checkpointing each
layer's forward again before its backward), runs its tensor-parallel collectives on the critical path (Megatron
does not overlap them by default; ``async_tp`` hides them behind their matmuls) and sends its activations to the
next stage. Data-parallel collectives run on their own stream and overlap the compute as ``dp_timing`` models.
The step is the schedule over the stages (``schedules``), plus the gradient reduction the last backward could not
hide, plus the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from perfpredict.parallel import async_tp, context_parallel, pipeline_parallel, recompute, schedules, tensor_parallel
from perfpredict.parallel.collectives import SEND_RECV, Collective, collective_s
from perfpredict.parallel.dp_timing import DataParallelTime, FsdpOptions, data_parallel_time, units_of
from perfpredict.parallel.interconnect import GroupLink, Interconnect
from perfpredict.parallel.plan import ParallelPlan
from perfpredict.parallel.structure import backward_start, layer_labels
from perfpredict.parallel.timing import RankTime, analytical_node_s, rank_time
from perfpredict.request import Request


@dataclass(frozen=True)
class Links:
    tp: GroupLink
    dp: GroupLink
    pp: GroupLink
    cp: GroupLink | None = None  # context-parallel ring (None: cp=1)
    replicate: GroupLink | None = None  # HYBRID_SHARD: the all-reduce across shard groups (None otherwise)


@dataclass(frozen=True)
class StageRun:
    """Everything computed for one stage: its cut, its compute, its collectives and their time."""

    stage: pipeline_parallel.Stage
    labels: list[int]
    start: int
    time: RankTime
    tp: tuple[Collective, ...]
    tp_forward_s: float
    tp_backward_s: float
    p2p_s: float
    dp: DataParallelTime
    recv_bytes: int  # the activation it receives per microbatch (and whose gradient it sends back)
    recompute_s: float = 0.0  # of the backward, activation checkpointing's forward again, per microbatch
    ring: context_parallel.RingTime | None = None  # context parallelism's KV ring, per microbatch

    @property
    def microbatch_s(self) -> float:
        return (
            self.time.forward_s
            + self.time.backward_s
            + self.tp_forward_s
            + self.tp_backward_s
            + self.p2p_s
            + self.dp.per_microbatch_exposed_s
        )


def links_of(ic: Interconnect, plan: ParallelPlan) -> Links:
    """Rank layout tp-cp-dp-pp (Megatron's default): tp neighbours, cp tp apart, dp tp*cp apart, stages tp*cp*dp
    apart. Every group of a kind runs at once and the step waits for the slowest, so each kind gets its slowest
    group's link (rank 0's group can sit inside one node while another crosses a node boundary, when a size does not
    divide the node). HYBRID_SHARD's dp group is its shard group (consecutive dp ranks) and ``replicate`` the
    ranks holding the same shard in the other groups."""
    tp, cp, dp, pp = plan.tp, plan.cp, plan.dp, plan.pp
    inner = tp * cp

    def slowest(ranks: int, stride: int, firsts) -> GroupLink:
        return _slowest(ic, ranks, stride, plan.gpus_per_node, firsts, plan.domain)

    # the gradients' group: the dp replicas and the cp ranks of each (consecutive, tp apart)
    grad_firsts = [t + inner * dp * s for s in range(pp) for t in range(tp)]
    shard, replicate = dp * cp, None
    if plan.fsdp and plan.fsdp_strategy == "hybrid_shard" and plan.shard_ranks < dp * cp:
        shard = plan.shard_ranks
        replicate = slowest(dp * cp // shard, tp * shard, [f + tp * k for f in grad_firsts for k in range(shard)])
        grad_firsts = [f + tp * g for f in grad_firsts for g in range(0, dp * cp, shard)]
    return Links(
        slowest(tp, 1, (tp * g for g in range(cp * dp * pp))),
        slowest(shard, tp, grad_firsts),
        slowest(2, inner * dp, range(max(inner * dp * (pp - 1), 1))),  # stage s's rank r sends to r + tp*cp*dp
        slowest(cp, tp, [t + inner * g for g in range(dp * pp) for t in range(tp)]) if cp > 1 else None,
        replicate,
    )


def _slowest(
    ic: Interconnect, ranks: int, stride: int, gpus_per_node: int, firsts, domain: int | None = None
) -> GroupLink:
    """The slowest link among groups starting at ``firsts`` (where a group falls on nodes depends on its first
    rank modulo the NVLink domain only)."""
    span = domain or gpus_per_node
    starts = {first % span: first for first in firsts}.values()
    links = [ic.group(ranks, stride, gpus_per_node, first, domain) for first in starts]
    return min(links, key=lambda link: (link.bus_bandwidth_gb_per_s, -link.nodes))


def run_stages(
    graph, plan: ParallelPlan, device: Any, options: Request, links: Links, grad_bytes: float, gathered_bytes: float
) -> list[StageRun]:
    """Every stage's compute and communication per microbatch (``grad_bytes`` and ``gathered_bytes``: what a
    data-parallel reduction and gather move per parameter)."""
    from perfpredict.graph_report import training_graph

    shard = tensor_parallel.shard(graph, plan.tp, plan.sp)
    rank_graph = training_graph(shard.graph, options, device)  # checkpointing's recompute, on the rank's shard
    labels = layer_labels(rank_graph)
    start = backward_start(rank_graph)
    weights = analytical_node_s(rank_graph, device, options)[0] if plan.pp > 1 else [0.0] * len(labels)
    stages = pipeline_parallel.split_stages(rank_graph, plan.pp, labels, weights)
    return [
        _run_stage(st, stages, shard, labels, start, plan, device, options, links, (grad_bytes, gathered_bytes))
        for st in stages
    ]


def _run_stage(st, stages, shard, labels, start, plan, device, options, links, dp_bytes) -> StageRun:
    training = shard.graph.phase == "training"
    mine = set(st.nodes)
    st_labels = [labels[i] for i in st.nodes]
    st_start = sum(1 for i in st.nodes if i < start)
    time = context_parallel.split_time(rank_time(st.graph, device, options, st_labels, st_start), plan.cp)
    grad_ranks = plan.dp * plan.cp
    if training and grad_ranks > 1 and plan.shard_stage:  # ZeRO and FSDP: each rank steps its optimizer shard
        time = replace(time, optimizer_s=time.optimizer_s / plan.shard_ranks)
    tp = tuple(c for c in shard.collectives if c.node in mine)
    fwd_tp, bwd_tp = _tp_by_label(tp, labels, plan, links.tp, time, st, device.launch_overhead_s)
    ring = context_parallel.ring_time(
        time, context_parallel.kv_bytes_by_layer(st.graph, st_labels, st_start), plan.cp, links.cp
    )
    fwd = {k: v + fwd_tp.get(k, 0.0) + ring.forward_s.get(k, 0.0) for k, v in time.layer_forward_s.items()}
    bwd = {k: v + bwd_tp.get(k, 0.0) + ring.backward_s.get(k, 0.0) for k, v in time.layer_backward_s.items()}
    hybrid = plan.fsdp and plan.fsdp_strategy == "hybrid_shard" and links.replicate is not None
    fsdp = FsdpOptions(
        reshard=not (plan.fsdp and plan.fsdp_strategy == "shard_grad_op"),
        prefetch=plan.fsdp_prefetch,
        shard=plan.shard_ranks if hybrid else 0,
        replicas=grad_ranks // plan.shard_ranks if hybrid else 1,
        replicate_link=links.replicate,
    )
    dp = data_parallel_time(
        units_of(st.graph, st_labels, fwd, bwd, st_start),
        plan.shard_stage,
        (plan.shard_ranks if hybrid else grad_ranks) if training else 1,
        links.dp,
        *dp_bytes,
        plan.bucket_mb,
        plan.microbatches,
        fsdp if training else None,
    )
    previous = stages[st.index - 1].send_bytes if st.index else 0
    sends = [st.send_bytes] + ([previous] if training else [])  # activations on, their gradients back
    each = schedules.sends_per_microbatch(plan.schedule, plan.virtual_stages)
    p2p = each * sum(collective_s(SEND_RECV, b / plan.cp, 2, links.pp) for b in sends if b)
    return StageRun(
        st,
        st_labels,
        st_start,
        time,
        tp,
        sum(fwd_tp.values()) + sum(ring.forward_s.values()),
        sum(bwd_tp.values()) + sum(ring.backward_s.values()),
        p2p,
        dp,
        previous,
        recompute.seconds_per_microbatch(time, plan.cp),
        ring,
    )


def _tp_by_label(collectives, labels: list[int], plan: ParallelPlan, link: GroupLink, time, stage, launch_s):
    """Seconds the tensor-parallel collectives add to the critical path per layer label, forward and backward:
    each whole, or under async TP what its matmuls cannot hide (``async_tp``)."""
    fwd: dict[int, float] = {}
    bwd: dict[int, float] = {}
    partners = _matmul_groups(stage, time) if plan.async_tp and time.node_s is not None else {}
    for c in collectives:
        if c.hidden:
            continue
        table = fwd if c.phase == "forward" else bwd
        label = labels[c.node] if c.node >= 0 else -1
        seconds = collective_s(c.kind, c.size_bytes / plan.cp, plan.tp, link)  # a cp rank's tokens
        if partners and c.kind != "all_reduce" and c.node in partners:
            seconds = async_tp.exposed_s(seconds, partners[c.node], plan.tp, launch_s)
        table[label] = table.get(label, 0.0) + seconds
    return fwd, bwd


def _matmul_groups(stage, time) -> dict[int, float]:
    """Per matmul of the stage (its index in the rank graph): the seconds of the matmuls beside it, the same
    phase's matmuls of its parent module (q, k and v read one gathered input; gate and up another), which a
    decomposed collective overlaps."""
    from perfpredict.core import ops
    from perfpredict.parallel.structure import backward_start, module_name

    groups: dict[tuple[str, bool], float] = {}
    keys = {}
    first_backward = backward_start(stage.graph)
    for local, node in enumerate(stage.graph.nodes):
        if node.op != ops.MATMUL:
            continue
        parent = module_name(node.module_path).rsplit(".", 1)[0]
        key = (parent, local >= first_backward)
        groups[key] = groups.get(key, 0.0) + float(time.node_s[local])
        keys[stage.nodes[local]] = key
    return {index: groups[key] for index, key in keys.items()}


def stage_times(runs: list[StageRun]) -> list[schedules.StageTime]:
    """Each stage's forward, backward and weight-gradient seconds per microbatch, as the schedules take them."""
    out = []
    for r in runs:
        forward = r.time.forward_s + r.tp_forward_s + r.p2p_s / 2
        backward = r.microbatch_s - forward
        out.append(schedules.StageTime(forward, backward, r.time.weight_grad_s))
    return out


def step_s(runs: list[StageRun], plan: ParallelPlan) -> float:
    """The pipeline schedule over the stages, then the reduction left after the last backward, then the optimizer
    step."""
    body = schedules.step_s(plan.schedule, stage_times(runs), plan.microbatches, plan.virtual_stages)
    tail = max(r.dp.last_microbatch_exposed_s for r in runs)
    return body + tail + max(r.time.optimizer_s + r.dp.after_step_s for r in runs)


def bubble_s(runs: list[StageRun], plan: ParallelPlan) -> float:
    """The slowest stage's idle seconds in the schedule."""
    if len(runs) == 1:
        return 0.0
    times = stage_times(runs)
    body = schedules.step_s(plan.schedule, times, plan.microbatches, plan.virtual_stages)
    return max(body - plan.microbatches * max(t.total_s for t in times), 0.0)
