"""A parallel plan: how one training or inference step is spread over GPUs.

``world_size = dp * tp * pp``. Ranks are laid out as Megatron-LM lays them out by default: tensor-parallel ranks
are neighbours (inside one node where they fit), then data-parallel replicas, then pipeline stages, so rank
``r = tp_rank + tp * (dp_rank + dp * pp_rank)``. ``graph.batch_size`` is the micro-batch one rank runs in one
forward and backward; the global batch is ``micro-batch * microbatches * dp``.

- ``fsdp=True`` shards parameters, gradients and optimizer state over the ``dp`` group as FSDP2's ``fully_shard``
  does by default (ZeRO stage 3); ``zero_stage`` 1 or 2 shards less, as DeepSpeed's stages do. ``fsdp_strategy``
  is FSDP's ``ShardingStrategy``: ``full_shard`` (the default), ``shard_grad_op`` (parameters kept gathered from
  the forward to the backward: FSDP2's ``reshard_after_forward=False``) or ``hybrid_shard`` (sharded within groups
  of ``shard_group`` ranks, replicated across them); ``float8_all_gather`` gathers float8 weights (torchao's
  ``enable_fsdp_float8_all_gather``, with ``float8="tensorwise"``).
- ``sp=True`` is Megatron's sequence parallelism: needs ``tp > 1``.
- ``microbatches`` feed the pipeline (1F1B) and, without a pipeline, accumulate gradients.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.parallel.data_parallel import DEFAULT_BUCKET_MB

GPUS_PER_NODE = 8  # a DGX/HGX node
FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD = "full_shard", "shard_grad_op", "hybrid_shard"
FSDP_STRATEGIES = (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD)


@dataclass(frozen=True)
class ParallelPlan:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    fsdp: bool = False
    sp: bool = False
    microbatches: int = 1
    zero_stage: int = 0  # 0: DDP replicas; 1, 2, 3: DeepSpeed ZeRO; fsdp=True means 3, FSDP2-style
    gpus_per_node: int = GPUS_PER_NODE
    bucket_mb: float = DEFAULT_BUCKET_MB  # DDP's bucket_cap_mb (MiB); at 25 the first bucket is capped at 1 MiB
    # --- sharding as FSDP names it (memory side: parallel/memory.py) ---
    fsdp_strategy: str = FULL_SHARD  # FSDP's ShardingStrategy: full_shard, shard_grad_op or hybrid_shard
    shard_group: int | None = None  # hybrid_shard: ranks that shard (None: the dp ranks of one node)
    float8_all_gather: bool = False  # FSDP gathers float8 weights (torchao, float8="tensorwise")
    # --- end of the sharding keys ---

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def shard_stage(self) -> int:
        """What is sharded over the dp group: 0 nothing, 1 optimizer state, 2 + gradients, 3 + parameters."""
        return 3 if self.fsdp else self.zero_stage

    @property
    def shard_ranks(self) -> int:
        """The ranks each sharded tensor is split over: the dp group, or HYBRID_SHARD's shard group."""
        if not self.shard_stage or self.dp == 1:
            return 1
        if self.fsdp and self.fsdp_strategy == HYBRID_SHARD:
            return self.shard_group or max(1, min(self.dp, self.gpus_per_node // self.tp))
        return self.dp

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.gpus_per_node)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """A short label such as ``dp=2 tp=4 pp=2 (16 GPUs, 2 nodes)``."""
        parts = [f"{k}={getattr(self, k)}" for k in ("dp", "tp", "pp") if getattr(self, k) > 1] or ["1 GPU"]
        parts += [flag for flag in ("fsdp", "sp") if getattr(self, flag)]
        if self.fsdp and self.fsdp_strategy != FULL_SHARD:
            group = f" (shard group {self.shard_ranks})" if self.fsdp_strategy == HYBRID_SHARD else ""
            parts.append(f"{self.fsdp_strategy}{group}")
        if self.float8_all_gather:
            parts.append("float8 all-gather")
        if self.zero_stage and not self.fsdp:
            parts.append(f"zero{self.zero_stage}")
        if self.microbatches > 1:
            parts.append(f"microbatches={self.microbatches}")
        return " ".join(parts) + f" ({self.world_size} GPUs, {self.nodes} node{'s' if self.nodes > 1 else ''})"


_INT_KEYS = ("dp", "tp", "pp", "microbatches", "gpus_per_node", "shard_group")
_ALIASES = {
    "data": "dp",
    "tensor": "tp",
    "pipeline": "pp",
    "micro_batches": "microbatches",
    "zero": "zero_stage",
    "sequence_parallel": "sp",
}


def parse_plan(options: ParallelPlan | Mapping[str, Any] | None) -> ParallelPlan:
    """A validated plan from ``{"dp": 2, "tp": 4, ...}`` (or a plan, or None for one GPU). Unknown keys and values
    that make no sense raise InvalidInputError saying what to pass instead."""
    if options is None:
        return ParallelPlan()
    if isinstance(options, ParallelPlan):
        values = options.to_dict()
    elif isinstance(options, Mapping):
        values = {_ALIASES.get(k, k): v for k, v in options.items()}
    else:
        raise InvalidInputError(f"parallel={options!r} is not a dict; pass e.g. parallel={{'dp': 2, 'tp': 4}}")
    fields = [f.name for f in dataclasses.fields(ParallelPlan)]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise InvalidInputError(
            f"unknown parallel option(s) {', '.join(map(repr, unknown))}; valid options are {', '.join(fields)}"
        )
    for key in _INT_KEYS:
        if key in values and not (key == "shard_group" and values[key] is None):
            values[key] = _positive_int(values[key], key)
    for key in ("fsdp", "sp", "float8_all_gather"):
        if key in values and not isinstance(values[key], bool):
            raise InvalidInputError(f"parallel option {key}={values[key]!r} must be True or False")
    if "zero_stage" in values and (isinstance(values["zero_stage"], bool) or not isinstance(values["zero_stage"], int)):
        raise InvalidInputError(f"zero_stage={values['zero_stage']!r} must be 0, 1, 2 or 3 (DeepSpeed ZeRO stages)")
    bucket = values.get("bucket_mb", DEFAULT_BUCKET_MB)
    if isinstance(bucket, bool) or not isinstance(bucket, int | float) or not 0 < bucket < math.inf:
        raise InvalidInputError(f"bucket_mb={bucket!r} must be a positive number of MiB (torch DDP's default is 25)")
    plan = ParallelPlan(**values)
    _check_combination(plan)
    return plan


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        hint = " (1 means not split)" if key in ("dp", "tp", "pp") else ""
        raise InvalidInputError(f"parallel option {key}={value!r} must be a positive integer{hint}")
    return value


def _check_combination(plan: ParallelPlan) -> None:
    if plan.zero_stage not in (0, 1, 2, 3):
        raise InvalidInputError(f"zero_stage={plan.zero_stage!r} must be 0, 1, 2 or 3 (DeepSpeed ZeRO stages)")
    if plan.fsdp and plan.zero_stage not in (0, 3):
        raise InvalidInputError(
            f"fsdp=True shards everything (ZeRO stage 3); drop zero_stage={plan.zero_stage} or drop fsdp"
        )
    _check_sharding(plan)
    if plan.sp and plan.tp == 1:
        raise InvalidInputError(
            "sp=True (sequence parallelism) splits the sequence over the tensor-parallel "
            "group; it needs tp > 1, e.g. parallel={'tp': 2, 'sp': True}"
        )


def _check_sharding(plan: ParallelPlan) -> None:
    """The FSDP strategy keys: each needs FSDP, and a shard group must split the dp ranks evenly."""
    if plan.fsdp_strategy not in FSDP_STRATEGIES:
        raise InvalidInputError(
            f"fsdp_strategy={plan.fsdp_strategy!r} is not one of {', '.join(FSDP_STRATEGIES)} (FSDP's ShardingStrategy)"
        )
    needs_fsdp = [f"fsdp_strategy={plan.fsdp_strategy!r}"] if plan.fsdp_strategy != FULL_SHARD else []
    needs_fsdp += ["float8_all_gather=True"] if plan.float8_all_gather else []
    if needs_fsdp and not plan.fsdp:
        raise InvalidInputError(f"{' and '.join(needs_fsdp)} is an FSDP option: add fsdp=True (--fsdp)")
    if plan.shard_group is not None and plan.fsdp_strategy != HYBRID_SHARD:
        raise InvalidInputError(
            f"shard_group={plan.shard_group} sizes HYBRID_SHARD's groups: add fsdp_strategy='hybrid_shard' or drop it"
        )
    if plan.fsdp_strategy == HYBRID_SHARD and plan.dp % plan.shard_ranks:
        raise InvalidInputError(
            f"hybrid_shard over dp={plan.dp} needs a shard group that divides it, not {plan.shard_ranks}; choose "
            f"shard_group from {', '.join(str(g) for g in range(1, plan.dp + 1) if plan.dp % g == 0)}"
        )


def check_phase(plan: ParallelPlan, phase: str) -> None:
    """Sharded optimizer state means nothing for inference: say so rather than predict a meaningless plan."""
    if phase != "training" and plan.shard_stage:
        what = "fsdp=True" if plan.fsdp else f"zero_stage={plan.zero_stage}"
        raise InvalidInputError(
            f"{what} shards training state (gradients, optimizer); predict a training step "
            "(phase='training', --training) or drop it for inference"
        )
