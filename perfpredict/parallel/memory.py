"""Memory per rank: the rank's weights, gradients, optimizer state and its temporaries, sharded as ZeRO and FSDP
shard them, plus its activations, the layers FSDP gathers, communication buffers and the runtime.

**Bytes per parameter** (:func:`per_param`) follow what each framework holds for the precision recipe
(``perfpredict.hardware.precision``):

- DDP, and one GPU: the recipe as it is. ``amp-bf16`` (``torch.autocast``): float32 weights and gradients, AdamW's
  two float32 states (4 + 4 + 8), and the bf16 copies autocast caches for the step (2).
- DeepSpeed ZeRO 1-3: DeepSpeed runs half precision with float32 master weights inside the optimizer, the ZeRO
  paper's count (Rajbhandari et al., SC'20): 2 + 2 + 12 (master weights 4, Adam's two states 8), no autocast copy.
  ``amp-*`` under ZeRO is that recipe (DeepSpeed's ``bf16``/``fp16`` mode); ``master-*`` names it everywhere.
- FSDP (``fully_shard`` with torchtitan's ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32)`` under
  ``amp-*``): float32 sharded weights (the master copy), float32 sharded gradients, AdamW's float32 states: 16 per
  parameter, all sharded; a layer is gathered in the compute dtype (no autocast cache), its gradients computed in
  it and cast to float32 for the reduce-scatter.

**Sharding** over the plan's shard group (``ParallelPlan.shard_ranks``: dp, or HYBRID_SHARD's group of N): stage
1 shards the optimizer state (with the master weights it holds) and the optimizer's temporaries, stage 2 the
gradients too, stage 3 (FSDP FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, ZeRO-3) the weights too, frozen ones
included. FSDP adds the gathered layers: FULL_SHARD and HYBRID_SHARD hold the layer computing and the one
prefetched (and the root, gathered once per step), SHARD_GRAD_OP every layer from its forward to its backward;
each holds one layer's unsharded gradients before its reduce-scatter. DDP adds its gradient buckets.

**The optimizer's temporaries** (torch's foreach AdamW: one float32 tensor per parameter, ``_foreach_sqrt``) are
as sharded as the state they are computed from; DeepSpeed's FusedAdam and ``optimizer_impl="fused"`` have none.

**Activations**: the rank graph's liveness walk (``memory_model``), with the gradients born in the backward where
the rank holds whole gradients (DDP, ZeRO-1) and left out where it reduce-scatters each layer's as they come (ZeRO-2,
ZeRO-3, FSDP); the peak is the backward's (activations and the gathered layers) or the optimizer step's (its
temporaries and the outputs kept to the end), whichever is larger. Under 1F1B, the saved activations of the other
microbatches a stage holds (``pipeline_stage_activations``: stage s holds min(p - s, m) microbatches' saved
activations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.ops import DTYPE_BYTES
from perfpredict.hardware.precision import OPTIMIZERS, PRECISIONS, training_bytes

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.parallel.plan import ParallelPlan

#: recipes with float32 master weights kept by the optimizer: name -> (compute dtype, the equivalent
#: perfpredict.hardware.precision recipe for the compute-time prediction)
MASTER_RECIPES = {"master-bf16": ("bfloat16", "amp-bf16"), "master-fp16": ("float16", "amp-fp16")}
MASTER_WEIGHT_BYTES = 4
FLOAT8_BYTES = 1
REDUCE_BYTES = 4  # FSDP's reduce_dtype under a mixed-precision recipe (torchtitan: float32)


@dataclass(frozen=True)
class PerParam:
    """Bytes per trainable parameter held through a step, and what a collective moves per parameter.

    ``gathered`` is the all-gather dtype's size (FSDP and ZeRO-3 gather the weights in it, ZeRO 1/2 gather the
    updated weights in it after the step): the compute dtype under a mixed-precision recipe, 1 with float8
    all-gather. ``gradients`` is also what a gradient reduction moves per parameter."""

    weights: float
    gradients: float
    optimizer_state: float  # the optimizer's state, with the float32 master weights where the optimizer keeps them
    weight_copies: float  # autocast's half-precision copies (amp-* recipes under DDP)
    gathered: float  # an all-gathered weight
    temporaries: float = 0.0  # the optimizer step's scratch (foreach AdamW: a float32 copy)
    frozen: float = 0.0  # a frozen weight (no gradient, no state)
    unsharded_gradient: float = 0.0  # a gathered layer's gradient before its reduce-scatter (FSDP)


def precision_names() -> list[str]:
    return [*PRECISIONS, *MASTER_RECIPES]


def compute_precision(precision: str | None) -> str | None:
    """The perfpredict.hardware.precision recipe that computes like ``precision`` (for the single-GPU predictors)."""
    return MASTER_RECIPES[precision][1] if precision in MASTER_RECIPES else precision


def per_param(
    graph: OpGraph | None,
    precision: str | None,
    optimizer: str,
    plan: ParallelPlan | None = None,
    run: Any = None,
) -> PerParam:
    """Bytes per trainable parameter of ``graph`` under ``precision`` (None: the graph's dtype throughout), as the
    plan's strategy holds them (see the module docstring). ``run``: the Request, for its optimizer
    implementation, ZeRO-Offload and float8 options."""
    if precision is not None and precision not in PRECISIONS and precision not in MASTER_RECIPES:
        raise InvalidInputError(f"precision {precision!r} is not one of {', '.join(precision_names())}")
    stage = plan.shard_stage if plan is not None and plan.dp > 1 else 0
    fsdp = plan is not None and plan.fsdp and plan.dp > 1
    mixed = precision in MASTER_RECIPES or (precision is not None and PRECISIONS[precision].autocast_copies)
    if precision in MASTER_RECIPES or (mixed and stage and not fsdp) or (mixed and _offload(run)):
        each = _master(precision, optimizer)
    else:
        each = _recipe(graph, precision, optimizer)
        if mixed and fsdp:  # MixedPrecisionPolicy: gathered and computed in bf16, reduced in float32, no autocast
            half = DTYPE_BYTES[PRECISIONS[precision].compute_dtype]
            each = _with(each, weight_copies=0.0, gathered=half, unsharded_gradient=half + REDUCE_BYTES)
    if _offload(run):  # ZeRO-Offload: the master weights, the state and the step are the host's
        each = _with(each, optimizer_state=0.0, temporaries=0.0)
    if plan is not None and plan.float8_all_gather:
        each = _with(each, gathered=FLOAT8_BYTES)
    updated = MASTER_WEIGHT_BYTES if mixed else each.weights  # the values the optimizer updates
    return _with(each, temporaries=_temporaries(optimizer, updated, stage, fsdp, run))


def check_options(plan: ParallelPlan, run: Any) -> None:
    """The training-memory options a plan cannot take, refused in one line with the fix."""
    if plan.float8_all_gather and getattr(run, "float8", "none") != "tensorwise":
        raise InvalidInputError(
            "float8_all_gather gathers torchao's tensorwise float8 weights: add float8='tensorwise' (--float8 tensorwise)"
        )
    if _offload(run) and plan.dp > 1 and (plan.fsdp or not plan.zero_stage):
        raise InvalidInputError(
            "offload_optimizer is ZeRO-Offload (DeepSpeed): give it zero_stage 1, 2 or 3 (--zero-stage 2) instead of "
            + ("FSDP, whose CPU offload moves the parameters too" if plan.fsdp else "DDP")
        )


def describe(plan: ParallelPlan, each: PerParam, precision: str | None) -> str:
    """The assumption line of the memory per rank: bytes per parameter as the strategy holds them, and what it
    shards over how many ranks."""
    stage = plan.shard_stage if plan.dp > 1 else 0
    n = plan.shard_ranks
    who = (
        f"FSDP {plan.fsdp_strategy.upper()}"
        if plan.fsdp and plan.dp > 1
        else (f"DeepSpeed ZeRO-{stage}" if stage else ("DDP" if plan.dp > 1 else "one replica"))
    )
    terms = [
        ("weights", each.weights, stage >= 3),
        ("gradients", each.gradients, stage >= 2),
        ("optimizer state", each.optimizer_state, stage >= 1),
        ("optimizer temporaries", each.temporaries, stage >= 1),
        ("autocast copies", each.weight_copies, False),
    ]
    held = ", ".join(f"{name} {b:g}{f' / {n}' if sharded and n > 1 else ''}" for name, b, sharded in terms if b)
    gathered = (
        f"; gathered layers in {each.gathered:g} bytes per parameter, one layer's gradients before the reduce-scatter "
        f"in {each.unsharded_gradient:g}"
        if stage >= 3
        else ""
    )
    return f"{who} under {precision or 'the graph dtype'}: bytes per trainable parameter: {held}{gathered}"


def _offload(run: Any) -> bool:
    return bool(getattr(run, "offload_optimizer", False))


def _master(precision: str | None, optimizer: str) -> PerParam:
    """DeepSpeed's and Megatron's half-precision weights and gradients, float32 master weights in the optimizer."""
    compute = MASTER_RECIPES[precision][0] if precision in MASTER_RECIPES else PRECISIONS[precision].compute_dtype
    half = DTYPE_BYTES[compute]
    states, value_bytes = OPTIMIZERS[optimizer]
    state = states * (value_bytes or MASTER_WEIGHT_BYTES) + MASTER_WEIGHT_BYTES
    return PerParam(half, half, state, 0.0, half, frozen=half, unsharded_gradient=half)


def _recipe(graph: OpGraph, precision: str | None, optimizer: str) -> PerParam:
    """The recipe as one GPU holds it (perfpredict.hardware.precision), per parameter of ``graph``."""
    count = max(graph.trainable_param_count, 1)
    held = training_bytes(graph, "training", optimizer, precision)
    if precision is None:  # the graph's own dtype throughout
        weights = graph.trainable_param_bytes / count
        frozen = (graph.param_bytes - graph.trainable_param_bytes) / max(graph.param_count - count, 1)
    else:
        weights = DTYPE_BYTES[PRECISIONS[precision].weight_dtype]
        frozen = DTYPE_BYTES[PRECISIONS[precision].compute_dtype]
    gradients = held.gradients / count
    return PerParam(
        weights,
        gradients,
        held.optimizer_state / count,
        held.weight_copies / count,
        weights,
        frozen=frozen,
        unsharded_gradient=gradients,
    )


def _temporaries(optimizer: str, updated_bytes: float, stage: int, fsdp: bool, run: Any) -> float:
    """The optimizer step's scratch per parameter: torch's foreach AdamW makes one copy of the values it updates
    (``updated_bytes``: the float32 master weights where there are some); fused kernels and DeepSpeed's FusedAdam
    (ZeRO's default optimizer) make none, a for-loop step one parameter's at a time (left out here)."""
    from perfpredict.predictors.base import OPTIMIZER_SCRATCH

    impl = getattr(run, "optimizer_impl", None) or ("fused" if stage and not fsdp else "foreach")
    if impl != "foreach" or _offload(run):
        return 0.0
    return OPTIMIZER_SCRATCH[optimizer] * updated_bytes


def _with(each: PerParam, **changes: float) -> PerParam:
    from dataclasses import replace

    return replace(each, **changes)


@dataclass(frozen=True)
class ShardedState:
    weights_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    temporaries_bytes: int = 0
    frozen_bytes: int = 0


def sharded_state(params: int, each: PerParam, stage: int, ranks: int, frozen: int = 0) -> ShardedState:
    """Weights, gradients, optimizer state and its temporaries of ``params`` trainable (and ``frozen``) parameters
    under ZeRO ``stage`` over ``ranks``."""

    def part(count: int, bytes_per_param: float, sharded: bool) -> int:
        return round(count * bytes_per_param / (ranks if sharded else 1))

    return ShardedState(
        part(params, each.weights, stage >= 3),
        part(params, each.gradients, stage >= 2),
        part(params, each.optimizer_state, stage >= 1),
        part(params, each.temporaries, stage >= 1),
        part(frozen, each.frozen, stage >= 3),
    )


def zero_bytes_per_param(stage: int, ranks: int, each: PerParam) -> float:
    """Bytes per parameter on one rank under ZeRO ``stage``: 16 (stage 0), 4 + 12/N (1), 2 + 14/N (2), 16/N (3)
    for the ZeRO paper's recipe (``master-*`` with Adam)."""
    state = sharded_state(1_000_000, each, stage, ranks)
    return (state.weights_bytes + state.gradients_bytes + state.optimizer_state_bytes) / 1_000_000


def gathered_bytes(
    per_label: dict[int, int], each: PerParam, whole_step: bool, prefetch: int = 1, gather_bytes: float | None = None
) -> int:
    """FSDP's unsharded parameters at the backward peak, from the parameters per layer label (``PRE``/``POST``, the
    root, are negative): the layer computing, the ``prefetch`` layers gathered ahead (FSDP2's default: one) and the
    root (``whole_step``: SHARD_GRAD_OP, every layer, kept from its forward to its backward), each in
    ``gather_bytes`` per parameter (a MixedPrecisionPolicy's param dtype; None: ``each.gathered``), plus one layer's
    gradients before their reduce-scatter."""
    largest = max((v for k, v in per_label.items() if k >= 0), default=0)
    root = sum(v for k, v in per_label.items() if k < 0)
    held = sum(per_label.values()) if whole_step else (1 + prefetch) * largest + root
    size = each.gathered if gather_bytes is None else gather_bytes
    return round(held * size + largest * each.unsharded_gradient)


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
