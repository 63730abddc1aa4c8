"""Data parallelism: DDP's bucketed gradient all-reduce, DeepSpeed ZeRO 1/2, and FSDP2's sharded parameters.

- **DDP** (torch ``DistributedDataParallel`` defaults): gradients are all-reduced in buckets of ``bucket_cap_mb``
  (25 MiB), the first bucket capped at 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``), filled in the order gradients
  become ready (the reverse of the forward) and closed once a bucket reaches its cap (``ddp_buckets`` follows
  the Reducer's rule: a tensor is never split). Each bucket is reduced as soon as its last gradient is ready, on
  a second stream, overlapping the rest of the backward; the buckets hold a copy of the gradients
  (``gradient_as_bucket_view=False``). With several microbatches DDP reduces on the last one only (``no_sync``).
- **ZeRO 1/2** (DeepSpeed): the gradient buckets are reduce-scattered during the backward, and after the
  optimizer step each rank's updated parameters are all-gathered (the same traffic as an all-reduce, ZeRO paper
  section 7); the all-gather is not overlapped. ZeRO-1 holds whole gradients and reduces them at the gradient
  accumulation boundary only; ZeRO-2 holds only its shard and reduce-scatters every microbatch (DeepSpeed's
  ``allreduce_gradients``).
- **FSDP2** (``fully_shard`` per layer and on the root, defaults ``reshard_after_forward=True``, no mixed-precision
  policy): each layer's parameters are all-gathered before its forward and again before its backward, the next
  layer's gather overlapping the current layer's compute (prefetch of one), and its gradients reduce-scattered
  after its backward. The root's parameters (outside the layers) are gathered once and kept through the backward.
  Gathers and reduce-scatters run every microbatch: FSDP2 keeps ``requires_gradient_sync`` on by default and a
  rank holds only its gradient shard (``set_requires_gradient_sync(False)`` would keep whole gradients instead,
  which the memory model does not count).
- **FSDP strategies and prefetch** (issue 46): ``SHARD_GRAD_OP`` (``reshard_after_forward=False``) keeps each
  layer's gathered parameters from its forward to its backward, so the backward gathers nothing; ``HYBRID_SHARD``
  shards over a group (a node) and all-reduces each reduce-scattered gradient shard across the groups (the
  replicas) after its reduce-scatter. ``prefetch`` is how many layers ahead a gather is issued (FSDP2's default
  and FSDP1's ``BACKWARD_PRE``: one; 0: each gather waits for the layer before it to finish). A
  MixedPrecisionPolicy's ``param_dtype`` and ``reduce_dtype`` set the bytes per parameter of the gathers and the
  reduce-scatters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfpredict.core.units import MIB
from perfpredict.parallel.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from perfpredict.parallel.structure import POST, PRE

FIRST_BUCKET_BYTES = MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
DEFAULT_BUCKET_MB = 25.0  # torch DDP's bucket_cap_mb


@dataclass(frozen=True)
class Unit:
    """A layer (or the root: what lies outside the layers) with its parameters and compute, in forward order."""

    label: int
    params: int
    tensors: tuple[int, ...]  # parameter counts of its modules, in forward order (DDP buckets by tensor)
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class PlannedComm:
    """A data-parallel collective and where it sits: after which backward unit (position in reverse order, -1 for
    after the step), or before which forward/backward unit it must finish."""

    kind: str
    size_bytes: int
    phase: str
    ready_after: int = -1  # compute-task index whose end releases it
    needed_by: int | None = None
    what: str = ""
    group: str = "dp"  # "dp", or "replicate": HYBRID_SHARD's all-reduce across shard groups


def ddp_buckets(
    sizes_bytes: Sequence[int], cap_bytes: int, first_cap_bytes: int = FIRST_BUCKET_BYTES
) -> list[list[int]]:
    """DDP's buckets over tensors in ready order (indices into ``sizes_bytes``): a bucket closes once it reaches
    its cap, the first cap being ``first_cap_bytes``."""
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for j, size in enumerate(sizes_bytes):
        current.append(j)
        filled += size
        if filled >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def backward_tasks(units: Sequence[Unit]) -> list[Unit]:
    """The compute tasks of one microbatch: the whole forward as one, then each unit's backward, last unit first."""
    return list(reversed(units))


def ddp_comms(
    units: Sequence[Unit], grad_bytes_per_param: float, cap_mb: float, kind: str = ALL_REDUCE
) -> list[PlannedComm]:
    """DDP's bucket all-reduces (or ZeRO 1/2's reduce-scatters), each released by the backward task that
    readies its last gradient (task 0 is the forward, task k the k-th unit's backward from the end)."""
    order = backward_tasks(units)
    tensors = [(k + 1, size) for k, unit in enumerate(order) for size in reversed(unit.tensors)]
    sizes = [round(size * grad_bytes_per_param) for _, size in tensors]
    # DDP caps its first bucket at 1 MiB only when bucket_cap_mb is left at its default; a cap the user sets
    # applies to every bucket
    first = FIRST_BUCKET_BYTES if cap_mb == DEFAULT_BUCKET_MB else round(cap_mb * MIB)
    comms = []
    for bucket in ddp_buckets(sizes, round(cap_mb * MIB), first):
        size = sum(sizes[j] for j in bucket)
        comms.append(
            PlannedComm(
                kind,
                size,
                "backward",
                ready_after=tensors[bucket[-1]][0],
                what=f"gradient bucket of {len(bucket)} tensors",
            )
        )
    return comms


def zero_gather(units: Sequence[Unit], param_bytes_per_param: float) -> PlannedComm:
    """ZeRO 1/2: all-gather of the updated parameters after the optimizer step."""
    size = round(sum(u.params for u in units) * param_bytes_per_param)
    return PlannedComm(ALL_GATHER, size, "step", what="updated parameters (ZeRO 1/2)")


def fsdp_comms(
    units: Sequence[Unit],
    param_bytes_per_param: float,
    grad_bytes_per_param: float,
    reduce: bool,
    reshard: bool = True,
    prefetch: int = 1,
    replicate_shard: int = 0,
) -> list[PlannedComm]:
    """FSDP2's collectives for one microbatch on compute tasks [forward of each unit..., backward of each unit
    in reverse...]. The root unit (PRE and POST together) is gathered once before the first forward task.
    ``reshard`` False (SHARD_GRAD_OP): no backward gathers. ``prefetch``: layers gathered ahead. ``replicate_shard``
    (HYBRID_SHARD: the shard group's size): each reduce-scattered gradient shard is then all-reduced across the
    replicas (group "replicate")."""
    n = len(units)
    root = [k for k, u in enumerate(units) if u.label in (PRE, POST)]
    root_params = sum(units[k].params for k in root)
    ahead = 1 + prefetch  # a gather is released by the end of the task ``ahead`` before the one that needs it
    comms = []
    if root_params:
        comms.append(PlannedComm(ALL_GATHER, round(root_params * param_bytes_per_param), "forward", -1, 0, "root"))
    for k, unit in enumerate(units):
        if k in root or not unit.params:
            continue
        size = round(unit.params * param_bytes_per_param)
        back = n + (n - 1 - k)  # the task index of this unit's backward
        comms.append(PlannedComm(ALL_GATHER, size, "forward", k - ahead, k, f"layer {unit.label}"))
        if reshard:
            comms.append(PlannedComm(ALL_GATHER, size, "backward", back - ahead, back, f"layer {unit.label}"))
        if reduce:
            comms += _reduction(unit.params, grad_bytes_per_param, back, f"layer {unit.label}", replicate_shard)
    if reduce and root_params:
        comms += _reduction(root_params, grad_bytes_per_param, 2 * n - 1, "root", replicate_shard)
    return comms


def _reduction(params: int, grad_bytes_per_param: float, after: int, what: str, shard: int) -> list[PlannedComm]:
    """A unit's gradient reduce-scatter, and under HYBRID_SHARD the all-reduce of its shard across replicas."""
    size = round(params * grad_bytes_per_param)
    out = [PlannedComm(REDUCE_SCATTER, size, "backward", after, what=f"{what} gradients")]
    if shard:
        out.append(
            PlannedComm(
                ALL_REDUCE, -(-size // shard), "backward", after, what=f"{what} gradient shard", group="replicate"
            )
        )
    return out
