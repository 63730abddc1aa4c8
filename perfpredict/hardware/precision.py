"""Training precision and optimizer state: the bytes a training step holds per parameter.

A training step holds the weights, their gradients and the optimizer's state for the whole step. How many bytes
each takes depends on the precision recipe and the optimizer, not on the traced graph alone:

| precision  | compute  | weights | gradients | optimizer state | half weight copies (autocast's cache) |
|------------|----------|---------|-----------|-----------------|---------------------------------------|
| `fp32`     | float32  | 4       | 4         | 4 per state     | -                                     |
| `bf16`     | bfloat16 | 2       | 2         | 2 per state     | -                                     |
| `amp-bf16` | bfloat16 | 4       | 4         | 4 per state     | 2                                     |
| `amp-fp16` | float16  | 4       | 4         | 4 per state     | 2                                     |

(bytes per trainable parameter). ``amp-*`` is ``torch.autocast`` with float32 master weights, what most users run:
with AdamW (2 states) it is 4 + 4 + 8 = 16 bytes per parameter, plus the half-precision copies autocast keeps for
the step. Optimizers (``OPTIMIZERS``): AdamW and Adam keep 2 states, SGD with momentum 1, plain SGD none;
Adafactor (as in ``transformers.Adafactor``, no first moment) keeps a factored second moment, rows + columns per
weight matrix; ``adamw-8bit`` (bitsandbytes) keeps its 2 states in 1 byte each, plus a float32 scale per 2,048
values. ``RunConfig.precision = None`` keeps the graph's own dtype for everything (what the collector measures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfpredict.core.ops import DTYPE_BYTES

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph


@dataclass(frozen=True)
class Precision:
    name: str
    compute_dtype: str  # what the step's matmuls and activations run in (the traced dtype)
    weight_dtype: str  # the weights the optimizer updates (the master copy under AMP)
    autocast_copies: bool  # autocast caches a compute-dtype copy of each weight for the step


PRECISIONS = {
    "fp32": Precision("fp32", "float32", "float32", False),
    "bf16": Precision("bf16", "bfloat16", "bfloat16", False),
    "amp-bf16": Precision("amp-bf16", "bfloat16", "float32", True),
    "amp-fp16": Precision("amp-fp16", "float16", "float32", True),
}
DEFAULT_TRAINING_PRECISION = "amp-bf16"
#: the precision a training run in ``dtype`` most likely uses when none is named: half precision means AMP
PRECISION_FOR_DTYPE = {"float32": "fp32", "bfloat16": "amp-bf16", "float16": "amp-fp16"}

#: optimizer -> (state tensors per parameter, bytes per state value or None for the weights' dtype)
OPTIMIZERS: dict[str, tuple[int, int | None]] = {
    "adamw": (2, None),
    "adam": (2, None),
    "sgd": (0, None),
    "sgd_momentum": (1, None),
    "rmsprop": (1, None),
    "adagrad": (1, None),
    "adafactor": (1, None),
    "adamw-8bit": (2, 1),
    "none": (0, None),
}
EIGHT_BIT_BLOCK = 2048  # bitsandbytes' blockwise quantisation: one float32 absmax per block of each state

#: float8 training recipes: torchao's Float8Linear with dynamic scaling per tensor or per row, and Transformer
#: Engine's delayed scaling (amax history; its float8 weights and their transposes stay cached for the step)
FLOAT8_RECIPES = {
    "none": "no float8",
    "tensorwise": "torchao Float8Linear, dynamic tensorwise scaling",
    "rowwise": "torchao Float8Linear, dynamic rowwise scaling",
    "delayed": "Transformer Engine, delayed scaling (amax history)",
}
#: torch.optim's implementations: one kernel chain per parameter, multi-tensor (torch's default on CUDA), one fused
#: kernel (``fused=True``); None in a Request means the framework's default (foreach; DeepSpeed's FusedAdam)
OPTIMIZER_IMPLS = ("for-loop", "foreach", "fused")
#: QLoRA's NF4 with double quantization: 4 bits per weight plus 0.127 bits of quantization constants (Dettmers et al.
#: 2023, "QLoRA", section 3: blocks of 64 with an 8-bit absmax per block and a float32 constant per 256 blocks)
NF4_BYTES_PER_PARAM = 4.127 / 8
#: ZeRO-Offload keeps on the GPU only the gradient bucket being copied out (DeepSpeed's reduce_bucket_size default,
#: 5e8 elements)
OFFLOAD_BUCKET_ELEMENTS = 500_000_000


@dataclass(frozen=True)
class TrainingBytes:
    """Bytes held through a step: weights, gradients, optimizer state, autocast's weight copies and the float8
    weights Transformer Engine caches."""

    params: int
    gradients: int
    optimizer_state: int
    weight_copies: int
    float8_copies: int = 0

    @property
    def fixed(self) -> int:
        return self.params + self.gradients + self.optimizer_state + self.weight_copies + self.float8_copies


@dataclass(frozen=True)
class HeldOptions:
    """What a step holds beyond its precision recipe: ZeRO-Offload's state on the host, QLoRA's NF4 base, Transformer
    Engine's cached float8 weights (bytes per parameter: a float8 copy and its transpose)."""

    offload_optimizer: bool = False
    nf4_params: int = 0  # frozen parameters stored in NF4
    float8_cached_params: int = 0  # parameters whose float8 weight and transpose stay cached


def state_bytes(graph: OpGraph, optimizer: str, trainable: int, weight_bytes: float) -> int:
    """The optimizer's state for ``trainable`` parameters whose values take ``weight_bytes`` each."""
    states, value_bytes = OPTIMIZERS[optimizer]
    if optimizer == "adafactor":  # a row and a column vector per matrix; treated as square: 2 sqrt(n) values
        values = sum(2 * math.isqrt(max(n.params, 0)) for n in graph.nodes[: graph.backward_start] if n.params)
        return int(min(values, trainable) * weight_bytes)
    if value_bytes is not None:
        return int(trainable * states * (value_bytes + 4 / EIGHT_BIT_BLOCK))
    return int(round(trainable * states * weight_bytes))


def training_bytes(
    graph: OpGraph, phase: str, optimizer: str, precision: str | None, held: HeldOptions | None = None
) -> TrainingBytes:
    """What ``graph`` holds through a step. Inference holds its weights only; training under ``precision`` (None:
    everything in the graph's own dtype) adds gradients, optimizer state and, under AMP, the half copies.

    ``held``: ZeRO-Offload moves the optimizer state, the float32 master weights and the step to the host, as
    DeepSpeed runs it (half-precision weights on the GPU, the gradients streamed out through one bucket); QLoRA
    stores ``nf4_params`` frozen weights in NF4; Transformer Engine caches a float8 weight and its transpose."""
    held = held or HeldOptions()
    if phase != "training":
        return TrainingBytes(graph.param_bytes, 0, 0, 0)
    trainable, frozen = graph.trainable_param_count, graph.param_count - graph.trainable_param_count
    if precision is None:
        trainable = trainable or graph.trainable_param_bytes // DTYPE_BYTES.get(graph.dtype, 4)
        w = c = graph.trainable_param_bytes / max(trainable, 1)
        frozen_each = (graph.param_bytes - graph.trainable_param_bytes) / max(frozen, 1)
        copies = 0.0
    else:
        p = PRECISIONS[precision]
        w, c = DTYPE_BYTES[p.weight_dtype], DTYPE_BYTES[p.compute_dtype]
        frozen_each = c  # frozen weights stay in the compute dtype
        copies = c if p.autocast_copies else 0.0
    nf4 = min(held.nf4_params, frozen)
    frozen_bytes = round(nf4 * NF4_BYTES_PER_PARAM + (frozen - nf4) * frozen_each)
    float8 = 2 * held.float8_cached_params
    if held.offload_optimizer:  # DeepSpeed's half-precision weights; master weights and state on the host
        return TrainingBytes(
            round(trainable * c) + frozen_bytes, round(min(trainable, OFFLOAD_BUCKET_ELEMENTS) * c), 0, 0, float8
        )
    return TrainingBytes(
        round(trainable * w) + frozen_bytes,
        round(trainable * w),
        state_bytes(graph, optimizer, trainable, w),
        round(trainable * copies),
        float8,
    )


def check_training_options(
    *,
    float8: str,
    optimizer_impl: str | None,
    lora_targets: str | None,
    power_limit_w: float | None,
) -> None:
    """Refuse a training option that cannot work, in one line that names the valid values or the fix."""
    from perfpredict.core.errors import InvalidInputError

    if float8 not in FLOAT8_RECIPES:
        raise InvalidInputError(f"float8={float8!r} is not one of {', '.join(map(repr, FLOAT8_RECIPES))}")
    if optimizer_impl is not None and optimizer_impl not in OPTIMIZER_IMPLS:
        raise InvalidInputError(
            f"optimizer_impl={optimizer_impl!r} is not one of {', '.join(map(repr, OPTIMIZER_IMPLS))} "
            "(None: the framework's default)"
        )
    if lora_targets is not None and (not isinstance(lora_targets, str) or not lora_targets.strip()):
        raise InvalidInputError(
            f"lora_targets={lora_targets!r} names the modules that get LoRA adapters: give them as 'q_proj,v_proj' "
            "or 'all-linear'"
        )
    if power_limit_w is not None and (
        isinstance(power_limit_w, bool) or not isinstance(power_limit_w, int | float) or not power_limit_w > 0
    ):
        raise InvalidInputError(f"power_limit_w={power_limit_w!r} must be a positive number of watts")


def bytes_per_parameter(precision: str, optimizer: str) -> float:
    """Weights + gradients + optimizer state + copies per trainable parameter (the documented table's sum)."""
    p = PRECISIONS[precision]
    w = DTYPE_BYTES[p.weight_dtype]
    states, value_bytes = OPTIMIZERS[optimizer]
    state = 0.0 if optimizer == "adafactor" else states * (value_bytes + 4 / EIGHT_BIT_BLOCK if value_bytes else w)
    return 2 * w + state + (DTYPE_BYTES[p.compute_dtype] if p.autocast_copies else 0)


@dataclass(frozen=True)
class RunDtype:
    """The dtype a model is traced in, the training precision, and where the dtype came from (for the report)."""

    dtype: str
    precision: str | None
    source: str


def default_training_precision(device: Any = None) -> str:
    """What most users train with on ``device``: AMP in bf16 on a GPU that has it, in fp16 on one that does not
    (V100, T4), float32 on a CPU."""
    if device is None:
        return DEFAULT_TRAINING_PRECISION
    if device.kind != "gpu":
        return "fp32"
    return DEFAULT_TRAINING_PRECISION if device.supports_dtype("bfloat16") else "amp-fp16"


def resolve_run_dtype(
    declared: str | None, dtype: str | None, precision: str | None, training: bool, device: Any = None
) -> RunDtype:
    """Choose the run dtype and precision from what the user said and what the model's config declares.

    Inference: ``dtype``, else the config's ``torch_dtype``, else float32. Training: ``precision`` (its compute
    dtype), else the precision a ``dtype`` implies (half precision means AMP), else what most users run on the
    device (``default_training_precision``: ``amp-bf16`` on a recent GPU). A ``dtype`` that contradicts
    ``precision`` is refused."""
    from perfpredict.core.errors import InvalidInputError

    if precision is not None:
        if precision not in PRECISIONS:
            raise InvalidInputError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        if not training:
            raise InvalidInputError(
                "a precision recipe applies to a training step: add --training, or give --dtype alone for inference"
            )
        compute = PRECISIONS[precision].compute_dtype
        if dtype is not None and dtype != compute:
            raise InvalidInputError(
                f"--dtype {dtype} contradicts --precision {precision}, which computes in {compute}; give one of them"
            )
        return RunDtype(compute, precision, f"{compute} (from --precision {precision})")
    if training:
        default = default_training_precision(device)
        chosen = PRECISION_FOR_DTYPE.get(dtype, default) if dtype else default
        compute = PRECISIONS[chosen].compute_dtype
        where = f" on {device.name}" if device is not None else ""
        why = "from --dtype" if dtype else f"the default training precision{where}, {chosen}"
        return RunDtype(compute, chosen, f"{compute} ({why})")
    if dtype is not None:
        return RunDtype(dtype, None, f"{dtype} (from --dtype)")
    if declared is not None:
        return RunDtype(declared, None, f"{declared} (the config's torch_dtype; --dtype overrides)")
    return RunDtype("float32", None, "float32 (the config declares no torch_dtype; --dtype overrides)")
