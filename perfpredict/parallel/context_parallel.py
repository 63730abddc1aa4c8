"""Context parallelism: ring attention over ``cp`` ranks (Liu et al., "Ring Attention", 2023; Megatron-LM's and
torchtitan's context parallel).

Each rank holds 1/cp of every sequence: its tokens' share of every op, and its queries' share of attention. The
attention of a layer runs in cp steps: at each step a rank computes its queries against the key/value block in hand
while sending that block to the next rank and receiving the next one (cp - 1 sends of the rank's K and V block per
layer in the forward; the backward passes the K/V block and its partial gradients, twice the bytes). A send hides
behind the block's attention compute, so a step exposes ``max(0, send - block compute)``. Causal attention is
load-balanced the zigzag way (each rank holds chunks i and 2cp-1-i of the sequence), so every rank does the same
1/cp of the attention: a rank's forward and backward are the whole graph's over cp (the op shapes are not
re-predicted at the shorter sequence, whose kernels may run a little less efficiently). The ranks of one sequence
share the weights: their gradients are reduced together with the data-parallel ones (over dp x cp ranks, as
Megatron-LM and torchtitan fold cp into the data-parallel group). Activations per rank: 1/cp of the whole graph's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from perfpredict.core import ops
from perfpredict.parallel.collectives import SEND_RECV, collective_s

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.parallel.interconnect import GroupLink
    from perfpredict.parallel.timing import RankTime


@dataclass(frozen=True)
class RingTime:
    """Per microbatch: the ring's sends (all of them) and what they expose, forward and backward, per layer."""

    forward_s: dict[int, float]  # exposed
    backward_s: dict[int, float]  # exposed
    send_s_per_microbatch: float  # every send of the ring, exposed or hidden
    sends_per_microbatch: int
    block_bytes: int  # the largest layer's K/V block (one send in the forward)


def split_time(time: RankTime, cp: int) -> RankTime:
    """A cp rank's share of the whole graph's forward and backward (the optimizer step is every rank's own)."""
    if cp == 1:
        return time

    def div(table):
        return {k: v / cp for k, v in table.items()}

    attention = {k: (f / cp, b / cp) for k, (f, b) in (time.layer_attention_s or {}).items()}
    return replace(
        time,
        forward_s=time.forward_s / cp,
        backward_s=time.backward_s / cp,
        layer_forward_s=div(time.layer_forward_s),
        layer_backward_s=div(time.layer_backward_s),
        node_s=None if time.node_s is None else time.node_s / cp,
        weight_grad_s=time.weight_grad_s / cp,
        layer_attention_s=attention,
    )


def kv_bytes_by_layer(graph: OpGraph, labels: list[int], start: int) -> dict[int, int]:
    """Bytes of the keys and values each layer's forward attention reads (the whole sequence's)."""
    out: dict[int, int] = {}
    for i, node in enumerate(graph.nodes[:start]):
        if node.op == ops.ATTENTION and len(node.inputs) >= 3:
            out[labels[i]] = out.get(labels[i], 0) + node.inputs[1].nbytes + node.inputs[2].nbytes
    return out


def ring_time(time: RankTime, kv_bytes: dict[int, int], cp: int, link: GroupLink) -> RingTime:
    """The ring's time on a cp rank whose (already split) attention per layer is ``time.layer_attention_s``."""
    if cp == 1 or not kv_bytes:
        return RingTime({}, {}, 0.0, 0, 0)
    fwd, bwd, total, blocks = {}, {}, 0.0, []
    attention = time.layer_attention_s or {}
    for label, nbytes in kv_bytes.items():
        block = nbytes // cp  # this rank's K and V
        blocks.append(block)
        send_f = collective_s(SEND_RECV, block, 2, link)
        send_b = collective_s(SEND_RECV, 2 * block, 2, link)  # K/V and their partial gradients
        att_f, att_b = attention.get(label, (0.0, 0.0))
        fwd[label] = step_exposed_s(send_f, att_f / cp, cp)
        bwd[label] = step_exposed_s(send_b, att_b / cp, cp)
        total += (cp - 1) * (send_f + send_b)
    return RingTime(fwd, bwd, total, 2 * (cp - 1) * len(kv_bytes), max(blocks))


def step_exposed_s(send_s: float, block_compute_s: float, cp: int) -> float:
    """What the cp - 1 ring steps of one layer expose: each send overlaps the attention of the block in hand."""
    return (cp - 1) * max(0.0, send_s - block_compute_s)
