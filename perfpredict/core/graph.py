"""OpGraph: the one data structure between every frontend and every predictor.

A frontend (FX, AOT, Relax, ONNX) turns a model into an :class:`OpGraph`; a predictor maps an OpGraph plus a
device plus a run config to predictions. Nodes are kept in a topological (execution) order, which the memory
liveness walk relies on.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from perfpredict.core import op_kinds
from perfpredict.core.ops import DTYPE_BYTES

PHASES = ("inference", "training")
#: the dtypes a model may be captured and predicted in
DTYPES = ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True)
class TensorMeta:
    """Shape and dtype of one tensor. ``dtype`` is a canonical name such as ``"float32"`` or ``"bfloat16"``."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES.get(self.dtype, 4)


@dataclass(frozen=True)
class OpNode:
    """One operation. ``op`` is a kind registered in :mod:`perfpredict.core.op_kinds`; ``target`` the frontend's own name."""

    name: str
    op: str
    target: str
    inputs: tuple[TensorMeta, ...] = ()
    outputs: tuple[TensorMeta, ...] = ()
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    params: int = 0
    attrs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    module_path: str = ""

    @property
    def known(self) -> bool:
        """True when perfpredict has a cost model for this op (it is not ``"unknown"``)."""
        return op_kinds.is_known(self.op)

    @property
    def is_view(self) -> bool:
        """Views alias their input: no kernel, no new memory."""
        return op_kinds.is_view(self.op)

    @property
    def output_bytes(self) -> int:
        return sum(t.nbytes for t in self.outputs)


@dataclass(frozen=True)
class OpGraph:
    """A model (or the sum of several dynamo subgraphs) as canonical ops with real dataflow edges.

    ``edges`` are (producer index, consumer index) pairs into ``nodes``. ``param_count`` and ``param_bytes``
    count each parameter tensor once, however many nodes read it. ``input_bytes`` are the graph inputs that are
    not parameters (the user's batch). ``notes`` hold what a frontend assumed, such as resolved dynamic sizes.
    ``keep_alive`` lists node indices whose outputs stay live to the end (graph outputs) and ``grad_outputs``
    those that are parameter gradients (counted in the gradient memory term, not as activations).
    """

    nodes: tuple[OpNode, ...]
    edges: tuple[tuple[int, int], ...]
    phase: str = "inference"
    batch_size: int = 1
    seq_len: int | None = None
    dtype: str = "float32"
    source: str = "fx"
    param_count: int = 0
    param_bytes: int = 0
    trainable_param_count: int = 0
    trainable_param_bytes: int = 0
    input_bytes: int = 0
    keep_alive: frozenset[int] = frozenset()
    grad_outputs: frozenset[int] = frozenset()
    notes: tuple[str, ...] = ()
    subgraphs: int = 1
    name: str = ""

    @property
    def backward_start(self) -> int:
        """Index of the first backward op: a training graph (AOT's joint graph) lists the forward first, and its
        backward starts at the first ``*_backward`` op (the loss's or the last layer's); len(nodes) otherwise."""
        if self.phase == "training":
            for i, node in enumerate(self.nodes):
                if "backward" in str(node.target) or node.attrs.get("backward"):
                    return i
        return len(self.nodes)

    @property
    def coverage(self) -> float:
        """Share of compute nodes (views excluded) that have a known cost model. 1.0 for an empty graph."""
        counted = [n for n in self.nodes if not n.is_view]
        if not counted:
            return 1.0
        return sum(n.known for n in counted) / len(counted)

    @property
    def unknown_targets(self) -> dict[str, int]:
        """How often each op without a cost model appears, by its frontend name."""
        out: dict[str, int] = {}
        for n in self.nodes:
            if not n.known:
                out[n.target] = out.get(n.target, 0) + 1
        return out

    @property
    def total_flops(self) -> int:
        return sum(n.flops for n in self.nodes)

    @property
    def total_bytes(self) -> int:
        return sum(n.bytes_read + n.bytes_written for n in self.nodes)

    def structure_hash(self) -> str:
        """A stable hash of ops, targets, shapes, dtypes and edges: equal graphs share one featurization."""
        h = hashlib.sha256()
        for n in self.nodes:
            h.update(
                f"{n.op}|{n.target}|{[(t.shape, t.dtype) for t in n.inputs]}|"
                f"{[(t.shape, t.dtype) for t in n.outputs]}\n".encode()
            )
        h.update(json.dumps(sorted(self.edges)).encode())
        h.update(f"{self.phase}|{self.param_bytes}".encode())
        return h.hexdigest()[:16]

    def with_run(self, **changes: Any) -> OpGraph:
        """A copy with graph-level fields changed (``batch_size``, ``seq_len``, ``name``, ``notes``...)."""
        return replace(self, **changes)


def merge_graphs(graphs: Iterable[OpGraph], name: str = "") -> OpGraph:
    """Join the subgraphs of one compiled function (graph breaks) into one OpGraph, run one after the other.

    Parameters that several subgraphs read are counted once per subgraph, since the frontends cannot see that
    two placeholders are one tensor; the notes say so when it may matter.
    """
    graphs = list(graphs)
    if len(graphs) == 1:
        return replace(graphs[0], name=name or graphs[0].name)
    nodes: list[OpNode] = []
    edges: list[tuple[int, int]] = []
    keep: set[int] = set()
    grads: set[int] = set()
    notes: list[str] = []
    for g in graphs:
        base = len(nodes)
        nodes.extend(g.nodes)
        edges.extend((a + base, b + base) for a, b in g.edges)
        keep.update(i + base for i in g.keep_alive)
        grads.update(i + base for i in g.grad_outputs)
        notes.extend(x for x in g.notes if x not in notes)
    first = graphs[0]
    return OpGraph(
        nodes=tuple(nodes),
        edges=tuple(edges),
        phase=first.phase,
        batch_size=first.batch_size,
        seq_len=first.seq_len,
        dtype=first.dtype,
        source=first.source,
        param_count=sum(g.param_count for g in graphs),
        param_bytes=sum(g.param_bytes for g in graphs),
        trainable_param_count=sum(g.trainable_param_count for g in graphs),
        trainable_param_bytes=sum(g.trainable_param_bytes for g in graphs),
        input_bytes=first.input_bytes,
        keep_alive=frozenset(keep),
        grad_outputs=frozenset(grads),
        notes=tuple(notes),
        subgraphs=sum(g.subgraphs for g in graphs),
        name=name or first.name,
    )


def graph_to_dict(graph: OpGraph) -> dict[str, Any]:
    """A JSON-ready dict of the graph (for local feature caches; datasets store specs, not graphs)."""
    nodes = [
        [
            n.name,
            n.op,
            n.target,
            [[list(t.shape), t.dtype] for t in n.inputs],
            [[list(t.shape), t.dtype] for t in n.outputs],
            n.flops,
            n.bytes_read,
            n.bytes_written,
            n.params,
            dict(n.attrs),
            n.module_path,
        ]
        for n in graph.nodes
    ]
    head = {
        k: getattr(graph, k)
        for k in (
            "phase",
            "batch_size",
            "seq_len",
            "dtype",
            "source",
            "param_count",
            "param_bytes",
            "trainable_param_count",
            "trainable_param_bytes",
            "input_bytes",
            "subgraphs",
            "name",
        )
    }
    return {
        **head,
        "nodes": nodes,
        "edges": [list(e) for e in graph.edges],
        "keep_alive": sorted(graph.keep_alive),
        "grad_outputs": sorted(graph.grad_outputs),
        "notes": list(graph.notes),
    }


def graph_from_dict(data: Mapping[str, Any]) -> OpGraph:
    """The inverse of :func:`graph_to_dict`."""

    def metas(items: Any) -> tuple[TensorMeta, ...]:
        return tuple(TensorMeta(tuple(shape), dtype) for shape, dtype in items)

    nodes = tuple(
        OpNode(
            name, op, target, metas(ins), metas(outs), flops, read, written, params, MappingProxyType(dict(attrs)), path
        )
        for name, op, target, ins, outs, flops, read, written, params, attrs, path in data["nodes"]
    )
    fields = {k: v for k, v in data.items() if k not in ("nodes", "edges", "keep_alive", "grad_outputs", "notes")}
    return OpGraph(
        nodes=nodes,
        edges=tuple(tuple(e) for e in data["edges"]),
        keep_alive=frozenset(data["keep_alive"]),
        grad_outputs=frozenset(data["grad_outputs"]),
        notes=tuple(data["notes"]),
        **fields,
    )
