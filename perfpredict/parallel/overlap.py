"""Two streams, as a framework runs them: compute in order on one, collectives in order on another.

A collective may start once the compute task it waits for has ended (``ready_after``; -1: at once) and the
previous collective is done (NCCL runs one at a time per stream); a compute task that needs a collective's result
(``needed_by``: an FSDP layer needs its all-gathered weights) waits for it. What the step loses to communication
is the exposed time: the end of both streams minus the compute alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Comm:
    seconds: float
    ready_after: int = -1  # index of the compute task whose end releases it; -1: ready at the start
    needed_by: int | None = None  # index of the compute task that waits for it


@dataclass(frozen=True)
class Overlap:
    end_s: float
    compute_s: float
    comm_s: float

    @property
    def exposed_s(self) -> float:
        return max(self.end_s - self.compute_s, 0.0)


def simulate(compute_s: Sequence[float], comms: Sequence[Comm]) -> Overlap:
    """Run the two streams; collectives are issued in the order they become ready (a stable sort). A collective
    a task needs is issued before that task even if it is listed as ready later (it cannot be)."""
    order = sorted(range(len(comms)), key=lambda j: comms[j].ready_after)
    compute_end: list[float] = []
    done: dict[int, float] = {}
    state = {"comm_end": 0.0, "next": 0}

    def issue(j: int) -> None:
        c = comms[j]
        ready = compute_end[c.ready_after] if 0 <= c.ready_after < len(compute_end) else 0.0
        state["comm_end"] = max(state["comm_end"], ready) + c.seconds
        done[j] = state["comm_end"]

    def issue_until(limit: int) -> None:  # in order, every collective whose producer has finished
        while state["next"] < len(order) and comms[order[state["next"]]].ready_after < limit:
            if order[state["next"]] not in done:
                issue(order[state["next"]])
            state["next"] += 1

    for k, seconds in enumerate(compute_s):
        issue_until(k)
        for j in (j for j in order if comms[j].needed_by == k and j not in done):
            issue(j)
        waits = [done[j] for j in order if comms[j].needed_by == k]
        start = max([compute_end[-1] if compute_end else 0.0, *waits])
        compute_end.append(start + seconds)
    issue_until(len(compute_s) + 1)
    for j in order:  # anything left (needed by nothing, ready after the last task)
        if j not in done:
            issue(j)
    end = max(compute_end[-1] if compute_end else 0.0, state["comm_end"])
    return Overlap(end, float(sum(compute_s)), float(sum(c.seconds for c in comms)))
