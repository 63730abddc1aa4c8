"""What one rank's training step holds at its peak beyond its weights, gradients and optimizer state: the backward
peak of its liveness walk, and what stays to the optimizer step.

The single-GPU report's activation term assumes one GPU's state: every gradient born in the backward and kept,
and the optimizer's temporaries of every parameter. A rank of a sharded plan holds neither: ZeRO-2, ZeRO-3 and
FSDP reduce-scatter each layer's gradients as they are made, and its optimizer works on its shard. So the parallel
memory model walks the rank's graph itself (``perfpredict.predictors.memory_model``, the same walk), carrying the
gradients only where the rank keeps them whole (DDP, ZeRO-1), and compares the two peaks with its own sharded terms
(``build.rank_memory``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepPeaks:
    """Bytes above the resident gradient term: at the backward peak (its kernel workspace included, and apart), and
    at the optimizer step (the outputs kept to the end: the loss, an LM's logits)."""

    backward: int
    workspace: int
    at_end: int


def step_peaks(graph: Any, device: Any, gradient_bytes: float, carried: bool) -> StepPeaks:
    """The peaks of ``graph`` (a training step) on ``device``. ``carried``: the gradients (``gradient_bytes`` in
    all) are born in the backward and kept to the step; else they leave as they are made."""
    import numpy as np

    from perfpredict.predictors import memory_model as mm
    from perfpredict.predictors.cost_arrays import CostArrays

    _, moved, out_bytes, input_bytes = CostArrays.from_graph(graph).at(np.array([graph.batch_size]))
    gpu = device.kind == "gpu"
    if not gpu:
        out_bytes = out_bytes + mm.cpu_math_attention_bytes(graph, out_bytes)
    picked = mm.picked_elements(graph)
    workspace = mm.gpu_conv_workspace_bytes(graph, moved, out_bytes) if gpu else None
    frees = mm.free_steps(graph, picked, forward_outputs_kept=not gpu)
    walk = mm.element_bytes(graph, out_bytes, picked, gradients_walk=True)
    grads = {mm.storage_roots(graph, own=set(picked))[i] for i in graph.grad_outputs}
    in_walk = float(sum(walk[r][0] for r in grads))
    if not carried:  # every gradient leaves the walk, the ones a backward op returns itself included
        walk = mm.without_gradients(graph, walk, set(picked))
        in_walk = 0.0
    peak, scratch = mm.activation_peak_parts(walk, frees, workspace)
    at_end = float(walk[frees >= len(graph.nodes)].sum(axis=0)[0])
    held = gradient_bytes if carried else 0.0
    inputs = float(input_bytes[0])
    backward = max(float(peak[0]) - held, 0.0)
    end = max(at_end + max(held - in_walk, 0.0) - held, 0.0)
    return StepPeaks(round(backward + inputs), round(min(float(scratch[0]), backward)), round(end + inputs))
