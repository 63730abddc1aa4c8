"""Build the measured collective curves (``measured_collectives``) from Vidur's NCCL timings, and score them.

A curve is one system (GPU and fabric), collective, number of ranks and ranks per node. Its **anchors** are the
octave medians of its rows (sizes in [2^k, 2^(k+1)), from 8 KiB up: each row is itself Vidur's median of 3 repeats
of a median over 11 kernels, and rows of neighbouring sizes scatter by tens of percent below 1 MB, so one row is no
reference), made non-decreasing in size (a larger message never takes less time: the pool-adjacent-violators
average in log time). Between anchors the time is a monotone cubic in log size and log time. Beyond them it
follows the model's two asymptotes: below the first anchor a message costs the **latency term** (the first
anchor's time: NCCL runs a small message on few channels, and Vidur's kernel times include a rank's wait for its
peers, so the time stops falling), and above the last one it grows by ``factor x bytes / busbw``, with ``busbw``
the **bus bandwidth** of the last two anchors and ``factor`` nccl-tests' algorithm factor (2(n-1)/n for an
all-reduce, 1 for a send/recv).

Scoring (``held_out``): each decade of sizes (16-160 KB, 160 KB-1.6 MB, 1.6-16 MB, 16-160 MB, 160 MB up), or each
octave, is left out in turn, the curve is rebuilt from the other octaves, and the held-out octaves are predicted;
every octave from 16 KB to 256 MB is predicted once by a curve that never saw it, against its raw octave median. The
h100_pairwise_nvlink send/recv (a byte copy of the A100 pairs' file) is never used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FIT_FROM_BYTES = 8 * 1024  # the first octaves hold one row each: 2 KiB alone is noise
SCORE_FROM_BYTES = 16_000  # the range: 16 KB to 256 MB
SCORE_TO_BYTES = 256e6
DECADE_EDGES = (16e3, 160e3, 1.6e6, 16e6, 160e6, 1.6e9)


def factor(kind: str, ranks: int) -> float:
    from perfpredict.parallel.collectives import bus_factor

    return bus_factor(kind, ranks)


def octaves(sizes: np.ndarray, seconds: np.ndarray, start: float = FIT_FROM_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """(median size, median seconds) of the rows in each octave [2^k, 2^(k+1)) from ``start`` up."""
    keep = sizes >= start
    sizes, seconds = sizes[keep], seconds[keep]
    octave = np.floor(np.log2(sizes)).astype(int)
    out_s, out_t = [], []
    for k in np.unique(octave):
        sel = octave == k
        out_s.append(float(np.median(sizes[sel])))
        out_t.append(float(np.median(seconds[sel])))
    return np.array(out_s), np.array(out_t)


def non_decreasing(values: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing sequence (pool adjacent violators, equal weights)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return np.concatenate([np.full(int(n), m) for m, n in blocks])


def anchors(sizes: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A curve's anchors: octave medians, non-decreasing in log time."""
    s, t = octaves(sizes, seconds)
    return s, np.exp(non_decreasing(np.log(t)))


def curves(frame: Any) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """Each curve's rows, (system, collective, ranks, ranks per node) -> (sizes, median seconds); duplicates out."""
    frame = frame[frame["duplicate_of"] == ""]
    out = {}
    for key, g in frame.groupby(["system", "collective", "ranks", "ranks_per_node"]):
        out[tuple(key)] = (g["size_bytes"].to_numpy(float), g["median_ms"].to_numpy(float) * 1e-3)
    return out


def held_out(sizes: np.ndarray, seconds: np.ndarray, scheme: str = "decade") -> list[dict]:
    """Every scored octave's measured median, its prediction by a curve built without it (``scheme`` "decade":
    without the decade of sizes it is in; "octave": without it alone), and the curve from every octave (in
    sample)."""
    from perfpredict.parallel.measured_collectives import Curve

    s, t = octaves(sizes, seconds)
    whole = Curve.of(*anchors(sizes, seconds))
    group = np.digitize(s, DECADE_EDGES) if scheme == "decade" else np.arange(len(s))
    row_octave = np.floor(np.log2(sizes))
    out = []
    for g in np.unique(group):
        held = group == g
        if held.all() or not any(SCORE_FROM_BYTES <= x <= SCORE_TO_BYTES for x in s[held]):
            continue
        kept = ~np.isin(row_octave, np.floor(np.log2(s[held])))
        curve = Curve.of(*anchors(sizes[kept], seconds[kept]))
        for size, measured in zip(s[held], t[held]):
            if SCORE_FROM_BYTES <= size <= SCORE_TO_BYTES:
                out.append({"size_bytes": float(size), "measured_s": float(measured),
                            "held_out_s": curve.seconds(size), "in_sample_s": whole.seconds(size)})  # fmt: skip
    return out


def build_all(frame: Any) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """Every curve from all its octaves: {system: {collective: {"RANKSxPER_NODE": anchors}}}."""
    out: dict = {}
    for (system, kind, ranks, per_node), (s, t) in sorted(curves(frame).items()):
        a_s, a_t = anchors(s, t)
        out.setdefault(system, {}).setdefault(kind, {})[f"{ranks}x{per_node}"] = {
            "size_bytes": [int(round(x)) for x in a_s],
            "time_us": [round(float(x) * 1e6, 2) for x in a_t],
        }
    return out


def write_data(frame: Any, path: Any, source: str) -> None:
    """Rebuild the curves of ``measured_collectives.json`` at ``path`` (its device mapping and notes are kept)."""
    import json
    import re
    from pathlib import Path

    path = Path(path)
    data = json.loads(path.read_text())
    data["source"] = source
    data["curves"] = build_all(frame)
    text = json.dumps(data, indent=1)
    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
    path.write_text(text + "\n")
