"""What a captured graph says about the model's structure: where its backward starts, which layer each op
belongs to, and how many parameters each module holds.

Captured module paths carry dynamo's root (``L['args'][0].model.layers.3.mlp.up_proj``); :func:`module_name`
drops it. A layer is the first integer in the path (``layers.3`` -> 3), as ``layer_replication`` reads it. Ops
before the first layer (embeddings, masks) are ``PRE`` and ops after the last (final norm, head, loss) ``POST``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from perfpredict.compiler_hooks.layer_replication import layer_of

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph

PRE = -1  # label of ops before the layer stack
POST = -2  # label of ops after it
_ROOT = re.compile(r"^L\[[^\]]*\](\[\d+\])?\.?")


def module_name(path: str) -> str:
    """The module path without dynamo's root prefix."""
    return _ROOT.sub("", path)


def backward_start(graph: OpGraph) -> int:
    """Index of the first backward op (``perfpredict.core.trainer.forward_end``: the last forward output + 1)."""
    from perfpredict.core.trainer import forward_end

    return forward_end(graph)


def layer_labels(graph: OpGraph) -> list[int]:
    """Per op: its layer index, PRE or POST. An op with no module path belongs with the op before it (a residual
    add with the layer it closes); a path without a layer index is PRE before the stack (embeddings, and their
    gradients at the end of the backward) and POST after it (final norm, head, and their gradients)."""
    start = backward_start(graph)
    raw = [layer_of(n.module_path) if n.module_path else None for n in graph.nodes]
    labels: list[int] = []
    for region in (range(0, start), range(start, len(graph.nodes))):
        forward = region.start == 0
        seen_layer = False
        previous = PRE if forward else POST
        for i in region:
            path = graph.nodes[i].module_path
            if raw[i] is not None:
                label, seen_layer = raw[i], True
            elif path:
                # forward: PRE until the stack starts, POST after; backward: POST until the stack, PRE after it
                label = (POST if seen_layer else PRE) if forward else (PRE if seen_layer else POST)
            else:
                label = previous
            labels.append(label)
            previous = label
    return labels


def layer_indices(labels: Sequence[int]) -> list[int]:
    """The layer indices present, in order."""
    return sorted({x for x in labels if x >= 0})


def module_params(graph: OpGraph, start: int | None = None) -> dict[str, int]:
    """Parameters per module path. Each weight is counted on the op that reads it first, which is in the forward;
    a training graph's backward may count it again where it reads it, so only ops before ``start`` (the backward's
    first op, ``backward_start`` when not given) count."""
    start = backward_start(graph) if start is None else start
    out: dict[str, int] = {}
    for node in graph.nodes[:start]:
        if node.params:
            out[node.module_path] = out.get(node.module_path, 0) + node.params
    return out


def labelled_params(graph: OpGraph, labels: Sequence[int], start: int | None = None) -> dict[int, int]:
    """Parameters per layer label (PRE, POST, or a layer), each module counted under its first op's label."""
    first: dict[str, int] = {}
    for node, label in zip(graph.nodes, labels):
        first.setdefault(node.module_path, label)
    out: dict[int, int] = {}
    for path, count in module_params(graph, start).items():
        out[first[path]] = out.get(first[path], 0) + count
    return out
