"""A deep stack of identical layers, captured from two of them: the traced graph of layers 0 and 1, with layer 1
copied into layers 2..L-1.

Dynamo and AOT autograd take time in proportion to the graph: 10-13 s for Llama-2-7B's 32-layer training step,
1.3 s for the same model with two layers. The layers of a transformer stack are one module class applied L times,
so their ops are the same, with the same shapes; only the edges between layers (the residual stream forward, the
gradient backward) and the parameter totals need care.

The traced graph is cut into regions by the layer index in each op's module path (``model.layers.1.mlp`` is layer
1) and by the start of the backward: ``pre | F0 | F1 | mid | B1 | B0 | tail`` (forward layers, the head and the
loss, the backward layers in reverse, what follows). It is rebuilt as ``pre | F0 | F1 x (L-1) | mid | B1 x (L-1) |
B0 | tail``, and each edge is mapped by its role: within a layer, into every copy; from layer 0 into layer 1, from
copy s-1 into copy s; from the head into the last layer's backward; from a layer's backward into the one below.
Where the regions do not line up (a layer 0 unlike layer 1, ops of other layers in between), ``replicate``
returns None and the caller traces the whole model. A test compares replicated and fully traced graphs of
several architectures op by op, and their predictions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from perfpredict.core.graph import OpGraph

#: the config field that holds the layer count, per architecture family
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers")
TRACE_LAYERS = 2
_ROOT = re.compile(r"^L\[[^\]]*\](\[\d+\])?\.?")
_INDEX = re.compile(r"\.(\d+)(?:\.|$)")


@dataclass(frozen=True)
class Regions:
    f0: range
    f1: range
    b1: range  # empty in an inference graph
    b0: range


def layer_field(config) -> str | None:
    """The config's layer-count field, when the model is a stack that ``replicate`` can extend."""
    for name in LAYER_FIELDS:
        if isinstance(getattr(config, name, None), int):
            return name
    return None


def layer_of(module_path: str) -> int | None:
    """The first integer segment of a module path (``model.layers.7.mlp`` -> 7), or None."""
    m = _INDEX.search("." + _ROOT.sub("", module_path))
    return int(m.group(1)) if m else None


def regions(graph: OpGraph) -> Regions | None:
    """The spans of layers 0 and 1, forward and backward, or None when they do not line up.

    Forward: layer 0 runs from its first op to the op before layer 1's first, and layer 1 is as long. Backward
    (a training graph): layer 1's span runs from its first op after its forward to the op before layer 0's first,
    and layer 0's is as long. A span may hold ops with no module path (views, the residual add)."""
    labels = [layer_of(n.module_path) for n in graph.nodes]
    if any(x not in (None, 0, 1) for x in labels):  # not a two-layer stack (Swin's field counts stages)
        return None
    first = {k: next((i for i, x in enumerate(labels) if x == k), None) for k in (0, 1)}
    if first[0] is None or first[1] is None or first[0] > first[1]:
        return None
    f0 = range(first[0], first[1])
    f1 = range(f0.stop, f0.stop + len(f0))
    later = {k: [i for i in range(f1.stop, len(labels)) if labels[i] == k] for k in (0, 1)}
    if bool(later[0]) != bool(later[1]):
        return None
    if later[1] and later[0][0] < later[1][-1]:
        return None
    # layer 1's backward runs up to layer 0's (what lies between, the residual gradient's add, is layer 1's)
    b1 = range(later[1][0], later[0][0]) if later[1] else range(len(labels), len(labels))
    b0 = range(b1.stop, b1.stop + len(b1)) if later[1] else b1
    if later[0] and later[0][-1] >= b0.stop:
        return None
    for a, b in ((f0, f1), (b0, b1)):
        if (
            b.stop > len(labels)
            or any(labels[i] not in (None, 0) for i in a)
            or any(labels[i] not in (None, 1) for i in b)
        ):
            return None
        if any(
            (graph.nodes[i].op, graph.nodes[i].target) != (graph.nodes[j].op, graph.nodes[j].target)
            for i, j in zip(a, b)
        ):
            return None
    return Regions(f0, f1, b1, b0)


def replicate(graph: OpGraph, layers: int, extra_params: tuple[int, int, int, int] = (0, 0, 0, 0)) -> OpGraph | None:
    """``graph`` (traced with two layers) with layer 1 copied into layers 2..``layers``-1, or None where the
    regions do not line up. ``extra_params`` (count, bytes, trainable count, trainable bytes) are the parameters
    the copies add, which the caller reads from the full model."""
    r = regions(graph)
    if r is None or layers < TRACE_LAYERS:
        return None
    copies = layers - 1  # layer slots 1..L-1 are all copies of the traced layer 1
    n = len(graph.nodes)
    order: list[tuple[int, int]] = []  # (old index, slot); slot 0 for nodes outside the template
    order += [(i, 0) for i in range(0, r.f1.start)]
    order += [(i, s) for s in range(1, copies + 1) for i in r.f1]
    mid_end = r.b1.start if r.b1 else n
    order += [(i, 0) for i in range(r.f1.stop, mid_end)]
    order += [(i, s) for s in range(copies, 0, -1) for i in r.b1]
    order += [(i, 0) for i in range(r.b0.start if r.b1 else n, n)]
    new = {key: k for k, key in enumerate(order)}
    template = set(r.f1) | set(r.b1)
    edges = set()
    for p, c in graph.edges:
        edges.update(_map_edge(p, c, r, copies, template, new))
    every, last = range(1, copies + 1), (copies,)
    # a forward output of layer 1 kept to the end is the stack's output (the last layer's), unless layer 0 keeps the
    # same output too (a decode step's new K and V: every layer's); a backward one is a parameter gradient: every
    # layer's
    f_off = r.f1.start - r.f0.start

    def slots(i: int):
        if i not in template:
            return (0,)
        return last if i in r.f1 and (i - f_off) not in graph.keep_alive else every

    keep = {new[(i, s)] for i in graph.keep_alive for s in slots(i)}
    grads = {new[(i, s)] for i in graph.grad_outputs for s in (every if i in template else (0,))}
    count, nbytes, trainable, trainable_bytes = extra_params
    nodes = tuple(graph.nodes[i] if s <= 1 else _renumbered(graph.nodes[i], s) for i, s in order)
    return replace(
        graph,
        nodes=nodes,
        edges=tuple(sorted(edges)),
        keep_alive=frozenset(keep),
        grad_outputs=frozenset(grads),
        param_count=graph.param_count + count,
        param_bytes=graph.param_bytes + nbytes,
        trainable_param_count=graph.trainable_param_count + trainable,
        trainable_param_bytes=graph.trainable_param_bytes + trainable_bytes,
        notes=(
            *graph.notes,
            f"layers 2..{layers - 1} are copies of layer 1 (captured with two layers; "
            "perfpredict.compiler_hooks.layer_replication)",
        ),
    )


def _renumbered(node, layer: int):
    """A copy of a layer-1 op as layer ``layer``'s: its module path and name say which layer it belongs to."""
    root = _ROOT.match(node.module_path)
    prefix = root.group(0) if root else ""
    rest = _INDEX.sub(
        lambda m: f".{layer}" + m.group(0)[1 + len(m.group(1)) :], "." + node.module_path[len(prefix) :], count=1
    )
    return replace(node, name=f"{node.name}__layer{layer}", module_path=prefix + rest[1:])


def _map_edge(p: int, c: int, r: Regions, copies: int, template: set[int], new: dict) -> list[tuple[int, int]]:
    """The edges of the rebuilt graph that stand for the traced edge (p, c)."""
    f_off, b_off = r.f1.start - r.f0.start, r.b1.start - r.b0.start if r.b1 else 0
    slots = range(1, copies + 1)
    if p not in template and c not in template:
        return [(new[(p, 0)], new[(c, 0)])]
    if p in template and c in template:  # within a layer, or its forward saved for its backward
        return [(new[(p, s)], new[(c, s)]) for s in slots]
    if c in template:
        if p in r.f0:  # layer 0 feeds layer 1: copy s-1 feeds copy s
            return [(new[(p, 0)] if s == 1 else new[(p + f_off, s - 1)], new[(c, s)]) for s in slots]
        if p < r.f0.start:  # what every layer reads (masks, positions)
            return [(new[(p, 0)], new[(c, s)]) for s in slots]
        return [(new[(p, 0)], new[(c, copies)])]  # the head's gradient enters the last layer's backward
    if c in r.b0:  # layer 1's backward feeds layer 0's: copy s feeds copy s-1
        return [(new[(p, s)], new[(c, 0)] if s == 1 else new[(c + b_off, s - 1)]) for s in slots]
    if c > max(r.b0, default=-1) and r.b1:  # after the backward layers: from the lowest copy
        return [(new[(p, 1)], new[(c, 0)])]
    return [(new[(p, copies)], new[(c, 0)])]  # the last layer feeds the head
