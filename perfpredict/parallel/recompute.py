"""Activation checkpointing's recompute, as the multi-GPU timing sees it: seconds per layer and FLOPs per step.

The seam with the memory side (issue 46): the mode is read from the Request as ``activation_checkpointing``
(``"none"`` when the Request has no such field), and this module turns it into time and FLOPs:

- ``none``: nothing is recomputed;
- ``full``: every transformer block is checkpointed, so its whole forward runs again in the backward, just before
  the block's backward (what FSDP wraps and prefetches around): each layer's backward grows by its forward's
  seconds, and the step's hardware FLOPs by the blocks' forward FLOPs (llm-foundry's HFU counts the same extra
  forward; flash attention's own backward recompute is inside its backward kernel and is not counted as
  recompute).

Any other mode (selective, every-k) is the memory side's to time; until it is wired, it is refused with what is
known.

NB for the merge with the memory side: the rank's single-GPU prediction (``timing.rank_request`` copies every run
field) must not count the recompute a second time. Where the single-GPU path already times it (recompute ops in
the rank's graph), :func:`by_layer_s` should read those ops' share instead of adding the layers' forward again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfpredict.core.errors import InvalidInputError

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.parallel.timing import RankTime

NONE, FULL = "none", "full"
KNOWN = (NONE, FULL)


def mode_of(request: Any) -> str:
    """The activation-checkpointing mode a Request asks for ("none" when it has no such field)."""
    mode = getattr(request, "activation_checkpointing", None)
    if mode in (None, False, "", NONE):
        return NONE
    if mode is True:
        return FULL
    if mode not in KNOWN:
        raise InvalidInputError(
            f"activation_checkpointing={mode!r} is not timed by the multi-GPU model; it knows {', '.join(KNOWN)}"
        )
    return mode


def by_layer_s(time: RankTime, mode: str) -> dict[int, float]:
    """Seconds each layer's backward grows by (its forward again, ``full``); the root is never checkpointed."""
    if mode != FULL:
        return {}
    return {label: seconds for label, seconds in time.layer_forward_s.items() if label >= 0}


def flops(graph: OpGraph, labels: list[int], start: int, mode: str) -> float:
    """FLOPs recomputed per microbatch: the forward FLOPs of the checkpointed layers."""
    if mode != FULL:
        return 0.0
    return float(sum(n.flops for i, n in enumerate(graph.nodes[:start]) if labels[i] >= 0))
