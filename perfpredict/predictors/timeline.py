"""Two timelines: the host enqueues op i after its dispatch cost h_i; the device runs it for d_i once both the host
has enqueued it and op i-1 has finished (DESIGN.md, "Latency: two timelines").

    host_enqueued[i] = max(host_enqueued[i-1] + h[i], device_end[i - queue_depth])   # a full launch queue blocks
    device_end[i]    = max(host_enqueued[i], device_end[i-1]) + d[i]
    wall             = max(device_end[-1], host_enqueued[-1]) + sync

Where the host is the bottleneck it shows up as device idle time. Every array is ``[ops, configs]``, so one pass
simulates many (device, batch) configurations at once (``predict_many``). A CPU has one timeline: the thread that
dispatches an op also runs it, so nothing overlaps (:func:`serial`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: CUDA's launch queue holds about this many kernels before a launch blocks the host (a driver detail, ~1024).
QUEUE_DEPTH = 1024


@dataclass(frozen=True)
class Timeline:
    """Seconds per config: the device's busy time, the host's dispatch time, and the step's wall time."""

    device_s: np.ndarray
    host_s: np.ndarray
    wall_s: np.ndarray

    @property
    def device_idle_share(self) -> np.ndarray:
        """The share of the wall time the device waits for the host (0 when it is never starved)."""
        return np.clip(1.0 - self.device_s / np.maximum(self.wall_s, 1e-30), 0.0, 1.0)


def _as2d(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    return a[:, None] if a.ndim == 1 else a


def overlapped(
    host_s: np.ndarray, device_s: np.ndarray, *, sync_s: float = 0.0, queue_depth: int = QUEUE_DEPTH
) -> Timeline:
    """Simulate an eager step on an accelerator: host and device overlap, as above."""
    h, d = _as2d(host_s), _as2d(device_s)
    if h.shape != d.shape:
        raise ValueError(f"host {h.shape} and device {d.shape} arrays differ")
    n, configs = h.shape
    host_t = np.zeros(configs)
    dev_end = np.zeros(configs)
    ends = np.zeros((n, configs))
    for i in range(n):
        host_t = host_t + h[i]
        if i >= queue_depth:
            host_t = np.maximum(host_t, ends[i - queue_depth])
        dev_end = np.maximum(host_t, dev_end) + d[i]
        ends[i] = dev_end
    wall = np.maximum(dev_end, host_t) + sync_s
    return Timeline(device_s=d.sum(axis=0), host_s=h.sum(axis=0), wall_s=wall)


def serial(host_s: np.ndarray, device_s: np.ndarray) -> Timeline:
    """A CPU step: one thread dispatches and runs each op in turn, so the times add up."""
    h, d = _as2d(host_s), _as2d(device_s)
    return Timeline(device_s=d.sum(axis=0), host_s=h.sum(axis=0), wall_s=h.sum(axis=0) + d.sum(axis=0))


def graph_replay(device_s: np.ndarray, *, launch_s: float, node_gap_s: float, kernels: np.ndarray) -> Timeline:
    """A CUDA-graph replay: one host launch for the whole step; the device runs the kernels back to back with a
    small gap per graph node (no host in between)."""
    d = _as2d(device_s)
    dev = d.sum(axis=0) + node_gap_s * np.asarray(kernels, dtype=float)
    return Timeline(device_s=d.sum(axis=0), host_s=np.full(d.shape[1], launch_s), wall_s=launch_s + dev)
