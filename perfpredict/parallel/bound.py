"""What limits a multi-GPU step: communication, or each rank's own bound (host, compute or memory), and what a
host-bound rank does to scaling.

A rank's step is predicted by the single-GPU path (``timing.rank_time``), so it carries that step's two timelines.
When the host sets a rank's pace (its GPU idles waiting for dispatch and launches), splitting the model over more
GPUs shrinks each rank's device work but not its host work: tensor parallelism leaves every rank the same ops to
dispatch (plus its collectives), so the step hardly moves; pipeline stages split the ops and do help; data
parallelism keeps each rank's step as it was. The report says so, with what CUDA graphs or torch.compile would take
a rank's step to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfpredict.core.report import TimelineSummary
    from perfpredict.parallel.plan import ParallelPlan


def step_bound(timeline: TimelineSummary | None, exposed_s: float, compute_s: float) -> str:
    """The step's bound: "communication" where exposed communication outweighs the slowest rank's compute, else
    that rank's."""
    if exposed_s > compute_s:
        return "communication"
    return timeline.bound if timeline is not None and timeline.bound else "compute"


def host_bound_note(timeline: TimelineSummary | None, plan: ParallelPlan, scaling_efficiency: float) -> str:
    """One line for a step whose ranks are host-bound ("" otherwise)."""
    if timeline is None or not timeline.launch_bound:
        return ""
    from perfpredict.render.formats import fmt_time_ms

    what = []
    if plan.tp > 1:
        what.append(f"tp={plan.tp} leaves each rank every op to dispatch, so it gains little")
    if plan.pp > 1:
        what.append(f"pp={plan.pp} splits the ops between stages, so it helps")
    if plan.dp > 1:
        what.append(f"dp={plan.dp} multiplies the host-bound rank, its GPUs idle alike")
    faster = ""
    if timeline.other_modes_ms:
        best = min(timeline.other_modes_ms, key=timeline.other_modes_ms.get)
        faster = (
            f"; {best} (--mode {best}) would take a rank's {timeline.mode} step from {fmt_time_ms(timeline.wall_ms)} "
            f"to {fmt_time_ms(timeline.other_modes_ms[best])}"
        )
    return (
        f"each rank is host-bound: its GPU idles {timeline.device_idle_share:.0%} of each {timeline.mode} step "
        f"(device {fmt_time_ms(timeline.device_ms)}, host {fmt_time_ms(timeline.host_ms)}, profile "
        f"{timeline.host_profile}); more GPUs split the device work, not the host's dispatch"
        + (f" ({'; '.join(what)})" if what else "")
        + f": scaling efficiency {scaling_efficiency:.0%}{faster}"
    )
