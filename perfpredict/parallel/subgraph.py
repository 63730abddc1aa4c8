"""A part of an OpGraph (a pipeline stage's ops) as an OpGraph of its own, that any predictor accepts."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import TYPE_CHECKING

from perfpredict.parallel.structure import backward_start, module_params
from perfpredict.predictors.memory_model import storage_roots

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph


def subgraph(graph: OpGraph, keep: Collection[int], name: str = "") -> OpGraph:
    """The ops ``keep`` (indices into ``graph.nodes``), in their order, with the edges between them. Tensors that
    came from dropped ops become inputs (``input_bytes``); the parameter totals are the graph's, scaled by the
    share of its modules' parameters the part holds."""
    order = sorted(set(keep))
    start = backward_start(graph)
    index = {old: new for new, old in enumerate(order)}
    nodes = tuple(graph.nodes[i] for i in order)
    edges = tuple((index[a], index[b]) for a, b in graph.edges if a in index and b in index)
    root = storage_roots(graph)  # a view that enters brings its base's storage, counted once
    entering = {root[a] for a, b in graph.edges if b in index and a not in index}
    input_bytes = sum(graph.nodes[a].output_bytes for a in entering)
    part = replace(
        graph,
        nodes=nodes,
        edges=edges,
        name=name or graph.name,
        keep_alive=frozenset(index[i] for i in graph.keep_alive if i in index),
        grad_outputs=frozenset(index[i] for i in graph.grad_outputs if i in index),
        input_bytes=input_bytes if entering else graph.input_bytes,
    )
    return with_param_share(graph, part, start, sum(1 for i in order if i < start))


def with_param_share(
    full: OpGraph, part: OpGraph, full_start: int | None = None, part_start: int | None = None
) -> OpGraph:
    """``part`` with the parameter totals of ``full`` scaled by the share of module parameters it holds (the
    forward of each starts at ``*_start``: a part may not hold the forward's outputs that mark it)."""
    before = sum(module_params(full, full_start).values())
    after = sum(module_params(part, part_start).values())
    share = after / before if before else 1.0
    return replace(
        part,
        param_count=round(full.param_count * share),
        param_bytes=round(full.param_bytes * share),
        trainable_param_count=round(full.trainable_param_count * share),
        trainable_param_bytes=round(full.trainable_param_bytes * share),
    )
