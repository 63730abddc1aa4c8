"""Asynchronous tensor parallelism: the sequence-parallel all-gather before a column-parallel matmul and the
reduce-scatter after a row-parallel one, decomposed and overlapped with the matmul they feed or follow.

PyTorch's async TP (torchtitan's ``enable_async_tensor_parallel``, ``torch.distributed._symmetric_memory``'s
``fused_all_gather_matmul`` and ``fused_matmul_reduce_scatter``; the PyTorch team's "Introducing Async Tensor
Parallelism in PyTorch", 2024) and Megatron-LM's ``--tp-comm-overlap`` follow Wang et al., "Overlap Communication
with Dependent Computation via Decomposition in Large Deep Learning Models" (ASPLOS 2023): the collective is cut
into tp chunks, one per rank's shard, and each chunk's matmul runs while the next chunk moves (through the copy
engines, so the matmul keeps its SMs). What stays exposed is the part of the communication the matmul cannot
cover, ``max(0, comm - matmul)``, plus the cost of running the matmul as tp pieces: one more kernel launch and
synchronisation per chunk (the device's launch overhead, an assumption; the pieces' own efficiency is not
re-predicted). It needs sequence parallelism (the decomposed collectives are its all-gather and reduce-scatter);
the plain all-reduce of tensor parallelism without it has no matmul to hide behind.
"""

from __future__ import annotations


def exposed_s(comm_s: float, matmul_s: float, chunks: int, chunk_overhead_s: float) -> float:
    """Seconds a decomposed collective of ``comm_s`` adds beside its matmul of ``matmul_s`` cut in ``chunks``."""
    return max(0.0, comm_s - matmul_s) + chunks * chunk_overhead_s
