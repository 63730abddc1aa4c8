"""The parallel step, joined: tensor-parallel shard -> pipeline stages -> per-stage compute from the single-GPU
predictors -> communication on the interconnect -> the 1F1B schedule -> a ParallelReport.

Per stage and microbatch, a rank computes its forward and backward (the predictor's time on the stage's graph),
runs its tensor-parallel collectives on the critical path (Megatron does not overlap them by default) and sends
its activations to the next stage. Data-parallel collectives run on their own stream and overlap the compute as
``dp_timing`` models. The step is the 1F1B schedule over the stages, plus the gradient reduction the last
backward could not hide, plus the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from perfpredict.parallel import pipeline_parallel, tensor_parallel
from perfpredict.parallel.collectives import SEND_RECV, Collective, collective_s
from perfpredict.parallel.dp_timing import DataParallelTime, data_parallel_time, units_of
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
    """Rank layout tp-dp-pp (Megatron's default): tp neighbours, dp tp apart, stages tp*dp apart. Every group of a
    kind runs at once and the step waits for the slowest, so each kind gets its slowest group's link (rank 0's
    group can sit inside one node while another crosses a node boundary, when a size does not divide the node)."""
    tp, dp, pp, gpn = plan.tp, plan.dp, plan.pp, plan.gpus_per_node
    return Links(
        _slowest(ic, tp, 1, gpn, (tp * g for g in range(dp * pp))),
        _slowest(ic, dp, tp, gpn, (t + tp * dp * s for s in range(pp) for t in range(tp))),
        _slowest(ic, 2, tp * dp, gpn, range(max(tp * dp * (pp - 1), 1))),  # stage s's rank r sends to r + tp*dp
    )


def _slowest(ic: Interconnect, ranks: int, stride: int, gpus_per_node: int, firsts) -> GroupLink:
    """The slowest link among groups starting at ``firsts`` (where a group falls on nodes depends on its first
    rank modulo the node size only)."""
    starts = {first % gpus_per_node: first for first in firsts}.values()
    links = [ic.group(ranks, stride, gpus_per_node, first) for first in starts]
    return min(links, key=lambda link: (link.bus_bandwidth_gb_per_s, -link.nodes))


def run_stages(
    graph, plan: ParallelPlan, device: Any, options: Request, links: Links, grad_bytes: float, gathered_bytes: float
) -> list[StageRun]:
    from perfpredict.graph_report import training_graph

    shard = tensor_parallel.shard(graph, plan.tp, plan.sp)
    rank_graph = training_graph(shard.graph, options, device)  # checkpointing's recompute, on the rank's shard
    labels = layer_labels(rank_graph)
    start = backward_start(rank_graph)
    weights = analytical_node_s(rank_graph, device, options)[0] if plan.pp > 1 else [0.0] * len(labels)
    stages = pipeline_parallel.split_stages(rank_graph, plan.pp, labels, weights)
    training = graph.phase == "training"
    runs = []
    for st in stages:
        mine = set(st.nodes)
        st_labels = [labels[i] for i in st.nodes]
        st_start = sum(1 for i in st.nodes if i < start)
        time = rank_time(st.graph, device, options, st_labels, st_start)
        if training and plan.dp > 1 and plan.shard_stage:  # ZeRO and FSDP: each rank steps its optimizer shard
            time = replace(time, optimizer_s=time.optimizer_s / plan.dp)
        tp = tuple(c for c in shard.collectives if c.node in mine)
        fwd_tp, bwd_tp = _tp_by_label(tp, labels, plan.tp, links.tp)
        fwd = {k: v + fwd_tp.get(k, 0.0) for k, v in time.layer_forward_s.items()}
        bwd = {k: v + bwd_tp.get(k, 0.0) for k, v in time.layer_backward_s.items()}
        dp = data_parallel_time(
            units_of(st.graph, st_labels, fwd, bwd, st_start),
            plan.shard_stage,
            plan.dp if training else 1,
            links.dp,
            grad_bytes,
            gathered_bytes,
            plan.bucket_mb,
            plan.microbatches,
        )
        previous = stages[st.index - 1].send_bytes if st.index else 0
        sends = [st.send_bytes] + ([previous] if training else [])  # activations on, their gradients back
        p2p = sum(collective_s(SEND_RECV, b, 2, links.pp) for b in sends if b)
        runs.append(
            StageRun(st, st_labels, st_start, time, tp, sum(fwd_tp.values()), sum(bwd_tp.values()), p2p, dp, previous)
        )
    return runs


def _tp_by_label(collectives, labels: list[int], ranks: int, link: GroupLink):
    """Seconds of the critical-path tensor-parallel collectives per layer label, forward and backward."""
    fwd: dict[int, float] = {}
    bwd: dict[int, float] = {}
    for c in collectives:
        if c.hidden:
            continue
        table = fwd if c.phase == "forward" else bwd
        label = labels[c.node] if c.node >= 0 else -1
        table[label] = table.get(label, 0.0) + collective_s(c.kind, c.size_bytes, ranks, link)
    return fwd, bwd


def step_s(runs: list[StageRun], microbatches: int) -> float:
    """1F1B over the stages, then the reduction left after the last backward, then the optimizer step."""
    body = pipeline_parallel.pipeline_s([r.microbatch_s for r in runs], microbatches)
    tail = max(r.dp.last_microbatch_exposed_s for r in runs)
    return body + tail + max(r.time.optimizer_s + r.dp.after_step_s for r in runs)
