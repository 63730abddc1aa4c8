"""Small edits of an OpGraph that training recipes make: ops inserted before an op, an input edge rerouted through
one of them, an op replaced. The graph's order, keep-alive and gradient outputs follow the edit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from perfpredict.core.graph import OpGraph, OpNode


class Editor:
    """Collects edits of ``graph`` and builds the edited graph (:meth:`build`)."""

    def __init__(self, graph: OpGraph) -> None:
        self.graph = graph
        self.inserted: dict[int, list[tuple[OpNode, tuple[Any, ...]]]] = {}
        self.rerouted: dict[tuple[int, int], Any] = {}
        self.replaced: dict[int, OpNode] = {}

    def before(self, at: int, node: OpNode, inputs: tuple[Any, ...]) -> tuple[int, int]:
        """Insert ``node`` just before op ``at``, fed by ``inputs`` (ops of the graph, or handles this returned);
        returns its handle."""
        group = self.inserted.setdefault(at, [])
        group.append((node, inputs))
        return (at, len(group) - 1)

    def reroute(self, src: int, dst: int, through: tuple[int, int]) -> None:
        """Op ``dst`` reads the inserted op ``through`` where it read ``src``."""
        self.rerouted[(src, dst)] = through

    def replace(self, index: int, node: OpNode) -> None:
        self.replaced[index] = node

    def build(self, note: str = "") -> OpGraph:
        g = self.graph
        nodes: list[OpNode] = []
        position: dict[int, int] = {}
        handle: dict[tuple[int, int], int] = {}
        for i, node in enumerate(g.nodes):
            for k, (new, _) in enumerate(self.inserted.get(i, ())):
                handle[(i, k)] = len(nodes)
                nodes.append(new)
            position[i] = len(nodes)
            nodes.append(self.replaced.get(i, node))

        def where(ref: Any) -> int:
            return handle[ref] if isinstance(ref, tuple) else position[ref]

        edges = {
            (where(self.rerouted[(a, b)]) if (a, b) in self.rerouted else position[a], position[b]) for a, b in g.edges
        }
        for at, group in self.inserted.items():
            for k, (_, inputs) in enumerate(group):
                edges.update((where(ref), handle[(at, k)]) for ref in inputs)
        return replace(
            g,
            nodes=tuple(nodes),
            edges=tuple(sorted(edges)),
            keep_alive=frozenset(position[i] for i in g.keep_alive),
            grad_outputs=frozenset(position[i] for i in g.grad_outputs),
            notes=(*g.notes, note) if note else g.notes,
        )


def view_roots(graph: OpGraph, through: tuple[str, ...] = ()) -> list[int]:
    """Each op's root through views (the first input of a view), as the memory walk follows them, and through the
    ops marked with one of the ``through`` attrs (a weight's dequantize or float8 cast)."""
    first: dict[int, int] = {}
    for src, dst in sorted(graph.edges):
        first.setdefault(dst, src)
    root = list(range(len(graph.nodes)))
    for i, node in enumerate(graph.nodes):
        if i in first and (node.is_view or any(node.attrs.get(key) for key in through)):
            root[i] = root[first[i]]
    return root
