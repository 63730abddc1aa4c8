"""The optimizer step by implementation: its scratch memory and its kernel launches.

torch.optim runs one of three implementations (``foreach=``/``fused=``):

- ``for-loop`` (``foreach=False``): each parameter's update is its own chain of about a dozen kernels; AdamW's
  ``exp_avg_sq.sqrt()`` is a temporary the size of one parameter at a time;
- ``foreach`` (torch's default on CUDA): each step of the chain is one ``_foreach_*`` op over every parameter, and
  AdamW's ``_foreach_sqrt`` makes a temporary of every parameter at once (``base.OPTIMIZER_SCRATCH``). A
  ``_foreach_*`` op launches one kernel per 320 chunks of 65,536 elements, or per 36 tensors of four lists
  (``multi_tensor_apply``: ``kChunkSize``, ``depth_to_max_blocks`` and ``depth_to_max_tensors`` in
  aten/src/ATen/native/cuda/MultiTensorApply.cuh);
- ``fused`` (``fused=True``, and DeepSpeed's FusedAdam): one kernel per launch group, no temporary.

ZeRO-Offload (DeepSpeed ``offload_optimizer: cpu``) runs the step on the host: no scratch and no kernel on the GPU.
The half-precision gradients go to the host during the backward (overlapping it), DeepSpeed's CPU-Adam updates the
float32 master weights and states there, and the updated half-precision weights come back over the host link before
the next forward (:func:`offload_s`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from perfpredict.compiler_hooks.recompute import forward_end
from perfpredict.core.ops import DTYPE_BYTES
from perfpredict.predictors.base import OPTIMIZER_SCRATCH

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.predictors.base import RunConfig

FOREACH = "foreach"
KERNELS_PER_UPDATE = (
    12  # an AdamW update's chain of elementwise kernels (the two-timeline host model dispatches a dozen ops per step)
)
CHUNK_ELEMENTS = 65_536 * 320  # multi_tensor_apply: elements one launch covers
TENSORS_PER_LAUNCH = 36  # multi_tensor_apply, four tensor lists (param, grad, exp_avg, exp_avg_sq)


def implementation(config: RunConfig) -> str:
    """The implementation the step runs: the one asked for, else torch's CUDA default (foreach)."""
    return config.optimizer_impl or FOREACH


def param_tensors(graph: OpGraph) -> tuple[int, int]:
    """(parameter tensors, elements of the largest one), read off the forward ops that read weights."""
    sizes = [n.params for n in graph.nodes[: forward_end(graph)] if n.params]
    return len(sizes), max(sizes, default=0)


def scratch_bytes(graph: OpGraph, config: RunConfig, gradient_bytes: float) -> float:
    """The step's temporaries on the device, for gradients of ``gradient_bytes`` in all (the values it updates)."""
    if config.phase != "training" or config.offload_optimizer:
        return 0.0
    scratch = OPTIMIZER_SCRATCH[config.optimizer]
    impl = implementation(config)
    if impl == "fused" or not scratch:
        return 0.0
    if impl == "for-loop":
        _, largest = param_tensors(graph)
        each = gradient_bytes / max(graph.trainable_param_count, 1)
        return scratch * min(largest * each, gradient_bytes)
    return scratch * gradient_bytes


EXPOSED_LAUNCHES = 4  # a foreach or fused step: launches not hidden under its memory-bound kernels


def device_launches(graph: OpGraph, config: RunConfig) -> int:
    """Launch overheads a step's device time shows: a for-loop step's every kernel, else a handful."""
    if implementation(config) == "for-loop":
        return kernels(graph, config)
    return EXPOSED_LAUNCHES if kernels(graph, config) else 0


def host_dispatches(graph: OpGraph, config: RunConfig) -> int:
    """Ops the host dispatches for one step: one per kernel chain element (foreach: a dozen ops over every
    parameter; fused: one; for-loop: a dozen per parameter)."""
    if not kernels(graph, config):
        return 0
    impl = implementation(config)
    tensors, _ = param_tensors(graph)
    return {"fused": 1, "for-loop": KERNELS_PER_UPDATE * max(tensors, 1)}.get(impl, KERNELS_PER_UPDATE)


def kernels(graph: OpGraph, config: RunConfig) -> int:
    """Kernel launches of one step on the device."""
    if config.phase != "training" or config.offload_optimizer or config.optimizer == "none":
        return 0
    tensors, _ = param_tensors(graph)
    launches = max(math.ceil(graph.trainable_param_count / CHUNK_ELEMENTS), math.ceil(tensors / TENSORS_PER_LAUNCH), 1)
    impl = implementation(config)
    if impl == "for-loop":
        return KERNELS_PER_UPDATE * max(tensors, 1)
    return launches * (1 if impl == "fused" else KERNELS_PER_UPDATE)


#: DeepSpeed's CPU-Adam streams per parameter: reads the float32 weight, gradient and both states (16 bytes), writes
#: the weight and both states and the half-precision copy it sends back (14 bytes)
HOST_ADAM_BYTES_PER_PARAM = 30
#: [assumption] what a vectorised CPU-Adam streams through host memory on one GPU's share of a server's CPU: 50 GB/s
#: (a two-socket DDR5 server's theoretical bandwidth is 600+ GB/s for 8 GPUs; 60-70% is what streaming reaches)
HOST_STEP_BYTES_PER_S = 50e9


def offload_s(graph: OpGraph, device, config: RunConfig, backward_s):
    """ZeRO-Offload's step as the GPU waits for it: the part of the gradients' copy out that the backward
    (``backward_s``) does not hide, the host's Adam step, and the weights' copy back (``hardware.host_link``)."""
    import numpy as np

    from perfpredict.hardware.host_link import host_link_bytes_per_s
    from perfpredict.hardware.precision import PRECISIONS

    half = DTYPE_BYTES[PRECISIONS[config.precision].compute_dtype if config.precision else graph.dtype]
    link = host_link_bytes_per_s(device)
    trainable = graph.trainable_param_count
    copy = trainable * half / link
    host = trainable * HOST_ADAM_BYTES_PER_PARAM / HOST_STEP_BYTES_PER_S
    return np.maximum(copy - np.asarray(backward_s, dtype=float), 0.0) + host + copy
