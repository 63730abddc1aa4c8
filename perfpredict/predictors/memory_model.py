"""Peak memory: parameters, gradients, optimizer state, the liveness peak of activations, runtime overhead.

The activation term walks the graph in execution order: a tensor is allocated by the op that produces it and
freed after its last consumer (or kept to the end when it is a graph output). Views share their base tensor's
storage, so a view extends its base's life and costs nothing itself. This is what a caching allocator sees
without fragmentation; the runtime-overhead term (CUDA context, allocator reserve) covers the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from perfpredict.report import MemoryBreakdown

if TYPE_CHECKING:
    from perfpredict.devices import Device
    from perfpredict.graph import OpGraph
    from perfpredict.predictors.base import RunConfig


def free_steps(graph: OpGraph) -> np.ndarray:
    """For each node, the step after which its output's storage is released (len(nodes) = kept to the end)."""
    n = len(graph.nodes)
    first_producer: dict[int, int] = {}
    for src, dst in graph.edges:
        first_producer.setdefault(dst, src)
    root = list(range(n))
    for i, node in enumerate(graph.nodes):
        if node.is_view and i in first_producer:
            root[i] = root[first_producer[i]]
    last_use = list(range(n))
    for src, dst in graph.edges:
        last_use[root[src]] = max(last_use[root[src]], dst)
    for i in graph.keep_alive:
        last_use[root[i]] = n
    return np.array(last_use, dtype=int)


def activation_peak(output_bytes: np.ndarray, frees: np.ndarray) -> np.ndarray:
    """Peak live bytes per config. ``output_bytes`` is [nodes, configs]; a node's storage is live from its own
    step through ``frees[node]``."""
    n = output_bytes.shape[0]
    if n == 0:
        return np.zeros(output_bytes.shape[1])
    freed = np.zeros((n + 1, output_bytes.shape[1]))
    np.add.at(freed, frees, output_bytes)
    allocated = np.cumsum(output_bytes, axis=0)
    released_before = np.vstack([np.zeros((1, output_bytes.shape[1])), np.cumsum(freed[:n], axis=0)[:-1]])
    return (allocated - released_before).max(axis=0)


def memory_terms(graph: OpGraph, device: Device, config: RunConfig, activations_bytes: float) -> MemoryBreakdown:
    training = config.phase == "training"
    trainable = graph.trainable_param_bytes if training else 0
    return MemoryBreakdown(
        params_bytes=graph.param_bytes,
        gradients_bytes=trainable,
        optimizer_state_bytes=trainable * config.optimizer_states,
        activations_peak_bytes=int(activations_bytes),
        runtime_overhead_bytes=device.runtime_overhead_bytes,
    )
