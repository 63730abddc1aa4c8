"""A parallel plan: how one training or inference step is spread over GPUs.

``world_size = dp * tp * pp``. Ranks are laid out as Megatron-LM lays them out by default: tensor-parallel ranks
are neighbours (inside one node where they fit), then data-parallel replicas, then pipeline stages, so rank
``r = tp_rank + tp * (dp_rank + dp * pp_rank)``. ``graph.batch_size`` is the micro-batch one rank runs in one
forward and backward; the global batch is ``micro-batch * microbatches * dp``.

- ``fsdp=True`` shards parameters, gradients and optimizer state over the ``dp`` group as FSDP2's ``fully_shard``
  does by default (ZeRO stage 3); ``zero_stage`` 1 or 2 shards less, as DeepSpeed's stages do.
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

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def shard_stage(self) -> int:
        """What is sharded over the dp group: 0 nothing, 1 optimizer state, 2 + gradients, 3 + parameters."""
        return 3 if self.fsdp else self.zero_stage

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.gpus_per_node)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """A short label such as ``dp=2 tp=4 pp=2 (16 GPUs, 2 nodes)``."""
        parts = [f"{k}={getattr(self, k)}" for k in ("dp", "tp", "pp") if getattr(self, k) > 1] or ["1 GPU"]
        parts += [flag for flag in ("fsdp", "sp") if getattr(self, flag)]
        if self.zero_stage and not self.fsdp:
            parts.append(f"zero{self.zero_stage}")
        if self.microbatches > 1:
            parts.append(f"microbatches={self.microbatches}")
        return " ".join(parts) + f" ({self.world_size} GPUs, {self.nodes} node{'s' if self.nodes > 1 else ''})"


_INT_KEYS = ("dp", "tp", "pp", "microbatches", "gpus_per_node")
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
        if key in values:
            values[key] = _positive_int(values[key], key)
    for key in ("fsdp", "sp"):
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
    if plan.sp and plan.tp == 1:
        raise InvalidInputError(
            "sp=True (sequence parallelism) splits the sequence over the tensor-parallel "
            "group; it needs tp > 1, e.g. parallel={'tp': 2, 'sp': True}"
        )


def check_phase(plan: ParallelPlan, phase: str) -> None:
    """Sharded optimizer state means nothing for inference: say so rather than predict a meaningless plan."""
    if phase != "training" and plan.shard_stage:
        what = "fsdp=True" if plan.fsdp else f"zero_stage={plan.zero_stage}"
        raise InvalidInputError(
            f"{what} shards training state (gradients, optimizer); predict a training step "
            "(phase='training', --training) or drop it for inference"
        )
