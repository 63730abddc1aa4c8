"""Pipeline parallelism: the layer stack cut into ``pp`` stages, and the 1F1B schedule's time.

Stages are contiguous runs of layers, chosen to make the slowest stage as fast as possible (the ops before the
stack, embeddings, go with the first stage; the final norm, head and loss with the last), weighing each layer by
its roofline time on the device. Each stage sends its last layer's output forward and receives its gradient back
once per microbatch. NB: ops that every layer reads (masks, rotary tables) are computed on the first stage only
here; Megatron recomputes them on each stage, a small cost.

1F1B (PipeDream-Flush, Narayanan et al. 2021) with m microbatches on p stages: the step is the fill and drain of
one pass through every stage plus m-1 passes of the slowest, ``T = sum_s t_s + (m-1) max_s t_s``; with equal
stages that is (m+p-1) t, and the bubble (idle) fraction is (p-1)/(m+p-1). Stage s holds the activations of up to
min(p-s, m) microbatches at once (the first stage holds p).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfpredict.core.errors import InvalidInputError
from perfpredict.parallel.structure import POST, PRE, backward_start, layer_indices
from perfpredict.parallel.subgraph import subgraph

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph


@dataclass(frozen=True)
class Stage:
    index: int
    layers: tuple[int, ...]
    nodes: tuple[int, ...]  # indices into the (tensor-parallel) graph the stages were cut from
    graph: OpGraph
    send_bytes: int  # activation sent to the next stage per microbatch (0 for the last)


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share of a 1F1B step with equal stages: (p-1)/(m+p-1)."""
    return (stages - 1) / (microbatches + stages - 1)


def in_flight(stage: int, stages: int, microbatches: int) -> int:
    """Microbatches whose activations stage ``stage`` holds at its peak under 1F1B."""
    return max(1, min(stages - stage, microbatches))


def pipeline_s(stage_s: Sequence[float], microbatches: int) -> float:
    """Seconds of the 1F1B schedule for per-microbatch stage times ``stage_s``."""
    return sum(stage_s) + (microbatches - 1) * max(stage_s)


def split_stages(graph: OpGraph, pp: int, labels: Sequence[int], weight_s: Sequence[float]) -> list[Stage]:
    """``pp`` stages of ``graph`` balanced by ``weight_s`` (seconds per op); labels from ``layer_labels``."""
    layers = layer_indices(labels)
    if pp == 1:
        return [Stage(0, tuple(layers), tuple(range(len(graph.nodes))), graph, 0)]
    if len(layers) < pp:
        raise InvalidInputError(
            f"pp={pp} needs at least {pp} layers, but {graph.name or 'the model'!r} has "
            f"{len(layers)} (module paths like model.layers.N); choose pp <= {max(len(layers), 1)}"
        )
    cost: dict[int, float] = {}
    for label, seconds in zip(labels, weight_s):
        cost[label] = cost.get(label, 0.0) + float(seconds)
    weights = [cost.get(x, 0.0) for x in layers]
    weights[0] += cost.get(PRE, 0.0)
    weights[-1] += cost.get(POST, 0.0)
    cuts = balanced_cuts(weights, pp)
    stages = []
    for s, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(layers)])):
        mine = set(layers[lo:hi]) | ({PRE} if s == 0 else set()) | ({POST} if s == pp - 1 else set())
        nodes = tuple(i for i, label in enumerate(labels) if label in mine)
        stages.append(
            Stage(
                s,
                tuple(layers[lo:hi]),
                nodes,
                subgraph(graph, nodes, f"{graph.name} stage {s}"),
                0 if s == pp - 1 else _sent_bytes(graph, labels, set(layers[lo:hi]), set(nodes)),
            )
        )
    return stages


def balanced_cuts(weights: Sequence[float], parts: int) -> list[int]:
    """Cut points splitting ``weights`` into ``parts`` contiguous non-empty runs with the smallest largest sum
    (dynamic programming over prefixes)."""
    n = len(weights)
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for j in range(k, n - (parts - k) + 1):
            for i in range(k - 1, j):
                value = max(best[k - 1][i], prefix[j] - prefix[i])
                if value < best[k][j]:
                    best[k][j], cut[k][j] = value, i
    cuts, j = [], n
    for k in range(parts, 0, -1):
        j = cut[k][j]
        cuts.append(j)
    return sorted(cuts)[1:]


def _sent_bytes(graph: OpGraph, labels: Sequence[int], mine: set[int], nodes: set[int]) -> int:
    """Bytes a stage's layers hand to later stages in the forward (the residual stream), once per producer."""
    start = backward_start(graph)
    producers = {a for a, b in graph.edges if a in nodes and b not in nodes and b < start and labels[a] in mine}
    real = [graph.nodes[a].output_bytes for a in producers if not graph.nodes[a].is_view]
    return sum(real) if real else max((graph.nodes[a].output_bytes for a in producers), default=0)
