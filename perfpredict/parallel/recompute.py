"""Activation checkpointing's recompute, as the multi-GPU report states it: its share of each rank's backward and its
FLOPs per microbatch (for the step split and HFU).

The recompute itself is in each rank's graph: ``compiler_hooks/recompute.py`` rewrites the training graph (the
policy of ``activation_checkpointing``, or the model's own checkpointed regions), and the rank's single-GPU
prediction times those ops inside its backward, in their layers (so FSDP's per-layer overlap sees them). Nothing is
added here; this only reads back how much of the backward they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfpredict.parallel.timing import RankTime


def seconds_per_microbatch(time: RankTime, cp: int) -> float:
    """Seconds of the rank's backward per microbatch that recompute the forward (a context-parallel rank runs 1/cp
    of them)."""
    share = time.report.recompute
    return share.time_ms / 1e3 / cp if share is not None else 0.0


def flops_per_microbatch(runs: Any, tp: int) -> float:
    """The whole model's recomputed FLOPs per microbatch: every stage's, over the tp ranks that split them evenly."""
    from perfpredict.compiler_hooks.recompute import recompute_summary

    return float(tp * sum(recompute_summary(r.stage.graph)[2] for r in runs))
