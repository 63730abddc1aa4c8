"""The contract between a predictor and the report: RunConfig in, PredictorOutput out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.op_kinds import uses_tensor_cores
from perfpredict.core.ops import FLOAT_DTYPES
from perfpredict.core.report import BlockShare, MemoryBreakdown, OpContribution, Prediction, TimelineSummary, TimeShare
from perfpredict.hardware.precision import OPTIMIZERS, PRECISIONS

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.hardware.devices import Device

# Optimizer states per trainable parameter (their bytes: perfpredict.hardware.precision).
OPTIMIZER_STATES = {name: states for name, (states, _) in OPTIMIZERS.items()}
# Scratch of one step of torch's multi-tensor (foreach) optimizer, the CUDA default, in trainable-parameter sizes:
# Adam/AdamW take sqrt(exp_avg_sq) into a new tensor list, RMSprop and Adagrad the sqrt of their running sum; SGD
# updates its momentum in place. Held alongside every gradient at the end of the step (memory_model).
# Adafactor builds its update in a new tensor; bitsandbytes' 8-bit AdamW is one fused kernel per tensor.
OPTIMIZER_SCRATCH = {
    "adamw": 1,
    "adam": 1,
    "sgd": 0,
    "sgd_momentum": 0,
    "rmsprop": 1,
    "adagrad": 1,
    "adafactor": 1,
    "adamw-8bit": 0,
    "none": 0,
}
# The collector builds every model in float32 and then casts it (profiling/zoo.py, ModelSpec.build): the learned
# predictors are trained on peaks that include that load, so they always see it in their features.
MEASURED_BUILD_DTYPE = "float32"
#: how the step runs: eager PyTorch, a CUDA-graph replay, torch.compile (inductor), or both ("reduce-overhead")
RUN_MODES = ("eager", "cuda_graph", "compiled", "compiled_cuda_graph")
#: the one default every door uses (Python API, torch.compile backend, TVM Relax pass, ONNX, CLI, web page), so that
#: the same model gets the same answer whichever way it came in: the two-timeline model, in eager mode
DEFAULT_PREDICTOR = "auto"
DEFAULT_MODE = "eager"


@dataclass(frozen=True)
class RunConfig:
    """How the model runs: phase, the optimizer of a training step, whether fp32 matmuls may use TF32, and the
    dtype the weights were built in before their cast to the run dtype.

    ``weights_built_in="float32"`` is ``Model(config).to(torch.bfloat16)``: every weight exists in float32 before
    the cast, so a half-precision model peaks at its float32 size while it loads. The collector builds models this
    way, so every measured peak includes it. ``None`` is a model loaded straight in its run dtype
    (``from_pretrained(..., torch_dtype=torch.bfloat16)``).
    """

    phase: str = "inference"
    optimizer: str = "adamw"
    tf32: bool = False
    top_ops: int = 25
    weights_built_in: str | None = MEASURED_BUILD_DTYPE
    mode: str = "eager"  # eager, cuda_graph, compiled, compiled_cuda_graph (the two-timeline predictor reads it)
    precision: str | None = (
        None  # a training recipe of perfpredict.hardware.precision; None: the graph's dtype throughout
    )
    conv_tf32: bool = True  # cuDNN may run float32 convolutions as TF32: PyTorch's default (matmuls: ``tf32``)
    # the host that drives the device (predictors.host_model.HOSTS, or "calibrated"); None: this machine's calibrated
    # profile where there is one, else the default for the device's kind (a GPU server for a GPU)
    host: str | None = None
    # training memory (hardware/precision.py): the optimizer's implementation (None: foreach, torch's default on
    # CUDA), ZeRO-Offload's state and step on the host, float8 linears, QLoRA's NF4 base
    optimizer_impl: str | None = None
    offload_optimizer: bool = False
    float8: str = "none"
    qlora: bool = False

    def __post_init__(self) -> None:
        if self.host is not None:
            from perfpredict.predictors.host_model import host_names

            if self.host not in host_names():
                raise InvalidInputError(
                    f"unknown host {self.host!r}; choose one of {', '.join(host_names())} "
                    "(`perfpredict calibrate-host` measures this machine's)"
                )
        if self.mode not in RUN_MODES:
            raise InvalidInputError(f"mode {self.mode!r} is not one of {', '.join(RUN_MODES)}")
        if self.phase not in ("inference", "training"):
            raise InvalidInputError(f"phase {self.phase!r} is not one of 'inference', 'training'")
        if self.optimizer not in OPTIMIZER_STATES:
            raise InvalidInputError(
                f"optimizer {self.optimizer!r} is not known; choose one of {', '.join(OPTIMIZER_STATES)}"
            )
        if self.precision is not None and self.precision not in PRECISIONS:
            raise InvalidInputError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.weights_built_in is not None and self.weights_built_in not in FLOAT_DTYPES:
            raise InvalidInputError(
                f"weights_built_in {self.weights_built_in!r} is not a floating dtype; choose one "
                f"of {', '.join(FLOAT_DTYPES)}, or None for weights loaded in the run dtype"
            )

    @property
    def optimizer_states(self) -> int:
        return OPTIMIZER_STATES[self.optimizer] if self.phase == "training" else 0

    @property
    def optimizer_scratch(self) -> int:
        return OPTIMIZER_SCRATCH[self.optimizer] if self.phase == "training" else 0

    def tensor_cores(self, kind: str, dtype: str, gpu: bool) -> bool:
        """Whether an op of ``kind`` in ``dtype`` runs on tensor cores: half precision always; float32 as TF32
        where PyTorch allows it (convolutions by default, matmuls with ``tf32=True``): the report's policy, which
        the roofline plot follows (:func:`perfpredict.core.op_kinds.uses_tensor_cores`)."""
        return uses_tensor_cores(kind, dtype, gpu, tf32=self.tf32, conv_tf32=self.conv_tf32)


@dataclass(frozen=True)
class PredictorOutput:
    """What one predictor says about one graph on one device."""

    latency_ms: Prediction
    peak_memory_bytes: Prediction
    memory: MemoryBreakdown
    energy_j: Prediction
    avg_power_w: Prediction
    per_op: tuple[OpContribution, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    timeline: TimelineSummary | None = None  # device, host and wall time (the two-timeline predictor)
    by_kind: tuple[TimeShare, ...] = ()  # totals over every op, not only the listed ones (perfpredict.core.breakdown)
    blocks: tuple[BlockShare, ...] = ()
    # what the latency holds beyond the summed per-op time ("" where the per-op rows are the latency's own terms)
    outside_ops_label: str = ""
    # the time of the ops activation checkpointing recomputes in the backward (compiler_hooks/recompute.py)
    recompute_ms: float = 0.0


class Predictor(Protocol):
    name: str
    version: str

    def predict(self, graph: OpGraph, device: Device, config: RunConfig) -> PredictorOutput: ...
