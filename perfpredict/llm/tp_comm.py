"""The communication of a serving engine's step: which implementation each collective runs, and its time.

- **All-reduce** (two per block with tensor parallelism, one after the embedding): vLLM's custom all-reduce where
  vLLM 0.6 takes it (``custom_allreduce``: NVLink, one node, 2-8 GPUs, under 8 MiB; not with
  ``disable_custom_all_reduce``), else NCCL.
- **NCCL** (all-reduce, the logits' all-gather, expert parallelism's all-to-all, pipeline parallelism's send/recv of
  activations): Vidur's measured curves (``parallel.measured_collectives``) where they cover the device and group,
  else NCCL's own latency model on the catalog's link (``parallel.collectives``), and the report says which.

Groups are laid out as vLLM lays them: the tp GPUs of a pipeline stage side by side in a node of 8 (a stage that
does not fit spans nodes), the stages one after another, so a stage boundary crosses a node when the node is full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfpredict.llm import custom_allreduce
from perfpredict.parallel import measured_collectives
from perfpredict.parallel.collectives import ALL_GATHER, ALL_REDUCE, SEND_RECV, collective_s

NODE_GPUS = 8


@dataclass(frozen=True)
class CommModel:
    """One engine's collectives: ``tp`` GPUs per stage, ``pp`` stages, on ``device``."""

    device: Any
    tp: int = 1
    pp: int = 1
    custom_all_reduce: bool = True

    @property
    def tp_per_node(self) -> int:
        return min(self.tp, NODE_GPUS)

    @property
    def tp_nodes(self) -> int:
        return -(-self.tp // NODE_GPUS)

    @property
    def stage_crosses_node(self) -> bool:
        """Whether the send between two stages leaves the node (the stages of a full node sit on the next one)."""
        return self.tp * 2 > NODE_GPUS

    def all_reduce_s(self, size_bytes: float) -> float:
        if self.tp <= 1 or size_bytes <= 0:
            return 0.0
        if self.custom_all_reduce and self.custom_reason(size_bytes) is None:
            return custom_allreduce.seconds(size_bytes, self.tp, self.device)
        return self.nccl_s(ALL_REDUCE, size_bytes)

    def all_gather_s(self, size_bytes: float) -> float:
        return self.nccl_s(ALL_GATHER, size_bytes) if self.tp > 1 else 0.0

    def all_to_all_s(self, size_bytes: float) -> float:
        """Expert parallelism's dispatch or combine: each rank sends (n-1)/n of ``size_bytes`` to the others."""
        return self.nccl_s(measured_collectives.ALL_TO_ALL, size_bytes) if self.tp > 1 else 0.0

    def send_recv_s(self, size_bytes: float) -> float:
        """One stage's activations to the next (every tp rank sends its copy, in parallel)."""
        if self.pp <= 1 or size_bytes <= 0:
            return 0.0
        per_node = 1 if self.stage_crosses_node else 2
        got = measured_collectives.seconds(SEND_RECV, size_bytes, 2, self.device, per_node)
        if got is not None:
            return got
        return collective_s(SEND_RECV, size_bytes, 2, self._link(2, cross=self.stage_crosses_node))

    def nccl_s(self, kind: str, size_bytes: float) -> float:
        if size_bytes <= 0:
            return 0.0
        got = measured_collectives.seconds(kind, size_bytes, self.tp, self.device, self.tp_per_node)
        if got is not None:
            return got
        fallback = ALL_GATHER if kind == measured_collectives.ALL_TO_ALL else kind
        return collective_s(fallback, size_bytes, self.tp, self._link(self.tp))

    def custom_reason(self, size_bytes: float) -> str | None:
        """None where vLLM's custom all-reduce takes this message, else why NCCL does."""
        if not self.custom_all_reduce:
            return "disable_custom_all_reduce"
        return custom_allreduce.why_not(size_bytes, self.tp, self.device, self.tp_nodes)

    def describe(self, decode_bytes: float, prefill_bytes: float) -> str:
        """How the all-reduces of a decode step and of the largest prefill step are costed (the report's line)."""
        parts = []
        for what, size in (("decode", decode_bytes), ("prefill", prefill_bytes)):
            reason = self.custom_reason(size)
            if self.custom_all_reduce and reason is None:
                k = custom_allreduce.kernel(size, self.tp)
                impl = f"vLLM's custom all-reduce ({k}; sglang's published timings of vLLM's kernel)"
            else:
                impl = f"NCCL ({reason}): {self._nccl_source()}"
            us = self.all_reduce_s(size) * 1e6
            parts.append(f"{what} {size / 1024:,.0f} KiB -> {impl}, {us:.1f} us")
        return "; ".join(parts)

    def _nccl_source(self) -> str:
        c = measured_collectives.curve(ALL_REDUCE, self.tp, self.device, self.tp_per_node)
        if c is not None:
            return f"measured ({c.source})"
        return f"NCCL's latency model on {self._link(self.tp).description} (no measured curve for it)"

    def _link(self, ranks: int, cross: bool = False):
        from perfpredict.parallel.interconnect import interconnect_for

        per_node = 1 if cross else min(ranks, NODE_GPUS)
        return interconnect_for(self.device).group(ranks, 1, per_node)
