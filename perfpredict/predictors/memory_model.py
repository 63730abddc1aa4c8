"""Peak memory: parameters, gradients, optimizer state, the liveness peak of activations, runtime overhead, and
how far loading the weights (built in float32, then cast) rises above the step's own peak.

The activation term walks the graph in execution order: a tensor is allocated by the op that produces it and
freed after its last consumer (or kept to the end when it is a graph output). Views share their base tensor's
storage, so a view extends its base's life and costs nothing itself. The one exception is the element picked out
of a multi-output op (getitem): each element is its own tensor with its own life. This is what a caching
allocator sees without fragmentation; the runtime-overhead term (CUDA context, allocator reserve) covers the rest.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from perfpredict.core.ops import CONV, DTYPE_BYTES, FLOAT_DTYPES
from perfpredict.core.report import MemoryBreakdown

# Bumped when the memory model changes what it predicts on a GPU only (CPU rows' features stay put, so the CPU
# artifacts and the feature schema keep their hash). 2: cuDNN's layout workspace (gpu_conv_workspace_bytes), and
# a training step's forward outputs other than the loss die after their last use (free_steps). The CPU keeps the
# old rule on purpose: its label, the resident set's high-water mark, is a median 1.9x the tensor peak, and
# dropping the logits moved its LM training rows away from it even after scaling (free_steps' docstring).
# 3: a training step's gradients are born in its backward, and the optimizer's scratch joins them at the end
# (backward_born_peak). The accuracy benchmark treats a GPU run made under another version as stale.
GPU_MEMORY_MODEL_VERSION = 3


def physics_versions(device_kind: str) -> dict[str, int]:
    """The versions of the physics behind a device kind's features, beyond the feature schema. An artifact records
    them at training; loading one trained under other physics is refused, since its trees learned other inputs."""
    return {"gpu_memory_model": GPU_MEMORY_MODEL_VERSION} if device_kind == "gpu" else {}


if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.hardware.devices import Device
    from perfpredict.predictors.base import RunConfig


def storage_roots(graph: OpGraph, own: Collection[int] = ()) -> list[int]:
    """For each node, the node that produced its storage: itself, or for a view the root of what it views (a view
    of a parameter or an input, with no producer in the graph, is its own root, and so is every view in ``own``)."""
    first_producer = _first_producers(graph)
    root = list(range(len(graph.nodes)))
    for i, node in enumerate(graph.nodes):
        if node.is_view and i in first_producer and i not in own:
            root[i] = root[first_producer[i]]
    return root


def _first_producers(graph: OpGraph) -> dict[int, int]:
    """node index -> the node feeding its first input (a view's base or a getitem's tuple)."""
    first: dict[int, int] = {}
    for src, dst in graph.edges:
        first.setdefault(dst, src)
    return first


def picked_elements(graph: OpGraph) -> dict[int, tuple[int, float]]:
    """Views that pick one element of a multi-output op: view index -> (producer index, the element's share of
    the producer's output bytes).

    A training graph's batch norm returns (output, mean, rstd, running mean, running var) and a backward op returns
    (grad input, grad weight, grad bias). The small elements are graph outputs; were the big one a view of the
    whole tuple, it would live to the end of the step. That kept every batch norm's output and every backward
    grad-input alive, and put ResNet training 40-50% above an H100's measured peak.
    """
    producer = _first_producers(graph)
    picked = {}
    for i, node in enumerate(graph.nodes):
        source = graph.nodes[producer[i]] if node.is_view and i in producer else None
        if source is None or len(source.outputs) < 2 or not node.outputs or not source.output_bytes:
            continue
        out = node.outputs[0]
        if any(tuple(e.shape) == tuple(out.shape) and e.dtype == out.dtype for e in source.outputs):
            picked[i] = (producer[i], out.nbytes / source.output_bytes)
    return picked


def element_bytes(
    graph: OpGraph,
    out_bytes: np.ndarray,
    picked: dict[int, tuple[int, float]] | None = None,
    gradients_walk: bool = False,
) -> np.ndarray:
    """``out_bytes`` ([nodes, configs]) with each picked element's bytes moved from its producer to the picking
    view. A picked parameter gradient moves out altogether (the gradient term counts it), unless
    ``gradients_walk``, where the walk carries the gradients (:func:`backward_born_peak`). ``picked``: the graph's
    ``picked_elements``, when the caller already has them."""
    moved = out_bytes.copy()
    for view, (source, share) in (picked_elements(graph) if picked is None else picked).items():
        part = out_bytes[source] * share
        moved[source] -= part
        if gradients_walk or view not in graph.grad_outputs:
            moved[view] += part
    return np.maximum(moved, 0.0)


def free_steps(
    graph: OpGraph, picked: dict[int, tuple[int, float]] | None = None, forward_outputs_kept: bool = True
) -> np.ndarray:
    """For each node, the step after which its output's storage is released (len(nodes) = kept to the end).
    A picked element (``picked_elements``, or ``picked`` when given) is its own storage; every other view extends
    its base's life.

    ``forward_outputs_kept=False``: in a training graph, the forward's outputs other than parameter gradients die
    after their last use instead of at the end. The measured step keeps only the loss (``loss =
    model(x, labels=y).loss``), so an LM's logits are gone before its backward; kept, they put Llama, Mistral and
    Qwen2 training 20-25% above the H100's measured peak (GPT-2's logits alone were 20 GB of a 13-sample step).
    Dropping them took the H100's 474 training rows from 8.4% to 7.1% (Llama 23.8% to 15.4%). The GPU memory model
    does this from version 2. The CPU's keeps them: on its 148 GPT-2, Llama, Mistral and Qwen2 training rows,
    dropping them took the analytical memory MAPE from 36.7% to 41.1% (the resident set sits above the tensors),
    and even scaled by each rule's median ratio to the measured peak, from 15.8% to 16.4%.
    """
    n = len(graph.nodes)
    root = storage_roots(graph, own=set(picked_elements(graph) if picked is None else picked))
    last_use = list(range(n))
    for src, dst in graph.edges:
        last_use[root[src]] = max(last_use[root[src]], dst)
    for i in graph.keep_alive:
        dropped = (
            not forward_outputs_kept
            and graph.phase == "training"
            and i not in graph.grad_outputs
            and not graph.nodes[i].attrs.get("backward")
        )
        if not dropped:
            last_use[root[i]] = n
    return np.array(last_use, dtype=int)


def activation_peak(output_bytes: np.ndarray, frees: np.ndarray, transient: np.ndarray | None = None) -> np.ndarray:
    """Peak live bytes per config. ``output_bytes`` is [nodes, configs]; a node's storage is live from its own
    step through ``frees[node]``. ``transient`` (same shape) is scratch a node holds only while it runs, on top of
    what is live at its step (:func:`gpu_conv_workspace_bytes`)."""
    return activation_peak_parts(output_bytes, frees, transient)[0]


def activation_peak_parts(
    output_bytes: np.ndarray, frees: np.ndarray, transient: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(peak live bytes, the part of it that is ``transient`` workspace at the peak's step), per config."""
    n = output_bytes.shape[0]
    if n == 0:
        return np.zeros(output_bytes.shape[1]), np.zeros(output_bytes.shape[1])
    freed = np.zeros((n + 1, output_bytes.shape[1]))
    np.add.at(freed, frees, output_bytes)
    allocated = np.cumsum(output_bytes, axis=0)
    released_before = np.vstack([np.zeros((1, output_bytes.shape[1])), np.cumsum(freed[:n], axis=0)[:-1]])
    live = allocated - released_before
    total = live if transient is None else live + transient
    at = total.argmax(axis=0)
    columns = np.arange(output_bytes.shape[1])
    scratch = np.zeros(output_bytes.shape[1]) if transient is None else transient[at, columns]
    return total[at, columns], scratch


@dataclass(frozen=True)
class PeakParts:
    """A step's activation term (what its peak adds to the weights, gradients and optimizer state), and the parts
    of it that are not activations: per config."""

    total: np.ndarray
    workspace: np.ndarray  # a kernel's scratch at the peak (cuDNN's layout workspace)
    optimizer_temporaries: np.ndarray  # the optimizer step's scratch, where the peak is at that step
    at_optimizer_step: np.ndarray  # bool: the peak is the optimizer step's (then the rest is the loss, logits)


def backward_born_peak(
    graph: OpGraph,
    walk_bytes: np.ndarray,
    frees: np.ndarray,
    transient: np.ndarray | None,
    picked: Collection[int],
    trainable_bytes: float,
    scratch_bytes: float,
) -> PeakParts:
    """A training step's peak per config above the weights, gradients and optimizer state that the memory breakdown
    counts as resident (GPU memory model 3), with what it is made of. Its activation term (``total``): may be less
    than the activations live at the peak.

    ``zero_grad(set_to_none=True)``, torch's default and the collector's, frees every gradient before the step. So
    at the start of the backward, where an LM's logits and their gradient meet the saved activations, no gradient
    exists yet; counting them resident for the whole step put Llama, Mistral and Qwen2 training a median 14-17%
    above the H100's measured peaks (memory model 2). Here the walk carries each gradient from the node that makes
    it (``walk_bytes`` from ``element_bytes(gradients_walk=True)``); gradients it does not carry (one a backward
    node returns itself, which the cost arrays leave to the gradient term: an embedding's, made last) join at the
    end, where the optimizer step holds every gradient and its scratch (``scratch_bytes``: ``OPTIMIZER_SCRATCH``,
    a multi-tensor AdamW's sqrt of its second moment). ``picked``: the graph's picked elements, each its own
    storage. ``studies/eager_peak.py`` checks the walk against an eager step on a CPU.

    The parts: where the optimizer step sets the peak, its scratch (AdamW's temporary copy) and the outputs kept to
    the end (the loss, or an LM's logits); where the backward does, the activations saved for it and the kernel's
    workspace at that step.
    """
    peak, workspace = activation_peak_parts(walk_bytes, frees, transient)
    root = storage_roots(graph, own=picked)
    carried = sum((walk_bytes[r] for r in {root[i] for i in graph.grad_outputs}), np.zeros(walk_bytes.shape[1]))
    at_end = walk_bytes[frees >= len(graph.nodes)].sum(axis=0)
    step_end = at_end + np.maximum(trainable_bytes - carried, 0.0) + scratch_bytes
    total = np.maximum(peak, step_end) - trainable_bytes
    end = step_end > peak
    scratch = np.where(end, np.minimum(scratch_bytes, total), 0.0)
    return PeakParts(total, np.where(end, 0.0, np.minimum(workspace, total)), scratch, end)


def without_gradients(graph: OpGraph, walk_bytes: np.ndarray, picked: Collection[int]) -> np.ndarray:
    """``walk_bytes`` (from ``element_bytes(gradients_walk=True)``) with every parameter gradient taken out: a step
    that sends each gradient away as it is made (ZeRO-Offload to the host; ZeRO-2, ZeRO-3 and FSDP by a
    reduce-scatter) holds none of them to its end."""
    out = walk_bytes.copy()
    root = storage_roots(graph, own=picked)
    out[sorted({root[i] for i in graph.grad_outputs})] = 0.0
    return out


def gpu_conv_workspace_bytes(graph: OpGraph, moved: np.ndarray, out_bytes: np.ndarray) -> np.ndarray:
    """Scratch per node ([nodes, configs]) while a GPU runs a forward convolution: a copy of its input and output.

    cuDNN runs NCHW convolutions through NHWC tensor-core kernels and transposes the input and the output in its
    workspace, which torch takes from the caching allocator. On the H100 (torch 2.11) this is what put conv nets'
    inference peaks 15-95% above the liveness walk: VGG's at 1.94x, a transposed input plus output on top of the
    largest layer's own. Adding input + output bytes at each forward conv took the analytical memory MAPE of the
    288 inference rows of graphs with a conv from 15.8% to 9.6% (signed median -12.9% to -0.4%) and left the 283
    training rows at 4.2%: a step's peak comes once the saved activations have piled up, not during one conv.
    cuDNN is choosier than this one rule (1x1 and depthwise convs may skip the transposes: data/README.md,
    "cuDNN's layout workspace"). Input bytes are the bytes the node moves less its output and its weights.
    """
    extra = np.zeros_like(out_bytes)
    for i, node in enumerate(graph.nodes):
        if node.op != CONV or node.attrs.get("backward"):
            continue
        weights = node.params * DTYPE_BYTES.get(node.outputs[0].dtype if node.outputs else graph.dtype, 4)
        extra[i] = np.maximum(moved[i] - weights, out_bytes[i])
    return extra


def cpu_math_attention_bytes(graph: OpGraph, out_bytes: np.ndarray) -> np.ndarray:
    """Extra saved bytes per node where a CPU trains attention on the math path, shaped like ``out_bytes``.

    Training graphs carry fused attention, as a GPU runs it (compiler_hooks/observed_trace.py). A CPU's fused
    kernel refuses dropout, so with ``dropout_p > 0`` it runs the math path and keeps, per score, the softmax
    output, the dropout mask (1 byte) and the dropped probabilities until the backward: (2 * itemsize + 1) bytes
    for each of batch * heads * seq_q * seq_k scores. They live as long as the fused node's output (until its
    backward), so they are added to that node.
    """
    extra = np.zeros_like(out_bytes)
    for i, node in enumerate(graph.nodes):
        if node.attrs.get("dropout_p", 0.0) <= 0 or node.attrs.get("backward") or len(node.inputs) < 3:
            continue
        out, key = node.outputs[0], node.inputs[1]
        if not out.shape or len(key.shape) < 2 or not node.output_bytes:
            continue
        scores = out.numel // max(out.shape[-1], 1) * key.shape[-2]
        itemsize = out.nbytes / max(out.numel, 1)
        factor = scores * (2 * itemsize + 1) / node.output_bytes  # scales with the node's batch-affine bytes
        extra[i] = out_bytes[i] * factor
    return extra


def training_bytes(graph: OpGraph, config: RunConfig):
    """Weights, gradients, optimizer state and AMP's weight copies for this config (perfpredict.hardware.precision),
    with its offload, QLoRA base and float8 weight cache (:func:`held_options`)."""
    from perfpredict.hardware.precision import training_bytes as held

    return held(graph, config.phase, config.optimizer, config.precision, held_options(graph, config))


def held_options(graph: OpGraph, config: RunConfig):
    """What ``config`` holds beyond its precision recipe: ZeRO-Offload, QLoRA's NF4 base (the frozen weights of the
    blocks' linears), Transformer Engine's cached float8 weights (the blocks' linears, delayed scaling)."""
    from perfpredict.compiler_hooks.linears import frozen_linear_params, linear_params
    from perfpredict.hardware.precision import HeldOptions

    if config.phase != "training":
        return HeldOptions()
    return HeldOptions(
        offload_optimizer=config.offload_optimizer,
        nf4_params=frozen_linear_params(graph) if config.qlora else 0,
        float8_cached_params=linear_params(graph) if config.float8 == "delayed" else 0,
    )


def fixed_tensor_bytes(graph: OpGraph, config: RunConfig) -> int:
    """Bytes held for the whole step whatever the batch: parameters, gradients and optimizer state."""
    return training_bytes(graph, config).fixed


def load_peak_bytes(graph: OpGraph, config: RunConfig) -> int:
    """Tensor bytes while the weights are cast from ``config.weights_built_in`` to the run dtype; 0 with no cast.

    ``Module.to(dtype)`` casts one tensor at a time and frees each original, so the peak is every weight in the
    build dtype plus one weight's copy in the run dtype: the largest any op reads, as an upper bound. The AdamW
    state comes later, at the first step. On an H100 this load sets the measured peak of bfloat16 inference
    whenever the weights outweigh the activations: max(step, load) took the analytical memory MAPE of the
    111 bfloat16 inference rows from 32.9% to 10.8%, and of all 442 rows from 15.7% to 10.2%.
    """
    built, run = config.weights_built_in, graph.dtype
    if built is None or built == run or built not in DTYPE_BYTES or run not in FLOAT_DTYPES or config.qlora:
        return 0  # (QLoRA: bitsandbytes quantizes each weight as it loads it, never holding the model in full)
    largest = max((node.params for node in graph.nodes), default=0) * DTYPE_BYTES[run]
    return int(graph.param_bytes * DTYPE_BYTES[built] / DTYPE_BYTES[run]) + largest


def peak_tensor_bytes(graph: OpGraph, config: RunConfig, activations_bytes: np.ndarray) -> np.ndarray:
    """Peak tensor bytes per batch size (no runtime overhead): the step's, or the weights' load where higher."""
    step = fixed_tensor_bytes(graph, config) + np.asarray(activations_bytes, dtype=float)
    return np.maximum(step, float(load_peak_bytes(graph, config)))


def memory_terms(
    graph: OpGraph,
    device: Device,
    config: RunConfig,
    activations_bytes: float,
    workspace_bytes: float = 0.0,
    optimizer_temporaries_bytes: float = 0.0,
    peak_at: str = "",
) -> MemoryBreakdown:
    """The breakdown of the peak; ``activations_bytes`` is the whole activation term, of which
    ``workspace_bytes`` and ``optimizer_temporaries_bytes`` are parts; ``peak_at``: the step's phase at its peak."""
    held = training_bytes(graph, config)
    step = held.fixed + int(activations_bytes)
    return MemoryBreakdown(
        workspace_bytes=int(min(workspace_bytes, activations_bytes)),
        optimizer_temporaries_bytes=int(min(optimizer_temporaries_bytes, activations_bytes)),
        peak_at=peak_at or ("forward" if config.phase == "inference" else "backward"),
        params_bytes=held.params,
        gradients_bytes=held.gradients,
        optimizer_state_bytes=held.optimizer_state,
        activations_peak_bytes=int(activations_bytes),
        runtime_overhead_bytes=device.runtime_overhead_bytes,
        load_transient_bytes=max(0, load_peak_bytes(graph, config) - step),
        weight_copies_bytes=held.weight_copies,
        float8_copies_bytes=held.float8_copies,
    )
