"""Fitting the CPU op model (``predictors/cpu_op_model.py``) on timed ops: calibrate-host's probes or op rows.

Each (class, precision) with samples gets one fit: a **shaped** class ``overhead + FLOPs / rate + bytes /
bandwidth`` (three non-negative figures, least squares on the relative error), a **sized** class a non-decreasing
log-log curve of time against bytes (isotonic over size bins). A shaped class with too few half-precision probes
takes its float32 fit, scaled. Every sample has its kind's dispatch cost (the host profile's) taken off first.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfpredict.core import ops
from perfpredict.predictors import cpu_op_classes as classes
from perfpredict.predictors.cpu_op_model import (
    KIND_OF,
    MAX_DISPATCH_SHARE,
    ClassFit,
    CpuOpModel,
    conv_geometry,
    op_class,
    precision,
)


@dataclass(frozen=True)
class Sample:
    """One timed op (a probe, or an op row): its class, precision, FLOPs, bytes and device seconds."""

    cls: str
    prec: str
    flops: float
    bytes: float
    seconds: float


def device_samples(results: Iterable[Any], dispatch_us: Mapping[str, float]) -> list[Sample]:
    """Probe results as samples, each with its kind's dispatch cost taken off (at most MAX_DISPATCH_SHARE)."""
    out = []
    for r in results:
        taken = min(dispatch_us.get(KIND_OF[r.cls], 0.0) * 1e-6, MAX_DISPATCH_SHARE * r.seconds)
        out.append(Sample(r.cls, precision(r.dtype), float(r.flops), float(r.bytes), r.seconds - taken))
    return out


def op_row_samples(rows: Iterable[Mapping[str, Any]], dispatch_us: Mapping[str, float]) -> list[Sample]:
    """Op rows (``perfpredict collect --ops`` on a CPU) as samples: a fuller calibration of the host that measured
    them than calibrate-host's probes, each row's kind's dispatch cost taken off as for the probes."""
    from perfpredict.learning.op_row_shapes import row_shape

    out = []
    for row in rows:
        shape = row_shape(row)
        name = str(row["op"]).split("::")[-1].split(".")[0]
        seconds = float(row["device_ms"]) * 1e-3
        taken = min(dispatch_us.get(shape.kind, 0.0) * 1e-6, MAX_DISPATCH_SHARE * seconds)
        kernel, stride = (3, 1)
        if shape.kind == ops.CONV and len(shape.in_shapes) == 2 and name == "convolution":
            kernel, stride = conv_geometry(*shape.in_shapes, shape.out_shape)
        cls = op_class(shape.kind, name, shape.groups, kernel, stride)
        out.append(Sample(cls, precision(shape.dtype), shape.flops, shape.bytes, seconds - taken))
    return out


def fit(samples: Sequence[Sample], threads: int, source: str = "", details: Mapping[str, Any] | None = None):
    """A :class:`CpuOpModel` from timed samples: one fit per (class, precision) that has samples."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        if s.seconds > 0 and math.isfinite(s.seconds):
            groups.setdefault(f"{s.cls}/{s.prec}", []).append(s)
    fits = {}
    for key, group in sorted(groups.items(), key=lambda kv: kv[0].endswith("/half")):  # float32 first
        cls = key.split("/")[0]
        if cls not in classes.SHAPED:
            fits[key] = fit_sized(group)
        elif len(group) < MIN_SHAPED_PROBES and f"{cls}/float32" in fits:
            fits[key] = scaled_like(fits[f"{cls}/float32"], group)
        else:
            fits[key] = fit_shaped(group)
    return CpuOpModel(fits, threads, source, dict(details or {}))


#: fewer probes than this cannot fix a shaped fit's three figures: the class's float32 fit, scaled to them, stands in
MIN_SHAPED_PROBES = 4


def scaled_like(reference: ClassFit, group: Sequence[Sample]) -> ClassFit:
    """``reference`` (the class's float32 fit) times the median ratio of ``group``'s times to its prediction: a
    bfloat16 GEMM probed at a few shapes follows the float32 shape dependence at its own speed."""
    t = np.array([s.seconds for s in group])
    pred = reference.seconds(np.array([s.flops for s in group]), np.array([s.bytes for s in group]))
    k = float(np.median(t / pred))
    return ClassFit(
        "shaped",
        overhead_s=reference.overhead_s * k,
        s_per_flop=reference.s_per_flop * k,
        s_per_byte=reference.s_per_byte * k,
        probes=len(group),
        fit_mape=round(float(np.mean(np.abs(pred * k - t) / t)), 4),
    )


def fit_shaped(group: Sequence[Sample]) -> ClassFit:
    """``overhead + flops * a + bytes * b`` with every figure >= 0, least squares on the relative error."""
    t = np.array([s.seconds for s in group])
    design = np.column_stack([np.ones(len(group)), [s.flops for s in group], [s.bytes for s in group]]) / t[:, None]
    scale = np.maximum(design.max(axis=0), 1e-30)  # columns of 1, ~1e9 and ~1e6: solve on a common scale
    coef = nonnegative_lstsq(design / scale, np.ones(len(group))) / scale
    pred = (design * t[:, None]) @ coef
    return ClassFit(
        "shaped",
        overhead_s=float(coef[0]),
        s_per_flop=float(coef[1]),
        s_per_byte=float(coef[2]),
        probes=len(group),
        fit_mape=round(float(np.mean(np.abs(pred - t) / t)), 4),
    )


def nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ||a x - b|| over x >= 0, by trying every support set (three unknowns: seven least-squares solves)."""
    n = a.shape[1]
    best, best_err = np.zeros(n), float(np.sum(b**2))
    for size in range(1, n + 1):
        for cols in itertools.combinations(range(n), size):
            x_sub, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if (x_sub < 0).any():
                continue
            x = np.zeros(n)
            x[list(cols)] = x_sub
            err = float(np.sum((a @ x - b) ** 2))
            if err < best_err:
                best, best_err = x, err
    return best


def fit_sized(group: Sequence[Sample]) -> ClassFit:
    """A non-decreasing log-log curve of seconds against bytes: the median time per size bin (a factor of
    ``SIZE_BIN`` wide; a probe set has one size per bin, op rows many), made monotone by pooling adjacent bins
    that disagree (isotonic regression), so one slow outlier cannot lift every larger size."""
    bins: dict[int, list[Sample]] = {}
    for s in group:
        bins.setdefault(int(math.floor(math.log(max(s.bytes, 1.0)) / math.log(SIZE_BIN))), []).append(s)
    keys = sorted(bins)
    xs = [float(np.median([math.log(max(s.bytes, 1.0)) for s in bins[k]])) for k in keys]
    ys = isotonic(
        [float(np.median([math.log(s.seconds) for s in bins[k]])) for k in keys], [len(bins[k]) for k in keys]
    )
    curve = ClassFit("sized", log_bytes=tuple(xs), log_s=tuple(ys), probes=len(group))
    t = np.array([s.seconds for s in group])
    pred = curve.seconds(np.zeros(len(group)), np.array([s.bytes for s in group]))
    return replace(curve, fit_mape=round(float(np.mean(np.abs(pred - t) / t)), 4))


SIZE_BIN = 2.0


def isotonic(values: Sequence[float], weights: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in weighted least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(values, weights):
        blocks.append([v, float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, n1), (m2, w2, n2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return [m for m, _, n in blocks for _ in range(n)]
