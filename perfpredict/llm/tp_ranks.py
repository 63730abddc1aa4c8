"""Tensor parallelism for a generation question: one rank's graph and its communication time per step.

The transformers engine's graphs (prefill, decode steps) are sharded Megatron-style by the multi-GPU model's
``parallel.tensor_parallel.shard`` (the same split as ``predict --tp``: column-parallel q/k/v and gate/up,
row-parallel output and down projections, the vocabulary split; a tp that does not split the heads is refused with
the choices that do). Each row linear's all-reduce is on the critical path, timed by ``parallel.collectives`` on
the GPUs' link (``parallel.interconnect``; tp GPUs side by side in nodes of 8) with NCCL's own latency model (not
yet the measured curves of ``parallel.measured_collectives``: this engine's anchors, gpt-fast's published
tensor-parallel figures, were scored with it). The vLLM-class engine builds its rank's graph itself
(``engine_graph``) and costs its collectives as vLLM runs them (``tp_comm``: its custom all-reduce, or NCCL's
measured curves).
"""

from __future__ import annotations

from typing import Any

NODE_GPUS = 8  # GPUs per node: a tensor-parallel group is laid out inside one where it fits


def link_for(device: Any, tp: int):
    """The GroupLink a tensor-parallel group of ``tp`` GPUs of ``device`` runs its collectives on (None: tp 1)."""
    if tp <= 1:
        return None
    from perfpredict.parallel.interconnect import interconnect_for

    return interconnect_for(device).group(tp, 1, NODE_GPUS)


def shard(graph: Any, tp: int) -> tuple[Any, tuple]:
    """(one rank's graph, its collectives); the graph itself and none for tp 1."""
    if tp <= 1:
        return graph, ()
    from perfpredict.parallel.tensor_parallel import shard as megatron_shard

    out = megatron_shard(graph, tp)
    return out.graph, out.collectives


def comm_s(collectives: tuple, tp: int, link: Any, scale: float = 1.0) -> float:
    """Seconds of the critical-path collectives of one step, each message ``scale`` times its traced size (the
    batch sweep reuses one step's collectives at other batch sizes)."""
    if tp <= 1 or link is None:
        return 0.0
    from perfpredict.parallel.collectives import collective_s

    return sum(collective_s(c.kind, c.size_bytes * scale, tp, link) for c in collectives if not c.hidden)
