"""Megatron-style tensor parallelism: one rank's share of the graph, and the collectives it runs.

Each split linear (``tp_roles``) keeps 1/tp of its weight: a column-parallel one 1/tp of its output features, a
row-parallel one 1/tp of its input features. Between a column and a row linear, activations are split too (the
attention heads, the MLP's hidden features): every op fed by a split tensor runs on its shard
(``shard_shapes``), so the existing predictors see the rank's real, smaller matmuls. The word embedding is split
over the vocabulary, and so is the LM head. Collectives (``tp_collectives``): an all-reduce of each row linear's
output in the forward and of each column group's input gradient in the backward, or with sequence parallelism a
reduce-scatter and an all-gather in their place, and the norms and residual adds between them on 1/tp of the
sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpNode, TensorMeta
from perfpredict.parallel import shard_shapes as sh
from perfpredict.parallel import tp_roles
from perfpredict.parallel.structure import backward_start, layer_labels, module_name
from perfpredict.parallel.subgraph import with_param_share
from perfpredict.parallel.tp_collectives import Event, collectives_of, sequence_split

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.parallel.collectives import Collective


@dataclass(frozen=True)
class TensorParallelShard:
    graph: OpGraph  # one rank's graph
    collectives: tuple[Collective, ...]
    split_linears: int


def shard(graph: OpGraph, tp: int, sp: bool = False) -> TensorParallelShard:
    """One tensor-parallel rank's graph and collectives (the graph itself for tp=1)."""
    start = backward_start(graph)
    labels = layer_labels(graph)
    roles = tp_roles.assign_roles(graph, start, labels)
    heads = tp_roles.attention_heads(graph, start, roles)
    check(graph, tp, roles, heads)
    if tp == 1:
        return TensorParallelShard(graph, (), len(roles))
    walk = _Walk(graph, tp, start, roles, heads)
    nodes = [walk.step(i) for i in range(len(graph.nodes))]
    if sp:
        nodes = sequence_split(graph, nodes, walk.split, labels, tp)
    sharded = replace(graph, nodes=tuple(nodes), notes=(*graph.notes, f"tensor-parallel rank of {tp}"))
    sharded = with_param_share(graph, sharded, start, start)
    return TensorParallelShard(sharded, collectives_of(graph, walk.events, tp, sp), len(roles))


class _Walk:
    """The sharding pass over ops in execution order: each op's new shapes from its producers' new shapes."""

    def __init__(
        self, graph: OpGraph, tp: int, start: int, roles: dict[str, tp_roles.Linear], heads: list[tp_roles.Heads]
    ) -> None:
        self.graph, self.tp, self.start, self.roles = graph, tp, start, roles
        self.heads = {h.heads for h in heads} | {h.kv_heads for h in heads}
        self.preds = tp_roles.predecessors(graph)
        self.weight_grads = feeds_gradient(graph)
        self.vocab = tp_roles.vocab_rows(graph)  # Megatron splits the word embedding over the vocabulary
        self.new_outputs: list[tuple[TensorMeta, ...]] = []
        self.split: list[bool] = []
        self.events: list[Event] = []

    def step(self, i: int) -> OpNode:
        node = self.graph.nodes[i]
        inputs, sources = self._inputs(i)
        role = self.roles.get(node.module_path)
        if role is not None and node.op == ops.MATMUL and len(node.inputs) >= 2:
            # a split linear's operands follow from its role alone: matching them to producers by shape is
            # ambiguous where the tokens equal a feature count
            new, split = self._linear(i, node, role, list(node.inputs))
        elif self.vocab and node.op == ops.EMBEDDING and self._table(node) is not None:
            new, split = self._embedding(i, node, inputs)
        elif sources:
            outputs = [self._divided(o, sources) for o in node.outputs]
            new, split = sh.rescaled(node, inputs, outputs), True
        else:
            new, split = node, False
        if role is not None and node.params and new.params == node.params:
            new = replace(new, params=math.ceil(node.params / self.tp))  # the weight's view: its shard
        self.new_outputs.append(new.outputs)
        self.split.append(split)
        return new

    def _inputs(self, i: int) -> tuple[list[TensorMeta], list[tuple[TensorMeta, TensorMeta]]]:
        """The op's inputs with each one that a split producer made replaced by its shard, and those pairs."""
        node = self.graph.nodes[i]
        split_preds = [p for p in self.preds[i] if self.split[p]]
        inputs, sources, used = list(node.inputs), [], set()
        for j, meta in enumerate(node.inputs):
            for p in sorted(split_preds, key=lambda p: p in used):
                old_outs = self.graph.nodes[p].outputs
                k = next((k for k, o in enumerate(old_outs) if o == meta), None)
                if k is not None and k < len(self.new_outputs[p]) and self.new_outputs[p][k] != meta:
                    inputs[j] = self.new_outputs[p][k]
                    sources.append((meta, inputs[j]))
                    used.add(p)
                    break
        return inputs, sources

    def _divided(self, meta: TensorMeta, sources) -> TensorMeta:
        dim = sh.choose_dim(meta, self.tp, sources, self.heads)
        return meta if dim is None else sh.divide(meta, dim, self.tp)

    def _linear(self, i: int, node: OpNode, role: tp_roles.Linear, inputs: list[TensorMeta]):
        a, b = tp_roles.matmul_operands(node)
        column = role.kind == tp_roles.COLUMN
        out = node.outputs[0]
        outputs, split = list(node.outputs), False
        if i < self.start:
            weight_dim = (0 if column else 1) if node.target == "linear" else (-1 if column else -2)
            inputs[b] = sh.divide(node.inputs[b], weight_dim % len(node.inputs[b].shape), self.tp)
            if column:
                outputs[0] = sh.divide(out, len(out.shape) - 1, self.tp)
                bias = 2 if node.target == "linear" else 0 if node.target == "addmm" else None
                if bias is not None and bias < len(inputs) and bias != b:
                    inputs[bias] = sh.divide(node.inputs[bias], 0, self.tp)
                inputs[a], split = node.inputs[a], True  # a column linear reads the whole activation
            else:
                inputs[a] = sh.divide(node.inputs[a], len(node.inputs[a].shape) - 1, self.tp)
            self.events.append(Event("row_forward" if not column else "column_forward", i, role, node))
        else:
            inputs, outputs, split, kind = self._linear_backward(i, node, role, inputs, a, b)
            self.events.append(Event(kind, i, role, node))
        return sh.rescaled(node, inputs, outputs, flops_ratio=1 / self.tp), split

    def _linear_backward(self, i: int, node: OpNode, role: tp_roles.Linear, inputs, a: int, b: int):
        """A linear's gradient matmul (A @ B = out, sizes m, k, n). The weight's gradient is the one that ends in a
        parameter gradient (the graph's dataflow says so; shapes cannot when the tokens equal a feature count):
        its split is the width's dimension of the output. The input's gradient of a column linear contracts over
        the split outputs (k: partial sums, all-reduced); of a row linear it is split along n."""
        outputs = list(node.outputs)
        am, bm, out = node.inputs[a], node.inputs[b], node.outputs[0]
        if len(am.shape) < 2 or len(bm.shape) < 2:
            return inputs, outputs, False, "other"
        sizes = {"m": am.shape[-2], "k": am.shape[-1], "n": bm.shape[-1]}
        column = role.kind == tp_roles.COLUMN
        width = role.out_features if column else role.in_features
        weight = self.weight_grads[i]
        # torch's weight gradient is grad_out^T @ x, the weight's own (N, K) layout: N is m, K is n
        order = (("m", "n") if column else ("n", "m")) if weight else ("k",) if column else ("n",)
        pick = next((x for x in order if sizes[x] == width), None)
        if pick == "k":
            inputs[a] = sh.divide(am, len(am.shape) - 1, self.tp)
            inputs[b] = sh.divide(bm, len(bm.shape) - 2, self.tp)
        elif pick == "m":
            inputs[a] = sh.divide(am, len(am.shape) - 2, self.tp)
            outputs[0] = sh.divide(out, len(out.shape) - 2, self.tp)
        elif pick == "n":
            inputs[b] = sh.divide(bm, len(bm.shape) - 1, self.tp)
            outputs[0] = sh.divide(out, len(out.shape) - 1, self.tp)
        kind = "other" if weight or pick is None else "column_grad_input" if column else "row_grad_input"
        return inputs, outputs, pick in ("m", "n"), kind

    def _table(self, node: OpNode) -> int | None:
        """Position of the word-embedding table among an embedding op's inputs or outputs' rows, else None."""
        for j, t in enumerate(node.inputs):
            if len(t.shape) == 2 and t.dtype in ops.FLOAT_DTYPES and t.shape[0] == self.vocab:
                return j
        backward = node.outputs and len(node.outputs[0].shape) == 2 and node.outputs[0].shape[0] == self.vocab
        return -1 if backward else None

    def _embedding(self, i: int, node: OpNode, inputs: list[TensorMeta]):
        """Vocabulary-parallel embedding: each rank holds 1/tp of the rows; the forward's output is all-reduced
        (each token's row lives on one rank), and the backward's weight gradient is the rank's rows."""
        j = self._table(node)
        if j is not None and j >= 0:
            inputs[j] = sh.divide(node.inputs[j], 0, self.tp)
            self.events.append(Event("embedding_forward", i, None, node))
            return sh.rescaled(node, inputs, node.outputs, params_ratio=1 / self.tp), False
        outputs = [sh.divide(node.outputs[0], 0, self.tp), *node.outputs[1:]]
        self.events.append(Event("embedding_backward", i, None, node))
        return sh.rescaled(node, inputs, outputs), True


def feeds_gradient(graph: OpGraph) -> list[bool]:
    """Per op: whether its output is a parameter gradient, itself or through views (a weight gradient is often
    returned transposed)."""
    succ: list[list[int]] = [[] for _ in graph.nodes]
    for src, dst in graph.edges:
        succ[src].append(dst)
    feeds = [False] * len(graph.nodes)
    for i in range(len(graph.nodes) - 1, -1, -1):
        feeds[i] = i in graph.grad_outputs or any(feeds[j] for j in succ[i] if graph.nodes[j].is_view)
    return feeds


def check(graph: OpGraph, tp: int, roles: dict[str, tp_roles.Linear], heads: list[tp_roles.Heads]) -> None:
    """Refuse a tensor-parallel degree that does not split the heads and linears evenly, naming what does."""
    if tp == 1:
        return
    if not roles:
        raise InvalidInputError(
            f"tp={tp}: found no linear layers to split in {graph.name or 'the model'!r} "
            "(Megatron-style tensor parallelism splits the linears of attention and MLP "
            "blocks); use tp=1 and dp or pp instead"
        )
    needs = [(h.heads, f"the {h.heads} attention heads of {module_name(h.path)}") for h in heads]
    needs += [
        (h.kv_heads, f"the {h.kv_heads} key/value heads of {module_name(h.path)}")
        for h in heads
        if h.kv_heads != h.heads
    ]
    needs += [
        (
            r.out_features if r.kind == tp_roles.COLUMN else r.in_features,
            f"the {r.out_features if r.kind == tp_roles.COLUMN else r.in_features} "
            f"{'output' if r.kind == tp_roles.COLUMN else 'input'} features of {module_name(r.path)}",
        )
        for r in roles.values()
        if r.label >= 0
    ]
    for size, what in needs:
        if size % tp:
            common = math.gcd(*(s for s, _ in needs))
            choices = ", ".join(str(d) for d in range(1, common + 1) if common % d == 0)
            raise InvalidInputError(f"tp={tp} does not split {what} evenly; choose tp from {choices}")
