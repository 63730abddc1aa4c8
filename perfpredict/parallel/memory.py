"""Memory per rank: the rank's weights, gradients and optimizer state, sharded as ZeRO and FSDP shard them, plus
its activations, communication buffers and the runtime.

Bytes per parameter come from the precision recipe (``perfpredict.hardware.precision``: ``amp-bf16`` keeps float32 weights
and gradients, AdamW two float32 states) or from a ``master-*`` recipe, the one the ZeRO paper and Megatron-LM
count: half-precision weights and gradients, with the float32 master weights inside the optimizer state
(2 + 2 + 12 = 16 bytes per parameter with Adam). Over a data-parallel group of N ranks, ZeRO stage 1 divides the
optimizer state by N, stage 2 the gradients too, stage 3 (and FSDP) the weights too (Rajbhandari et al., SC'20).

Activations: the rank graph's own peak (its shapes are already the tensor-parallel shard's), plus, under 1F1B,
the saved activations of the other microbatches a stage holds (``pipeline_stage_activations``: stage s holds
min(p - s, m) microbatches' saved activations). FSDP adds the gathered weights of the layer
computing and of the one prefetched, and one layer's unsharded gradients before their reduce-scatter. DDP adds
its gradient buckets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.ops import DTYPE_BYTES
from perfpredict.hardware.precision import OPTIMIZERS, PRECISIONS, training_bytes

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph

#: recipes with float32 master weights kept by the optimizer: name -> (compute dtype, the equivalent
#: perfpredict.hardware.precision recipe for the compute-time prediction)
MASTER_RECIPES = {"master-bf16": ("bfloat16", "amp-bf16"), "master-fp16": ("float16", "amp-fp16")}
MASTER_WEIGHT_BYTES = 4


@dataclass(frozen=True)
class PerParam:
    """Bytes per trainable parameter held through a step, and what a collective moves per parameter."""

    weights: float
    gradients: float
    optimizer_state: float
    weight_copies: float  # autocast's half-precision copies (amp-* recipes)
    gathered: float  # an all-gathered weight (FSDP2 without a mixed-precision policy: the stored dtype)


def precision_names() -> list[str]:
    return [*PRECISIONS, *MASTER_RECIPES]


def compute_precision(precision: str | None) -> str | None:
    """The perfpredict.hardware.precision recipe that computes like ``precision`` (for the single-GPU predictors)."""
    return MASTER_RECIPES[precision][1] if precision in MASTER_RECIPES else precision


def per_param(graph: OpGraph, precision: str | None, optimizer: str) -> PerParam:
    """Bytes per trainable parameter of ``graph`` under ``precision`` (None: the graph's dtype throughout)."""
    if precision is not None and precision not in PRECISIONS and precision not in MASTER_RECIPES:
        raise InvalidInputError(f"precision {precision!r} is not one of {', '.join(precision_names())}")
    if precision in MASTER_RECIPES:
        half = DTYPE_BYTES[MASTER_RECIPES[precision][0]]
        states, value_bytes = OPTIMIZERS[optimizer]
        state = states * (value_bytes or MASTER_WEIGHT_BYTES) + MASTER_WEIGHT_BYTES
        return PerParam(half, half, state, 0.0, half)
    count = max(graph.trainable_param_count, 1)
    held = training_bytes(graph, "training", optimizer, precision)
    return PerParam(
        held.params / max(graph.param_count, 1),
        held.gradients / count,
        held.optimizer_state / count,
        held.weight_copies / count,
        held.params / max(graph.param_count, 1),
    )


@dataclass(frozen=True)
class ShardedState:
    weights_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int


def sharded_state(params: int, each: PerParam, stage: int, ranks: int) -> ShardedState:
    """Weights, gradients and optimizer state of ``params`` parameters under ZeRO ``stage`` over ``ranks``."""

    def part(bytes_per_param: float, sharded: bool) -> int:
        return round(params * bytes_per_param / (ranks if sharded else 1))

    return ShardedState(
        part(each.weights, stage >= 3), part(each.gradients, stage >= 2), part(each.optimizer_state, stage >= 1)
    )


def zero_bytes_per_param(stage: int, ranks: int, each: PerParam) -> float:
    """Bytes per parameter on one rank under ZeRO ``stage``: 16 (stage 0), 4 + 12/N (1), 2 + 14/N (2), 16/N (3)
    for the ZeRO paper's recipe (``master-*`` with Adam)."""
    state = sharded_state(1_000_000, each, stage, ranks)
    return (state.weights_bytes + state.gradients_bytes + state.optimizer_state_bytes) / 1_000_000


def saved_activation_bytes(graph: OpGraph, start: int) -> int:
    """Bytes the forward saves for the backward: tensors made in the forward that a backward op reads.

    A view with no producer in the graph (``weight.t()``, a view of the input) allocates nothing: its storage is a
    parameter's, counted with the weights, or the input's. Counted as saved, the weights' transposes made a 7B
    model's pipeline stage hold 6.3 GiB of "activations" per microbatch whatever its sequence length."""
    from perfpredict.predictors.memory_model import storage_roots

    root = storage_roots(graph)
    produced = {b for _, b in graph.edges}
    saved = {root[a] for a, b in graph.edges if a < start <= b}
    return sum(
        graph.nodes[a].output_bytes for a in saved if a < start and not (graph.nodes[a].is_view and a not in produced)
    )


@dataclass(frozen=True)
class StageActivations:
    """One pipeline stage's activation terms at its peak (bytes), which sum to what it adds to the training state."""

    activations: int  # saved for backward, over the in-flight microbatches, and one microbatch's working set
    workspace: int
    optimizer_temporaries: int
    peak_at: str  # "backward" or "optimizer step"


def pipeline_stage_activations(
    saved_bytes: int, in_flight: float, own_activations: int, own_workspace: int, own_temporaries: int
) -> StageActivations:
    """A 1F1B stage's activation terms: at its backward peak it holds the saved activations of ``in_flight``
    microbatches (``saved_bytes`` each), plus what one microbatch's own step holds beyond its saved ones
    (``own_activations - saved_bytes``) and the workspace; at the optimizer step, after every microbatch, it holds
    none of them but the optimizer's temporaries. The larger of the two is the peak.

    The gradients of every microbatch accumulate in one buffer that lives from the first backward to the optimizer
    step, so they are resident at the backward peak (the gradient term), unlike one step's gradients born in its
    backward (``memory_model.backward_born_peak``)."""
    backward = round(in_flight * saved_bytes) + max(0, own_activations - saved_bytes)
    if own_temporaries > backward + own_workspace:
        return StageActivations(0, 0, own_temporaries, "optimizer step")
    return StageActivations(backward, own_workspace, 0, "backward")
