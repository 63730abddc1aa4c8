"""The collectives of one tensor-parallel rank, and sequence parallelism's split of the ops between them.

Megatron's two conjugate operators: ``f`` is the identity in the forward and an all-reduce of the input gradient in
the backward (before each group of column linears that read one input: q, k, v); ``g`` is an all-reduce of the
output in the forward (after each row linear, and after the vocabulary-parallel embedding) and the identity in the
backward. With sequence parallelism (Korthikanti et al., 2022) each all-reduce becomes a reduce-scatter and an
all-gather of the same total size (so the same bus traffic), the ops between a row and the next column linear run
on 1/tp of the sequence, and the backward gathers each column group's input again for its weight gradient, which
Megatron overlaps with the input-gradient matmul (marked hidden here).

Sizes are nccl-tests' S: the whole activation (tokens x features x dtype bytes), whether all-reduced, gathered or
scattered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfpredict.core import ops
from perfpredict.core.graph import OpNode, TensorMeta
from perfpredict.parallel import shard_shapes as sh
from perfpredict.parallel.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, Collective
from perfpredict.parallel.structure import module_name
from perfpredict.parallel.tp_roles import matmul_operands

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.parallel.tp_roles import Linear

SEQUENCE_SPLIT_OPS = frozenset({ops.NORM, ops.ELEMENTWISE, ops.COPY, ops.REDUCTION, ops.VIEW})


@dataclass(frozen=True)
class Event:
    """Something the sharding pass met that implies communication: a kind, the op's index, its linear, the op."""

    kind: str
    index: int
    role: Linear | None
    node: OpNode


def _sp_gather(nbytes: int, phase: str, index: int, what: str) -> Collective:
    """Sequence parallelism's all-gather of a sequence-split tensor before a tensor-parallel matmul."""
    return Collective(ALL_GATHER, nbytes, "tp", phase, index, what=f"{what} (sequence-parallel gather)")


def collectives_of(graph: OpGraph, events: Sequence[Event], tp: int, sp: bool) -> tuple[Collective, ...]:
    out: list[Collective] = []
    reduce = REDUCE_SCATTER if sp else ALL_REDUCE
    gathered: set[str] = set()
    grad_inputs: dict[str, Event] = {}
    for e in events:
        where = module_name(e.role.path if e.role else e.node.module_path)
        if e.kind == "row_forward" or e.kind == "embedding_forward":
            out.append(Collective(reduce, e.node.outputs[0].nbytes, "tp", "forward", e.index, what=f"{where} output"))
        elif e.kind == "column_forward" and sp and e.role.group not in gathered:
            gathered.add(e.role.group)
            out.append(
                _sp_gather(e.node.inputs[matmul_operands(e.node)[0]].nbytes, "forward", e.index, f"{where} input")
            )
        elif e.kind == "column_grad_input":
            grad_inputs[e.role.group] = e  # the last of the group: its gradients are summed, then reduced once
        elif e.kind == "row_grad_input" and sp:
            nbytes = e.node.inputs[matmul_operands(e.node)[0]].nbytes
            out.append(_sp_gather(nbytes, "backward", e.index, f"{where} output gradient"))
        elif e.kind == "embedding_backward" and sp:
            out.append(_sp_gather(e.node.inputs[0].nbytes, "backward", e.index, f"{where} output gradient"))
    for group, e in grad_inputs.items():
        size = e.node.outputs[0].nbytes
        where = module_name(group.split(":", 1)[-1]) or module_name(e.role.path)  # a top-level head: its own name
        out.append(Collective(reduce, size, "tp", "backward", e.index, what=f"{where} input gradient"))
        if sp:
            out.append(
                Collective(
                    ALL_GATHER,
                    size,
                    "tp",
                    "backward",
                    e.index,
                    hidden=True,
                    what=f"{where} input, gathered again for the weight gradient",
                )
            )
    return tuple(sorted(out, key=lambda c: c.node))


def sequence_split(
    graph: OpGraph, nodes: list[OpNode], split: Sequence[bool], labels: Sequence[int], tp: int
) -> list[OpNode]:
    """Sequence parallelism: the ops of each layer outside the split regions (norms, residual adds, dropout) run
    on 1/tp of the tokens; a tensor is (batch, seq, ...) or (batch * seq, ...)."""
    batch, seq = graph.batch_size, _seq_len(graph)
    if not seq:
        return nodes
    out = list(nodes)
    for i, node in enumerate(nodes):
        if split[i] or labels[i] < 0 or node.op not in SEQUENCE_SPLIT_OPS:
            continue
        inputs = [_token_split(t, batch, seq, tp) for t in node.inputs]
        outputs = [_token_split(t, batch, seq, tp) for t in node.outputs]
        if inputs != list(node.inputs) or outputs != list(node.outputs):
            out[i] = sh.rescaled(node, inputs, outputs)
    return out


def _token_split(meta: TensorMeta, batch: int, seq: int, tp: int) -> TensorMeta:
    shape = meta.shape
    if len(shape) >= 2 and shape[0] == batch and shape[1] == seq and seq % tp == 0:
        return sh.divide(meta, 1, tp)
    if len(shape) == 2 and shape[0] == batch * seq and shape[0] % tp == 0:
        return sh.divide(meta, 0, tp)
    return meta


def _seq_len(graph: OpGraph) -> int | None:
    if graph.seq_len:
        return graph.seq_len
    for node in graph.nodes:
        if node.op == ops.ATTENTION and node.inputs and len(node.inputs[0].shape) == 4:
            return node.inputs[0].shape[-2]
    return None
