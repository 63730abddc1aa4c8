"""Protocol v3's timers: the GPU's own time, eager time in a loop, and the host's enqueue time, each apart.

Why three. A step's wall time on a GPU is the later of two timelines: the host enqueues kernels, the GPU runs them
(DESIGN.md, "Latency: two timelines"). Syncing after every step, as protocol v2 did, starts each step on an idle
GPU and times the host's dispatch as much as the GPU: BERT-base bf16 on the H100 took 7.2 ms at batch 1 and 7.6 ms
at batch 32. So:

- :func:`graph_replay_ms` (``device_ms``): the step captured once in a CUDA graph and replayed back to back between
  one pair of events, enough replays to fill ``min_window_ms``. No host work is left in the window.
- :func:`blocked_ms` (``eager_ms``): ``n`` eager steps with no sync between them, one sync at the end, divided by
  ``n`` (the "blocked" timing of ``torch.utils.benchmark`` and ``triton.testing.do_bench``): what a user running
  eager sees in a loop, the host and the GPU overlapping as they do in real use.
- :func:`host_enqueue_ms` (``host_dispatch_ms``): the host time one step takes to return, started on an idle GPU
  so that the launch queue is not full and the host never waits on it.

On a CPU there is one timeline: ``device_ms`` is the blocked wall time, and there is no separate host time.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any


class CaptureFailed(Exception):
    """The step cannot run inside a CUDA graph (a CPU sync, data-dependent control flow, an uncapturable op)."""


def synchronizer(device: str) -> Callable[[], None]:
    """A zero-argument sync for ``device``: ``torch.cuda.synchronize`` on CUDA, nothing on the CPU."""
    if device == "cpu":
        return lambda: None
    import torch

    return lambda: torch.cuda.synchronize(device)


def blocked_ms(
    fn: Callable[[], Any],
    sync: Callable[[], None],
    *,
    min_window_s: float = 0.05,
    blocks: int = 3,
    max_steps: int = 10_000,
) -> tuple[list[float], int]:
    """``blocks`` samples of the mean step time over ``n`` back-to-back steps with one sync at the end of each block.

    ``n`` is sized from one synced step so that a block lasts about ``min_window_s``; returns (samples, n).
    """
    sync()
    t0 = time.perf_counter_ns()
    fn()
    sync()
    one_ms = max((time.perf_counter_ns() - t0) / 1e6, 1e-3)
    steps = int(min(max_steps, max(1, math.ceil(min_window_s * 1e3 / one_ms))))
    samples = []
    for _ in range(max(1, blocks)):
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            fn()
        sync()
        samples.append((time.perf_counter_ns() - t0) / 1e6 / steps)
    return samples, steps


def host_enqueue_ms(fn: Callable[[], Any], sync: Callable[[], None], *, reps: int = 5) -> list[float]:
    """Host milliseconds for ``fn()`` to return, each call started on an idle device (sync before, not after)."""
    out = []
    for _ in range(max(1, reps)):
        sync()
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    sync()
    return out


class GraphReplay:
    """A step captured in a CUDA graph (PyTorch's whole-network capture recipe: warm up on a side stream, capture,
    replay). Inputs are static: the step closes over its tensors, and a training step's optimizer must be built
    with ``capturable=True``."""

    def __init__(self, fn: Callable[[], Any], device: str, *, warmup: int = 3) -> None:
        import torch

        self.device = device
        self.graph = torch.cuda.CUDAGraph()
        try:
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    fn()
            torch.cuda.current_stream(device).wait_stream(side)
            with torch.cuda.graph(self.graph):
                self._out = fn()  # kept alive: the graph's outputs live in its private pool
            torch.cuda.synchronize(device)
        except Exception as err:
            raise CaptureFailed(f"{type(err).__name__}: {' '.join(str(err).split())[:200]}") from err

    def replay(self) -> None:
        self.graph.replay()

    def timed_ms(self, *, min_window_ms: float = 50.0, samples: int = 3) -> tuple[list[float], int]:
        """``samples`` figures of one event pair around ``n`` back-to-back replays, divided by ``n``; ``n`` fills
        ``min_window_ms``. Returns (per-replay milliseconds, n)."""
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.graph.replay()
        end.record()
        end.synchronize()
        one_ms = max(float(start.elapsed_time(end)), 1e-3)
        n = max(1, math.ceil(min_window_ms / one_ms))
        out = []
        for _ in range(max(1, samples)):
            start.record()
            for _ in range(n):
                self.graph.replay()
            end.record()
            end.synchronize()
            out.append(float(start.elapsed_time(end)) / n)
        return out, n


def graph_replay_ms(
    fn: Callable[[], Any], device: str, *, min_window_ms: float = 50.0, samples: int = 3
) -> tuple[list[float], int, GraphReplay]:
    """Capture ``fn`` and time its replays (see :class:`GraphReplay`); raises :class:`CaptureFailed`."""
    replay = GraphReplay(fn, device)
    times, n = replay.timed_ms(min_window_ms=min_window_ms, samples=samples)
    return times, n, replay


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
