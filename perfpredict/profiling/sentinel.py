"""Host-speed sentinel: a fixed reference workload timed beside the dataset's rows.

Why. A row's coefficient of variation only sees noise inside its own timed window (a second or less). On a shared
VM the host's speed also moves between windows: `studies/sweep_recheck.py` measured the same CPU sweeps twice,
minutes apart, and their median latencies differed by 11-20% (median over rows), and by 25-55% from the day the
dataset was collected. A slow spell that covers a whole window leaves its CV low and its label wrong. A workload
that never changes, timed beside the rows, measures part of that: `studies/host_drift.py` found that dividing
each latency by the speed factor of a sentinel timed right before it takes the round-to-round spread from 11.3% to
9.1% (median over 8 models, 30 rounds); a sentinel timed once per round, 13.7% to 12.9%. The slow spells last
seconds, so only a reading next to the row helps, and only partly. ``perfpredict collect --sentinel`` times it
right before each row (off by default: 0.3 s per row, a third more collection time on the CPU, for a fifth less
label noise there); the GPU campaign scripts turn it on, to see whether the H100's label noise is the host's.

Three parts, because a host can slow one resource and not another (a neighbour that streams memory slows the
memory-bound part, one that takes CPU time slows them all):

- ``matmul``: a square float32 matmul, compute-bound;
- ``stream``: an in-place add over a buffer larger than the last-level cache, memory-bound;
- ``dispatch``: a chain of tiny elementwise ops, bound by eager dispatch and launch overhead.

The sizes are fixed per device kind, so readings compare across rows and sessions of one dataset.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from perfpredict.core.units import MIB

#: (matmul side, stream elements, dispatch ops) per device kind. On the project's 2-vCPU VM the CPU parts take 0.25,
#: 1.2 and 0.19 ms. On a GPU: a 4096-square matmul (a few ms), a 256 MiB stream (five times an H100's L2) and 50
#: launches of a tiny kernel (the host's dispatch speed); not yet run on one.
SIZES = {"cpu": (256, 8 * MIB, 50), "cuda": (4096, 64 * MIB, 50)}
PARTS = ("matmul", "stream", "dispatch")


def workloads(device: str) -> dict[str, Callable[[], Any]]:
    """The three reference workloads on ``device`` ("cpu" or "cuda[:i]"), their tensors allocated once."""
    import torch

    side, elements, ops = SIZES["cpu" if device == "cpu" else "cuda"]
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(side, side, generator=gen).to(device)
    b = torch.randn(side, side, generator=gen).to(device)
    buf = torch.zeros(elements, device=device)
    tiny = torch.ones(16, device=device)

    def dispatch() -> Any:
        x = tiny
        for _ in range(ops):
            x = x * 1.0001
        return x

    return {"matmul": lambda: a @ b, "stream": lambda: buf.add_(1.0), "dispatch": dispatch}


def _sync(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.synchronize(device)


def time_part(fn: Callable[[], Any], device: str, seconds: float = 0.1, min_runs: int = 5) -> float:
    """Median milliseconds of ``fn`` over at least ``min_runs`` calls and ``seconds``, after two warm-up calls."""
    for _ in range(2):
        fn()
    _sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < seconds:
        t0 = time.perf_counter_ns()
        fn()
        _sync(device)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


class Sentinel:
    """Times the reference workloads at most every ``every_s`` seconds (0: at every reading); ``reading()`` is the
    latest, as row fields."""

    def __init__(
        self,
        device: str,
        every_s: float = 60.0,
        seconds_per_part: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.device = device
        self.every_s = every_s
        self.seconds_per_part = seconds_per_part
        self.clock = clock
        self._fns: dict[str, Callable[[], Any]] | None = None
        self._last: dict[str, float] | None = None
        self._at: float | None = None

    def refresh(self) -> dict[str, float]:
        """Time every part now."""
        if self._fns is None:
            self._fns = workloads(self.device)
        self._last = {p: time_part(self._fns[p], self.device, self.seconds_per_part) for p in PARTS}
        self._at = self.clock()
        return self._last

    def reading(self) -> dict[str, float]:
        """``env_sentinel_<part>_ms`` for each part and ``env_sentinel_age_s``, refreshed if older than every_s."""
        if self._at is None or self.clock() - self._at >= self.every_s:
            self.refresh()
        assert self._last is not None and self._at is not None
        out = {f"env_sentinel_{p}_ms": round(v, 6) for p, v in self._last.items()}
        out["env_sentinel_age_s"] = round(self.clock() - self._at, 3)
        return out


def speed_factor(row: dict[str, Any], reference: dict[str, float]) -> float | None:
    """How much slower the host was for this row than at ``reference`` ({part: ms}, e.g. the dataset's medians):
    the geometric mean over parts of row reading / reference. None for a row without a reading."""
    ratios = [row.get(f"env_sentinel_{p}_ms") for p in PARTS]
    if any(not isinstance(r, (int, float)) or r <= 0 for r in ratios) or any(reference.get(p, 0) <= 0 for p in PARTS):
        return None
    product = 1.0
    for p, r in zip(PARTS, ratios):
        product *= r / reference[p]
    return product ** (1 / len(PARTS))
