"""An OpGraph as numpy arrays whose sizes are linear in the batch size, for fast many-config prediction.

Every per-node quantity (FLOPs, bytes moved, output bytes) of a model at fixed sequence length is affine in the
batch: q(b) = q0 + q1 * b (parameters give the constant part, activations the slope). Two captures at two batch
sizes fix both coefficients exactly; one capture gives slope 0. Predictors evaluate a whole column of batch
sizes at once, which is what makes ``predict_many`` fast, and the single-config path is the same code with one
column.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfpredict.core import ops
from perfpredict.core.errors import FrontendError
from perfpredict.core.graph import OpGraph


@dataclass(frozen=True)
class CostArrays:
    graph: OpGraph  # the structure (ops, dtypes, edges) and the reference batch
    flops: tuple[np.ndarray, np.ndarray]  # (intercept, slope per sample), one entry per node
    bytes_moved: tuple[np.ndarray, np.ndarray]
    output_bytes: tuple[np.ndarray, np.ndarray]
    input_bytes: tuple[float, float]
    # per node, the slope per sample of each dimension of its output and first two inputs (``tensor_dims``):
    # what the per-op efficiency model reads at another batch; None where the capture cannot tell (one capture)
    dim_slopes: tuple[tuple[tuple[float, ...], ...], ...] | None = None

    @classmethod
    def from_graph(cls, graph: OpGraph) -> CostArrays:
        zero = np.zeros(len(graph.nodes))
        flops, moved, out = _node_columns(graph)
        return cls(graph, (flops, zero), (moved, zero), (out, zero), (float(graph.input_bytes), 0.0))

    def shapes_at(self, batch: float) -> list[tuple[tuple[int, ...], ...]]:
        """Per node, the dimensions of its output and first two inputs at ``batch`` (``tensor_dims`` order)."""
        b0 = self.graph.batch_size
        if self.dim_slopes is None or batch == b0:
            return [tensor_dims(n) for n in self.graph.nodes]
        return [
            tuple(
                tuple(max(1, round(d + k * (batch - b0))) for d, k in zip(dims, slopes))
                for dims, slopes in zip(tensor_dims(n), node_slopes)
            )
            for n, node_slopes in zip(self.graph.nodes, self.dim_slopes)
        ]

    @classmethod
    def fit(cls, a: OpGraph, b: OpGraph) -> CostArrays:
        """Affine coefficients from the same model captured at two batch sizes."""
        if [n.op for n in a.nodes] != [n.op for n in b.nodes] or a.batch_size == b.batch_size:
            raise FrontendError(
                f"the graph changes structure between batch {a.batch_size} and {b.batch_size}; "
                "predict each batch size with perfpredict.predict instead"
            )
        span = float(b.batch_size - a.batch_size)
        ca, cb = _node_columns(a), _node_columns(b)
        pairs = [((x * b.batch_size - y * a.batch_size) / span, (y - x) / span) for x, y in zip(ca, cb)]
        slope_in = (b.input_bytes - a.input_bytes) / span
        slopes = tuple(
            tuple(
                tuple((y - x) / span for x, y in zip(ta, tb)) if len(ta) == len(tb) else (0.0,) * len(ta)
                for ta, tb in zip(tensor_dims(na), tensor_dims(nb))
            )
            for na, nb in zip(a.nodes, b.nodes)
        )
        return cls(a, pairs[0], pairs[1], pairs[2], (a.input_bytes - slope_in * a.batch_size, slope_in), slopes)

    @classmethod
    def from_anchor(cls, graph: OpGraph) -> CostArrays:
        """Affine coefficients from ONE capture, at a batch size no other dimension shares (a prime such as 13).

        Approximate where :meth:`fit` is exact, at a third of the tracing cost (training sets trace hundreds of
        batch sweeps): FLOPs scale with the batch; a node's parameter reads are constant and its other bytes
        scale; an output scales when one of its dimensions is a multiple of the anchor batch.
        """
        b = float(graph.batch_size)
        flops, moved, _ = _node_columns(graph)
        const_read = np.array(
            [
                min(
                    n.params * ops.DTYPE_BYTES.get(n.outputs[0].dtype if n.outputs else "float32", 4),
                    n.bytes_read + n.bytes_written,
                )
                for n in graph.nodes
            ],
            dtype=float,
        )
        const_out, slope_out = np.zeros(len(graph.nodes)), np.zeros(len(graph.nodes))
        for i, n in enumerate(graph.nodes):
            if n.is_view or i in graph.grad_outputs:
                continue
            for t in n.outputs:
                if any(d % graph.batch_size == 0 for d in t.shape if d):
                    slope_out[i] += t.nbytes / b
                else:
                    const_out[i] += t.nbytes
        # a dimension that is a multiple of the anchor batch carries it (the anchor is chosen so none other is)
        slopes = tuple(
            tuple(
                tuple(d / b if b > 1 and d and d % graph.batch_size == 0 else 0.0 for d in dims)
                for dims in tensor_dims(n)
            )
            for n in graph.nodes
        )
        return cls(
            graph,
            (np.zeros_like(flops), flops / b),
            (const_read, (moved - const_read) / b),
            (const_out, slope_out),
            (0.0, graph.input_bytes / b),
            slopes,
        )

    def at(self, batches: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(flops, bytes moved, output bytes) as [nodes, configs] matrices, and input bytes per config."""
        b = np.asarray(batches, dtype=float)[None, :]
        f = self.flops[0][:, None] + self.flops[1][:, None] * b
        m = self.bytes_moved[0][:, None] + self.bytes_moved[1][:, None] * b
        o = self.output_bytes[0][:, None] + self.output_bytes[1][:, None] * b
        return f, m, o, self.input_bytes[0] + self.input_bytes[1] * b[0]


def tensor_dims(node) -> tuple[tuple[int, ...], ...]:
    """The dimensions of a node's first output and first two inputs (what the per-op efficiency model reads)."""
    out = tuple(node.outputs[0].shape) if node.outputs else ()
    return (out, *(tuple(t.shape) for t in node.inputs[:2]))


def _node_columns(graph: OpGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    nodes = graph.nodes
    flops = np.array([n.flops for n in nodes], dtype=float)
    moved = np.array([n.bytes_read + n.bytes_written for n in nodes], dtype=float)
    # Views share storage and parameter gradients are counted in their own memory term.
    out = np.array(
        [0 if (n.is_view or i in graph.grad_outputs) else n.output_bytes for i, n in enumerate(nodes)],
        dtype=float,
    )
    return flops, moved, out
