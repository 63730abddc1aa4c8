"""Memory you can act on: a warning when a step's peak is within 10% of the device's memory (or over it), with what
each usual remedy would save, computed from the peak's own terms.

Used by the single-device report (``assemble``) and the multi-GPU one (``parallel.api``); renderers show the text.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfpredict.core.units import GIB

TIGHT_SHARE = 0.90  # above this share of the device's memory, a peak is tight: fragmentation or a longer input OOMs
FSDP_EXAMPLE_GPUS = 8


def memory_warning(
    peak_bytes: float,
    capacity_bytes: float,
    phase: str,
    terms: Mapping[str, float],
    *,
    optimizer: str = "",
    where: str = "",
    sharded: bool = False,
) -> str | None:
    """A warning when ``peak_bytes`` is over ``TIGHT_SHARE`` of ``capacity_bytes``, else None.

    ``terms``: bytes of "weights", "gradients", "optimizer state", "optimizer temporaries" and "activations" (the
    activations saved for backward, or an inference's live activations); a missing term counts 0. ``where`` names
    the rank or stage ("stage 0: ") for a multi-GPU report; ``sharded``: the state is already sharded (FSDP or
    ZeRO-3), so more GPUs, not FSDP, is the remedy.
    """
    if capacity_bytes <= 0 or peak_bytes <= TIGHT_SHARE * capacity_bytes:
        return None
    share = peak_bytes / capacity_bytes
    amount = f"{where}peak memory {peak_bytes / GIB:.2f} GiB of {capacity_bytes / GIB:.2f} GiB ({share:.0%})"
    if peak_bytes > capacity_bytes:
        head = f"{amount}: does not fit"
    else:
        head = f"{amount}: fits, but above {TIGHT_SHARE:.0%}; allocator fragmentation or a longer input may not fit"
    return f"{head}. To bring it under {TIGHT_SHARE:.0%} ({TIGHT_SHARE * capacity_bytes / GIB:.2f} GiB): " + "; ".join(
        remedies(phase, terms, optimizer, at_least_bytes=0.01 * capacity_bytes, sharded=sharded)
    )


def remedies(
    phase: str, terms: Mapping[str, float], optimizer: str = "", at_least_bytes: float = 0.0, sharded: bool = False
) -> list[str]:
    """What each usual remedy saves, in GiB, from the peak's terms; those saving under ``at_least_bytes`` are left
    out (unless none is left)."""
    act = float(terms.get("activations", 0.0))
    state = float(terms.get("optimizer state", 0.0))
    temporaries = float(terms.get("optimizer temporaries", 0.0))
    state_bytes = float(terms.get("weights", 0.0)) + float(terms.get("gradients", 0.0)) + state
    found = [
        (
            act / 2,
            f"halve the batch (the activations, {act / GIB:.2f} GiB, scale with it: saves about "
            f"{act / 2 / GIB:.2f} GiB)",
        )
    ]
    if phase != "training":
        found.append((float("inf"), "run in a lower precision (bfloat16, or an 8- or 4-bit weight format)"))
    else:
        found.append(
            (
                0.8 * act,
                f"activation checkpointing (recomputes the forward in the backward: saves most of the {act / GIB:.2f} "
                "GiB saved for backward, for about a third more compute)",
            )
        )
        if optimizer in ("adamw", "adam") and state > 0:
            saved = 0.75 * state + temporaries
            found.append(
                (
                    saved,
                    "an 8-bit optimizer (--optimizer adamw-8bit: a quarter of the state, no temporary copy; saves "
                    f"about {saved / GIB:.2f} GiB)",
                )
            )
        n = FSDP_EXAMPLE_GPUS
        found.append(
            (
                state_bytes * (n - 1) / n,
                f"FSDP (--fsdp --dp N shards weights, gradients and optimizer state, {state_bytes / GIB:.2f} GiB, "
                f"over N GPUs: saves about {state_bytes * (n - 1) / n / GIB:.2f} GiB at N={n})"
                if not sharded
                else f"shard over twice the GPUs (the sharded state, {state_bytes / GIB:.2f} GiB, halves: saves "
                f"about {state_bytes / 2 / GIB:.2f} GiB)",
            )
        )
    kept = [text for saved, text in found if saved >= at_least_bytes]
    return kept or [text for _, text in found]
