"""The data-parallel collectives of one pipeline stage, timed on the two-stream model (``overlap``).

Each stage's compute is cut into units (the layers, and the root: what lies outside them), each with its forward
and backward seconds (tensor-parallel collectives included: they hold the compute stream). The collectives of
``data_parallel`` are released and awaited by those units. Two numbers come out: what every microbatch loses
waiting (ZeRO-2's reduce-scatters, FSDP's gathers and reduce-scatters: a rank that holds only its gradient shard
must reduce every microbatch's gradients) and what the last microbatch adds on top (DDP's and ZeRO-1's gradient
reduction, run once per step, that the end of the backward could not hide).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfpredict.parallel import data_parallel as dpm
from perfpredict.parallel.collectives import REDUCE_SCATTER, collective_s
from perfpredict.parallel.interconnect import GroupLink
from perfpredict.parallel.overlap import Comm, simulate
from perfpredict.parallel.structure import POST, PRE, module_params


@dataclass(frozen=True)
class FsdpOptions:
    """How FSDP runs (``data_parallel.fsdp_comms``): re-gather in the backward (FULL_SHARD, HYBRID_SHARD) or not
    (SHARD_GRAD_OP), layers prefetched, and HYBRID_SHARD's replicas (their count and link; 1: none)."""

    reshard: bool = True
    prefetch: int = 1
    shard: int = 0  # HYBRID_SHARD: the shard group's size (0: no replicas)
    replicas: int = 1
    replicate_link: GroupLink | None = None


@dataclass(frozen=True)
class DataParallelTime:
    per_microbatch_exposed_s: float
    last_microbatch_exposed_s: float  # on top of per_microbatch_exposed_s
    after_step_s: float  # ZeRO 1/2's all-gather of the updated parameters
    comm_s_per_step: float
    comms: tuple[tuple[dpm.PlannedComm, float], ...]  # (collective, seconds) of one step
    calls_per_step: tuple[int, ...]  # how often each runs per step


def units_of(
    graph, labels: Sequence[int], forward_s: dict[int, float], backward_s: dict[int, float], start: int | None = None
) -> list[dpm.Unit]:
    """The stage's units in forward order (PRE, its layers, POST), with their modules' parameter counts scaled to
    the graph's trainable total (the counts include buffers; frozen weights are not reduced). ``start``: the
    first backward op (``backward_start`` when not given)."""
    first: dict[str, int] = {}
    for node, label in zip(graph.nodes, labels):
        first.setdefault(node.module_path, label)
    counts = module_params(graph, start)
    scale = graph.trainable_param_count / max(sum(counts.values()), 1)
    tensors: dict[int, list[int]] = {}
    for path, count in counts.items():
        tensors.setdefault(first[path], []).append(round(count * scale))
    order = [PRE, *sorted(x for x in set(labels) if x >= 0), POST]
    return [
        dpm.Unit(x, sum(tensors.get(x, [])), tuple(tensors.get(x, [])), forward_s.get(x, 0.0), backward_s.get(x, 0.0))
        for x in order
        if x in set(labels)
    ]


def data_parallel_time(
    units: Sequence[dpm.Unit],
    stage: int,
    dp: int,
    link: GroupLink,
    grad_bytes: float,
    gathered_bytes: float,
    bucket_mb: float,
    microbatches: int,
    fsdp: FsdpOptions | None = None,
) -> DataParallelTime:
    """``stage``: what is sharded (0 DDP, 1-2 ZeRO, 3 FSDP); bytes are per parameter (``grad_bytes``: what a
    reduction moves, ``gathered_bytes``: what a gather moves)."""
    fsdp = fsdp or FsdpOptions()

    def timed(comms):
        def seconds(c):
            if c.group == "replicate":
                return collective_s(c.kind, c.size_bytes, fsdp.replicas, fsdp.replicate_link)
            return collective_s(c.kind, c.size_bytes, dp, link)

        return [(c, seconds(c)) for c in comms]

    if dp == 1 and fsdp.replicas == 1:
        return DataParallelTime(0.0, 0.0, 0.0, 0.0, (), ())
    if stage >= 3:
        # ZeRO-3 and FSDP2 (requires_gradient_sync left on) keep only their gradient shard, so every microbatch
        # gathers each layer (twice, unless SHARD_GRAD_OP keeps it) and reduce-scatters its gradients
        shard = fsdp.shard if fsdp.replicas > 1 else 0
        planned = dpm.fsdp_comms(units, gathered_bytes, grad_bytes, True, fsdp.reshard, fsdp.prefetch, shard)
        comms = timed(planned)
        tasks = [u.forward_s for u in units] + [u.backward_s for u in reversed(units)]
        exposed = simulate(tasks, [Comm(s, c.ready_after, c.needed_by) for c, s in comms]).exposed_s
        total = microbatches * sum(s for _, s in comms)
        return DataParallelTime(exposed, 0.0, 0.0, total, tuple(comms), tuple(microbatches for _ in comms))
    kind = "all_reduce" if stage == 0 else REDUCE_SCATTER
    buckets = timed(dpm.ddp_comms(units, grad_bytes, bucket_mb, kind))
    tasks = [sum(u.forward_s for u in units)] + [u.backward_s for u in reversed(units)]
    exposed = simulate(tasks, [Comm(s, c.ready_after) for c, s in buckets]).exposed_s
    after = timed([dpm.zero_gather(units, gathered_bytes)]) if stage in (1, 2) else []
    after_s = sum(s for _, s in after)
    # DDP (no_sync) and ZeRO-1 hold whole gradients and reduce them on the last microbatch; ZeRO-2 holds only its
    # shard, so it reduce-scatters every microbatch (DeepSpeed: "ZeRO stage >= 2 communicates during non gradient
    # accumulation boundaries as well")
    every = microbatches if stage == 2 else 1
    return DataParallelTime(
        exposed if every > 1 else 0.0,
        0.0 if every > 1 else exposed,
        after_s,
        every * sum(s for _, s in buckets) + after_s,
        tuple(buckets + after),
        tuple(every for _ in buckets) + tuple(1 for _ in after),
    )
