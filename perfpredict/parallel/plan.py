"""A parallel plan: how one training or inference step is spread over GPUs.

``world_size = dp * tp * pp * cp``. Ranks are laid out as Megatron-LM lays them out by default: tensor-parallel
ranks are neighbours (inside one node where they fit), then context-parallel ranks, then data-parallel replicas,
then pipeline stages, so rank ``r = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))``. ``graph.batch_size``
is the micro-batch one rank runs in one forward and backward; the global batch is ``micro-batch * microbatches *
dp`` (``global_batch`` derives ``microbatches`` from it).

- ``fsdp=True`` shards parameters, gradients and optimizer state over the ``dp`` group as FSDP2's ``fully_shard``
  does by default (ZeRO stage 3); ``zero_stage`` 1 or 2 shards less, as DeepSpeed's stages do. ``fsdp_strategy``
  is FSDP's ``ShardingStrategy``: ``full_shard`` (the default), ``shard_grad_op`` (parameters kept gathered from
  the forward to the backward: FSDP2's ``reshard_after_forward=False``) or ``hybrid_shard`` (sharded within groups
  of ``shard_group`` ranks, replicated across them); ``float8_all_gather`` gathers float8 weights (torchao's
  ``enable_fsdp_float8_all_gather``, with ``float8="tensorwise"``).
- ``sp=True`` is Megatron's sequence parallelism: needs ``tp > 1``.
- ``microbatches`` feed the pipeline (``schedule``: GPipe, 1F1B, interleaved 1F1B, ZB-1P) and, without a pipeline,
  accumulate gradients.

The keys of issue 46's timing side sit together at the end of :class:`ParallelPlan` (see ``docs/parallel.md``).
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
SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb1p")
FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD = "full_shard", "shard_grad_op", "hybrid_shard"
FSDP_STRATEGIES = (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD)
COMM_DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


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
    # -- training at scale, timing (issue 46): schedules, FSDP2 communication, multi-node, cp, async TP --
    schedule: str = "1f1b"  # the pipeline schedule: gpipe, 1f1b, interleaved (1F1B), zb1p (zero bubble)
    virtual_stages: int = 1  # interleaved 1F1B: model chunks per pipeline rank (Megatron's virtual stages)
    global_batch: int | None = None  # samples per optimizer step; sets microbatches = global / (micro x dp)
    fsdp_strategy: str = FULL_SHARD  # with fsdp: full_shard, shard_grad_op (no re-gather), hybrid_shard
    shard_group: int | None = None  # hybrid_shard: ranks per shard group (None: a node's share of dp)
    fsdp_param_dtype: str | None = None  # MixedPrecisionPolicy.param_dtype: what FSDP gathers (None: stored)
    fsdp_reduce_dtype: str | None = None  # MixedPrecisionPolicy.reduce_dtype (None: as the gathered weights)
    fsdp_prefetch: int = 1  # layers FSDP gathers ahead, forward and backward (0: none)
    nvlink_domain: int | None = None  # GPUs on one NVLink fabric (None: a node; 72: GB200 NVL72)
    inter_node_gbps: float | None = None  # network line rate per GPU, Gb/s (None: the catalog's NICs)
    cp: int = 1  # context parallelism: ring attention over cp ranks, the sequence split cp ways
    async_tp: bool = False  # tensor-parallel collectives decomposed and overlapped with the matmuls
    float8_all_gather: bool = False  # FSDP gathers float8 weights (torchao, float8="tensorwise"; memory and comm)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shard_ranks(self) -> int:
        """The ranks each sharded tensor is split over: 1 where nothing is sharded; else the dp group with its
        context-parallel ranks (they hold the same weights, so they share the sharding), or HYBRID_SHARD's group."""
        if not self.shard_stage:
            return 1
        if self.fsdp and self.fsdp_strategy == HYBRID_SHARD:
            return self.shard_group_size * self.cp
        return self.dp * self.cp

    @property
    def shard_group_size(self) -> int:
        """HYBRID_SHARD's shard group: given, or the dp ranks that share a node (the replicas cross nodes)."""
        if self.shard_group:
            return self.shard_group
        per_node = max(self.gpus_per_node // (self.tp * self.cp), 1)
        return math.gcd(self.dp, per_node)

    @property
    def domain(self) -> int:
        """GPUs joined by NVLink: the NVLink domain, else one node."""
        return self.nvlink_domain or self.gpus_per_node

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
        parts = [f"{k}={getattr(self, k)}" for k in ("dp", "tp", "pp", "cp") if getattr(self, k) > 1] or ["1 GPU"]
        parts += [flag for flag in ("fsdp", "sp", "async_tp") if getattr(self, flag)]
        if self.fsdp and self.fsdp_strategy != FULL_SHARD:
            group = f" (shard group {self.shard_group_size})" if self.fsdp_strategy == HYBRID_SHARD else ""
            parts[parts.index("fsdp")] = f"fsdp={self.fsdp_strategy}{group}"
        if self.float8_all_gather:
            parts.append("float8 all-gather")
        if self.pp > 1 and (self.schedule != "1f1b" or self.virtual_stages > 1):
            parts.append(self.schedule + (f" v={self.virtual_stages}" if self.virtual_stages > 1 else ""))
        if self.zero_stage and not self.fsdp:
            parts.append(f"zero{self.zero_stage}")
        if self.microbatches > 1:
            parts.append(f"microbatches={self.microbatches}")
        return " ".join(parts) + f" ({self.world_size} GPUs, {self.nodes} node{'s' if self.nodes > 1 else ''})"


_INT_KEYS = ("dp", "tp", "pp", "microbatches", "gpus_per_node", "virtual_stages", "cp")
_OPTIONAL_INT_KEYS = ("global_batch", "shard_group", "nvlink_domain")
_CHOICES = {"schedule": SCHEDULES, "fsdp_strategy": FSDP_STRATEGIES}
_ALIASES = {
    "data": "dp",
    "tensor": "tp",
    "pipeline": "pp",
    "micro_batches": "microbatches",
    "zero": "zero_stage",
    "sequence_parallel": "sp",
    "context_parallel": "cp",
    "pipeline_schedule": "schedule",
    "sharding_strategy": "fsdp_strategy",
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
    _check_scale_keys(values)
    for key in ("fsdp", "sp", "async_tp", "float8_all_gather"):
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


def _check_scale_keys(values: dict[str, Any]) -> None:
    """Issue 46's keys: names normalised (``FULL_SHARD`` -> ``full_shard``, ``1F1B`` -> ``1f1b``), checked."""
    for key in _OPTIONAL_INT_KEYS:
        if values.get(key) is not None:
            values[key] = _positive_int(values[key], key)
    for key, choices in _CHOICES.items():
        if key in values:
            name = str(values[key]).lower().replace("-", "_")
            name = {"zb_1p": "zb1p", "zero_bubble": "zb1p", "interleaved_1f1b": "interleaved"}.get(name, name)
            if name not in choices:
                raise InvalidInputError(f"{key}={values[key]!r} is not one of {', '.join(choices)}")
            values[key] = name
    for key in ("fsdp_param_dtype", "fsdp_reduce_dtype"):
        if values.get(key) is not None and values[key] not in COMM_DTYPES:
            raise InvalidInputError(f"{key}={values[key]!r} is not one of {', '.join(COMM_DTYPES)} (or None)")
    if "fsdp_prefetch" in values and (
        isinstance(values["fsdp_prefetch"], bool) or values["fsdp_prefetch"] not in (0, 1, 2)
    ):
        raise InvalidInputError(f"fsdp_prefetch={values['fsdp_prefetch']!r} must be 0 (none), 1 (FSDP2's default) or 2")
    gbps = values.get("inter_node_gbps")
    if gbps is not None and (isinstance(gbps, bool) or not isinstance(gbps, int | float) or not 0 < gbps < math.inf):
        raise InvalidInputError(f"inter_node_gbps={gbps!r} must be a positive line rate per GPU in Gb/s (e.g. 400)")


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        hint = " (1 means not split)" if key in ("dp", "tp", "pp", "cp") else ""
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
    _check_scale_combination(plan)


def _check_scale_combination(plan: ParallelPlan) -> None:
    if plan.async_tp and not plan.sp:
        raise InvalidInputError(
            "async_tp=True overlaps sequence parallelism's all-gathers and reduce-scatters with their matmuls; "
            "it needs tp > 1 and sp=True (e.g. parallel={'tp': 8, 'sp': True, 'async_tp': True})"
        )
    if plan.schedule == "interleaved" and plan.virtual_stages < 2:
        raise InvalidInputError(
            "schedule='interleaved' runs several model chunks per rank; give virtual_stages >= 2 (--virtual-stages)"
        )
    if plan.virtual_stages > 1 and plan.schedule != "interleaved":
        raise InvalidInputError(
            f"virtual_stages={plan.virtual_stages} needs schedule='interleaved' (interleaved 1F1B); "
            f"the {plan.schedule!r} schedule runs one stage per rank"
        )
    if not plan.global_batch:  # else checked once the microbatches are known (resolve_batch)
        _check_interleaved(plan)
    if not plan.fsdp and (plan.fsdp_param_dtype or plan.fsdp_reduce_dtype):
        raise InvalidInputError(
            "fsdp_param_dtype and fsdp_reduce_dtype are FSDP's MixedPrecisionPolicy; add fsdp=True (--fsdp) or drop them"
        )
    if plan.nvlink_domain and plan.nvlink_domain % plan.gpus_per_node and plan.gpus_per_node % plan.nvlink_domain:
        raise InvalidInputError(
            f"nvlink_domain={plan.nvlink_domain} and gpus_per_node={plan.gpus_per_node}: one must divide the other "
            "(an NVL72 rack: nvlink_domain=72 with gpus_per_node=4 or 72)"
        )


def _check_interleaved(plan: ParallelPlan) -> None:
    if plan.schedule == "interleaved" and plan.pp > 1 and plan.microbatches % plan.pp:
        raise InvalidInputError(
            f"the interleaved schedule needs microbatches a multiple of pp={plan.pp} (Megatron-LM's rule); "
            f"microbatches={plan.microbatches}: use {plan.pp * max(1, -(-plan.microbatches // plan.pp))}"
        )


def resolve_batch(plan: ParallelPlan, micro_batch: int) -> ParallelPlan:
    """``plan`` with ``microbatches`` derived from ``global_batch`` (samples per optimizer step) and the graph's
    micro-batch: global = micro-batch x microbatches x dp, as the recipes state it."""
    if plan.global_batch is None:
        return plan
    per_step = micro_batch * plan.dp
    if plan.global_batch % per_step:
        raise InvalidInputError(
            f"global_batch={plan.global_batch} is not a multiple of micro-batch {micro_batch} x dp {plan.dp} = "
            f"{per_step}; choose a global batch of {per_step * max(1, plan.global_batch // per_step)} or "
            f"{per_step * (plan.global_batch // per_step + 1)}, or another micro-batch (--batch)"
        )
    microbatches = plan.global_batch // per_step
    if plan.microbatches not in (1, microbatches):
        raise InvalidInputError(
            f"global_batch={plan.global_batch} means {microbatches} microbatches of {micro_batch} on dp={plan.dp}, "
            f"but microbatches={plan.microbatches} was given; give one of the two"
        )
    resolved = dataclasses.replace(plan, microbatches=microbatches)
    _check_interleaved(resolved)
    return resolved


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
    if plan.fsdp_strategy == HYBRID_SHARD and plan.dp % plan.shard_group_size:
        raise InvalidInputError(
            f"shard_group={plan.shard_group_size} does not divide dp={plan.dp}; choose the shard group from "
            f"{', '.join(str(g) for g in range(1, plan.dp + 1) if plan.dp % g == 0)}"
        )


def check_phase(plan: ParallelPlan, phase: str) -> None:
    """Sharded optimizer state means nothing for inference: say so rather than predict a meaningless plan."""
    if phase != "training" and plan.shard_stage:
        what = "fsdp=True" if plan.fsdp else f"zero_stage={plan.zero_stage}"
        raise InvalidInputError(
            f"{what} shards training state (gradients, optimizer); predict a training step "
            "(phase='training', --training) or drop it for inference"
        )
