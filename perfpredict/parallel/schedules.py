"""Pipeline schedules: GPipe, 1F1B, interleaved 1F1B and zero-bubble ZB-1P; their step time, bubble, the
microbatches each stage holds, and how often each sends.

Per microbatch a stage s runs a forward f_s and a backward b_s (input gradients and weight gradients, w_s of it).
With p stages and m microbatches (T = max_s (f_s + b_s), the slowest stage):

- **GPipe** (Huang et al. 2019): every forward, then every backward. ``sum f + (m-1) max f + sum b + (m-1) max b``;
  bubble over the ideal ``m T``: (p-1)/m. Every stage holds all m microbatches' activations.
- **1F1B** (PipeDream-Flush, Narayanan et al. 2021): the same time, ``sum (f+b) + (m-1) T``, bubble (p-1)/m, but stage
  s holds only min(p - s, m) microbatches (the first stage the most).
- **Interleaved 1F1B** (Narayanan et al. 2021, section 2.2): each rank runs v model chunks (virtual stages), so
  the fill and drain are v times shorter: ``m T + (sum (f+b) - T) / v``, bubble (p-1)/(v m); every microbatch
  crosses v times as many stage boundaries, so the point-to-point sends are v times more. Stage s holds
  Megatron-LM's warm-up count ``(p - s - 1) x 2 + (v - 1) x p + 1`` chunk-microbatches (at most m v), each 1/v of
  the stage: the first stage holds more than under 1F1B. Megatron needs m to be a multiple of p.
- **ZB-1P** (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the backward split into B (input
  gradients) and W (weight gradients), W deferred to fill the bubble, at 1F1B's memory. Its handcrafted schedule
  ZB-H1 leaves ``(p-1)(F + B - W)`` of 1F1B's ``(p-1)(F + B + W)`` (their section 3.1), a third of it when
  F = B = W; ZB-1P's automatic schedule does at least as well, and that bound is what is modelled here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB1P = "gpipe", "1f1b", "interleaved", "zb1p"


@dataclass(frozen=True)
class StageTime:
    """One stage's seconds per microbatch: its forward and backward (communication on the critical path
    included), and the weight-gradient part of the backward."""

    forward_s: float
    backward_s: float
    weight_grad_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s


def step_s(schedule: str, stages: Sequence[StageTime], microbatches: int, virtual: int = 1) -> float:
    """Seconds of the pipeline's forwards and backwards over ``microbatches`` (no optimizer step)."""
    m = microbatches
    times = [s.total_s for s in stages]
    slowest = max(times)
    if schedule == GPIPE:
        fwd, bwd = [s.forward_s for s in stages], [s.backward_s for s in stages]
        return sum(fwd) + (m - 1) * max(fwd) + sum(bwd) + (m - 1) * max(bwd)
    return m * slowest + bubble_s(schedule, stages, virtual)


def bubble_s(schedule: str, stages: Sequence[StageTime], virtual: int = 1) -> float:
    """The slowest stage's idle seconds in one step (the others' fill and drain)."""
    times = [s.total_s for s in stages]
    fill = sum(times) - max(times)
    if schedule == INTERLEAVED:
        return fill / virtual
    if schedule == ZB1P:
        return fill * zero_bubble_share(max(stages, key=lambda s: s.total_s))
    return fill


def zero_bubble_share(stage: StageTime) -> float:
    """ZB-H1's bubble over 1F1B's: (F + B - W) / (F + B + W), B the input-gradient part (here: backward - W)."""
    if stage.total_s <= 0:
        return 1.0
    return max(stage.forward_s + stage.backward_s - 2 * stage.weight_grad_s, 0.0) / stage.total_s


def bubble_over_compute(
    schedule: str, stages: int, microbatches: int, virtual: int = 1, zb_share: float = 1 / 3
) -> float:
    """The bubble over the ideal compute time with equal stages: (p-1)/m (GPipe, 1F1B), (p-1)/(v m) (interleaved),
    (p-1)/m x ZB-H1's share (ZB-1P; 1/3 when F = B = W)."""
    if stages <= 1:
        return 0.0
    ratio = (stages - 1) / microbatches
    if schedule == INTERLEAVED:
        return ratio / virtual
    return ratio * zb_share if schedule == ZB1P else ratio


def idle_share(over_compute: float) -> float:
    """The share of the step a stage idles, from the bubble over the compute: r / (1 + r); (p-1)/(m+p-1) for 1F1B."""
    return over_compute / (1 + over_compute)


def in_flight(schedule: str, stage: int, stages: int, microbatches: int, virtual: int = 1) -> float:
    """Microbatches of activations stage ``stage`` holds at its peak, in whole-stage units (an interleaved chunk
    is 1/v of the stage)."""
    if stages <= 1:
        return 1.0
    if schedule == GPIPE:
        return float(microbatches)
    if schedule == INTERLEAVED:
        chunks = (stages - stage - 1) * 2 + (virtual - 1) * stages + 1
        return min(chunks, microbatches * virtual) / virtual
    return float(max(1, min(stages - stage, microbatches)))


def sends_per_microbatch(schedule: str, virtual: int = 1) -> int:
    """How many times a microbatch crosses a rank's stage boundary each way: v for interleaved, else once."""
    return virtual if schedule == INTERLEAVED else 1
