"""The contract between a predictor and the report: RunConfig in, PredictorOutput out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from perfpredict.errors import InvalidInputError
from perfpredict.report import MemoryBreakdown, OpContribution, Prediction

if TYPE_CHECKING:
    from perfpredict.devices import Device
    from perfpredict.graph import OpGraph

# Optimizer states per trainable parameter, each the parameter's size (torch keeps them in the param's dtype).
OPTIMIZER_STATES = {"adamw": 2, "adam": 2, "sgd": 0, "sgd_momentum": 1, "rmsprop": 1, "adagrad": 1, "none": 0}


@dataclass(frozen=True)
class RunConfig:
    """How the model runs: phase, the optimizer of a training step, and whether fp32 matmuls may use TF32."""

    phase: str = "inference"
    optimizer: str = "adamw"
    tf32: bool = False
    top_ops: int = 25

    def __post_init__(self) -> None:
        if self.phase not in ("inference", "training"):
            raise InvalidInputError(f"phase {self.phase!r} is not one of 'inference', 'training'")
        if self.optimizer not in OPTIMIZER_STATES:
            raise InvalidInputError(
                f"optimizer {self.optimizer!r} is not known; choose one of {', '.join(OPTIMIZER_STATES)}")

    @property
    def optimizer_states(self) -> int:
        return OPTIMIZER_STATES[self.optimizer] if self.phase == "training" else 0


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


class Predictor(Protocol):
    name: str
    version: str

    def predict(self, graph: OpGraph, device: Device, config: RunConfig) -> PredictorOutput: ...
