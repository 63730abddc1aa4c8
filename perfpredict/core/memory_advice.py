"""Memory you can act on: a warning when a step's peak is within 10% of the device's memory (or over it), with the
remedies the command in hand can take (its own flags: ``Levers`` says which apply) and, for each, about what the
peak would be after it, computed from the peak's own terms.

Used by the single-device report (``assemble``) and the multi-GPU one (``parallel.api``); renderers show the text.
A remedy the command cannot take (a weight format ``predict`` has no flag for, activation checkpointing) or one
that saves nothing (bfloat16 after float16) is never offered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfpredict.core.units import GIB

TIGHT_SHARE = 0.90  # above this share of the device's memory, a peak is tight: fragmentation or a longer input OOMs
GPUS_PER_NODE = 8  # tensor parallelism is offered within one node (its all-reduces are on the critical path)
MAX_DATA_PARALLEL = 64  # FSDP is offered up to this many GPUs
ADAM_OPTIMIZERS = ("adamw", "adam")
WORTH_SHARE = 0.01  # a remedy saving less than this share of the device is left out


@dataclass(frozen=True)
class Levers:
    """Where the run stands on what the command can change: only these remedies are offered.

    ``batch``: the batch (one rank's micro-batch on several GPUs): a smaller one is offered when it is over 1;
    ``dtype``: the run's dtype (float32 inference offers ``half_dtype``; "" offers none); ``tp``, ``dp``: the plan's
    degrees; ``shard_stage``: what the plan shards over its ``dp`` GPUs (ZeRO's stages: 1 the optimizer state, 2 and
    the gradients, 3 and the weights, as FSDP), through ``--zero-stage`` when ``zero``, else ``--fsdp``;
    ``multi_gpu``: the device is a whole GPU, so ``--tp``/``--fsdp --dp`` are offered (not on a CPU or a MIG slice)."""

    batch: int = 1
    dtype: str = ""
    half_dtype: str = "bfloat16"
    tp: int = 1
    dp: int = 1
    shard_stage: int = 0
    zero: bool = False
    multi_gpu: bool = False


@dataclass(frozen=True)
class Remedy:
    """A flag of the command, why it saves memory, and about what the peak (per GPU) would be after it."""

    flag: str
    why: str
    after_bytes: float
    per_gpu: bool


def memory_warning(
    peak_bytes: float,
    capacity_bytes: float,
    phase: str,
    terms: Mapping[str, float],
    *,
    optimizer: str = "",
    where: str = "",
    levers: Levers | None = None,
) -> str | None:
    """A warning when ``peak_bytes`` is over ``TIGHT_SHARE`` of ``capacity_bytes``, else None.

    ``terms``: bytes of "weights", "gradients", "optimizer state", "optimizer temporaries" and "activations" (the
    activations saved for backward, or an inference's live activations); a missing term counts 0, and what the
    peak holds beyond them (the runtime, a workspace) stays as it is. ``where`` names the rank or stage
    ("stage 0: ") for a multi-GPU report."""
    if capacity_bytes <= 0 or peak_bytes <= TIGHT_SHARE * capacity_bytes:
        return None
    share = peak_bytes / capacity_bytes
    amount = f"{where}peak memory {peak_bytes / GIB:.2f} GiB of {capacity_bytes / GIB:.2f} GiB ({share:.0%})"
    if peak_bytes > capacity_bytes:
        head = f"{amount}: does not fit"
    else:
        head = f"{amount}: fits, but above {TIGHT_SHARE:.0%}; allocator fragmentation or a longer input may not fit"
    target = TIGHT_SHARE * capacity_bytes
    found = remedies(phase, terms, peak_bytes, target, optimizer, levers or Levers())
    found = [r for r in found if peak_bytes - r.after_bytes >= WORTH_SHARE * capacity_bytes]  # else noise
    if not found:
        return f"{head}; no flag of this command brings it under {target / GIB:.2f} GiB: use a device with more memory"
    return f"{head}. To bring it under {TIGHT_SHARE:.0%} ({target / GIB:.2f} GiB): " + "; ".join(
        describe(r, target) for r in found
    )


def describe(remedy: Remedy, target_bytes: float) -> str:
    """``--tp 2 (why): about 64.8 GiB per GPU``, with "not enough alone" when it stays over ``target_bytes``."""
    each = " per GPU" if remedy.per_gpu else ""
    short = ", not enough alone" if remedy.after_bytes > target_bytes else ""
    gib = remedy.after_bytes / GIB
    return f"{remedy.flag} ({remedy.why}): about {gib:.{1 if gib >= 10 else 2}f} GiB{each}{short}"


def remedies(
    phase: str, terms: Mapping[str, float], peak_bytes: float, target_bytes: float, optimizer: str, levers: Levers
) -> list[Remedy]:
    """The remedies ``levers`` allows, each with the peak after it (see :func:`memory_warning`)."""
    t = {k: float(terms.get(k, 0.0)) for k in ("weights", "gradients", "optimizer state", "optimizer temporaries")}
    act = float(terms.get("activations", 0.0))
    multi = levers.tp * levers.dp > 1
    found = []
    if levers.batch > 1 and act > 0:
        per_sample, fixed = act / levers.batch, peak_bytes - act
        batch = max(1, min(levers.batch - 1, int((target_bytes - fixed) // per_sample)))
        why = f"the activations, {act / GIB:.2f} GiB at batch {levers.batch}, scale with it"
        found.append(Remedy(f"--batch {batch}", why, fixed + batch * per_sample, multi))
    if phase != "training" and levers.dtype == "float32" and levers.half_dtype:
        saved = (t["weights"] + act) / 2
        why = "weights and activations in 2 bytes instead of 4"
        found.append(Remedy(f"--dtype {levers.half_dtype}", why, peak_bytes - saved, multi))
    if phase == "training" and optimizer in ADAM_OPTIMIZERS and t["optimizer state"] > 0:
        saved = 0.75 * t["optimizer state"] + t["optimizer temporaries"]
        why = "a quarter of the optimizer state, no temporary copy"
        found.append(Remedy("--optimizer adamw-8bit", why, peak_bytes - saved, multi))
    if levers.multi_gpu and phase == "training":
        found.append(_sharded_data_parallel(t, peak_bytes, target_bytes, levers))
    if levers.multi_gpu and levers.tp * 2 <= GPUS_PER_NODE:
        found.append(_tensor_parallel(t, peak_bytes, target_bytes, levers))
    return found


def _smallest(degrees: list[int], after, target_bytes: float) -> int:
    """The first of ``degrees`` whose ``after(degree)`` is under ``target_bytes``, else the last."""
    return next((n for n in degrees if after(n) <= target_bytes), degrees[-1])


def _doublings(start: int, limit: int) -> list[int]:
    out = [start * 2]
    while out[-1] * 2 <= limit:
        out.append(out[-1] * 2)
    return out


def _sharded_data_parallel(t: Mapping[str, float], peak: float, target: float, levers: Levers) -> Remedy:
    """FSDP (ZeRO-3) over n GPUs: weights, gradients and optimizer state each 1/n per GPU. ``t`` holds one GPU's
    share now: a term the plan already shards over its dp GPUs is 1/dp of the whole."""
    stage = levers.shard_stage if levers.dp > 1 else 0
    levels = {"weights": 3, "gradients": 2, "optimizer state": 1}  # the ZeRO stage from which each is sharded
    now = sum(t[k] for k in levels)
    whole = sum(t[k] * (levers.dp if stage >= level else 1) for k, level in levels.items())

    def after(n: int) -> float:
        return peak - now + whole / n

    # shard over the data-parallel group the plan already has, or over more GPUs
    degrees = ([levers.dp] if levers.dp > 1 and stage < 3 else []) + _doublings(levers.dp, MAX_DATA_PARALLEL)
    n = _smallest(degrees, after, target)
    more = f" --dp {n}" if n != levers.dp else ""
    if stage >= 3:
        flag, why = f"--dp {n}", f"shards the weights, gradients and optimizer state over {n} GPUs, not {levers.dp}"
    else:
        flag = ("--zero-stage 3" if levers.zero else "--fsdp") + more
        why = f"shards the weights, gradients and optimizer state, {whole / GIB:.2f} GiB, over {n} GPUs"
    return Remedy(flag, why, after(n), True)


def _tensor_parallel(t: Mapping[str, float], peak: float, target: float, levers: Levers) -> Remedy:
    """Megatron tensor parallelism over ``tp`` GPUs: every layer's weights (and their gradients and optimizer
    state) 1/tp per GPU; the activations are counted whole (the norms' and the residual's are not split)."""
    held = sum(t.values())  # per GPU at the present tp

    def after(n: int) -> float:
        return peak - held + held * levers.tp / n

    n = _smallest(_doublings(levers.tp, GPUS_PER_NODE), after, target)
    what = "weights, gradients and optimizer state" if t["gradients"] else "weights"
    over = f"over {n} GPUs, not {levers.tp}" if levers.tp > 1 else f"over {n} GPUs"
    return Remedy(f"--tp {n}", f"splits the {what}, {held / GIB:.2f} GiB on each GPU now, {over}", after(n), True)
