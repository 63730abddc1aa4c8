"""The CPU op model: each op's time on this machine, fitted on the probes ``perfpredict calibrate-host`` timed here.

On a CPU the thread that dispatches an op also runs it (one timeline), so a step is the sum of its ops' host and
device parts (``timeline.serial``). The host part is the host profile's dispatch cost (``host_model``); the device
part is this model's. Each graph node falls into one probe class (:func:`op_class`, the classes of
:mod:`perfpredict.kernels.cpu_op_probes`), in float32 or half precision, and each class has one fit:

- **shaped** classes (GEMM, convolution, depthwise convolution, attention), whose shapes vary in more than their
  size: ``overhead + FLOPs / rate + bytes / bandwidth``, three non-negative figures fitted to the class's probes
  (least squares on the relative error). The bytes term carries what the FLOPs do not: a GEMM with one row streams
  its weights, and oneDNN reorders a convolution's NCHW tensors into its blocked layout and back on every call.
- **sized** classes (the memory-bound kinds): a curve of time against bytes moved, piecewise linear in log-log
  through the probes' medians (made non-decreasing), flat below the smallest probe and at the largest probe's rate
  beyond it. The curve carries the caches and the threading: below ATen's grain size an op runs on one thread,
  above it a parallel region starts (and on a busy host waits for a thread the scheduler parked).

The probes' times include each call's dispatch; the host profile's dispatch cost of the op's kind (timed in the same
calibration) is taken off, never more than 90%, so the host and device parts do not count it twice.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from perfpredict.core import ops
from perfpredict.kernels import cpu_op_probes as probes

CPU_OP_MODEL_VERSION = 1
HALF = ("bfloat16", "float16")
#: the probe classes' canonical op kinds (whose dispatch cost the host part already holds)
KIND_OF = {
    probes.GEMM: ops.MATMUL,
    probes.CONV: ops.CONV,
    probes.CONV_DW: ops.CONV,
    probes.CONV_1X1: ops.CONV,
    probes.ATTENTION: ops.ATTENTION,
    probes.ELTWISE: ops.ELEMENTWISE,
    probes.ELTWISE_MATH: ops.ELEMENTWISE,
    probes.LAYER_NORM: ops.NORM,
    probes.BATCH_NORM: ops.NORM,
    probes.SOFTMAX: ops.SOFTMAX,
    probes.REDUCTION: ops.REDUCTION,
    probes.POOLING: ops.POOLING,
    probes.COPY: ops.COPY,
    probes.EMBEDDING: ops.EMBEDDING,
    probes.CREATION: ops.CREATION,
}
_CLASS_OF_KIND = {
    ops.MATMUL: probes.GEMM,
    ops.ATTENTION: probes.ATTENTION,
    ops.SOFTMAX: probes.SOFTMAX,
    ops.REDUCTION: probes.REDUCTION,
    ops.POOLING: probes.POOLING,
    ops.COPY: probes.COPY,
    ops.EMBEDDING: probes.EMBEDDING,
    ops.CREATION: probes.CREATION,
    ops.LOSS: probes.SOFTMAX,  # cross-entropy: a log-softmax and a gather
}
#: elementwise ops that evaluate a transcendental function per element (ATen's vectorised exp, erf, tanh), as
#: a word of the op's name (``gelu_backward`` is one; ``hardtanh``, a clamp, is not)
MATH_TARGETS = frozenset(
    {"gelu", "silu", "sigmoid", "tanh", "erf", "exp", "log", "softplus", "pow", "mish", "elu", "sqrt", "rsqrt"}
)
#: the class whose fit stands in for a class with no samples: fused attention is two GEMMs around a softmax (op rows
#: time it as its parts), and every memory-bound class is at worst an elementwise pass
STAND_IN = {
    probes.ATTENTION: probes.GEMM,
    probes.CONV_DW: probes.CONV,
    probes.CONV_1X1: probes.CONV,
    **{cls: probes.ELTWISE for cls in probes.SIZED if cls != probes.ELTWISE},
}
MAX_DISPATCH_SHARE = 0.9  # never take more than this share of a probe's time off as dispatch


def op_class(kind: str, target: str = "", groups: int = 1, kernel: int = 3, stride: int = 1) -> str:
    """The probe class of a graph node: its canonical ``kind``, frontend ``target``, and for a convolution its
    groups, (largest) kernel side and stride."""
    name = target.lower()
    if kind == ops.CONV:
        return probes.conv_class(kernel, stride, groups)
    if kind == ops.NORM:
        return probes.BATCH_NORM if "batch_norm" in name else probes.LAYER_NORM
    if kind == ops.ELEMENTWISE:
        return probes.ELTWISE_MATH if MATH_TARGETS & set(name.strip("_").split("_")) else probes.ELTWISE
    return _CLASS_OF_KIND.get(kind, probes.ELTWISE)


def precision(dtype: str) -> str:
    return "half" if dtype in HALF else "float32"


@dataclass(frozen=True)
class ClassFit:
    """One class's fit: ``shaped`` (overhead_s, s_per_flop, s_per_byte) or ``sized`` (a log-log curve)."""

    form: str
    overhead_s: float = 0.0
    s_per_flop: float = 0.0
    s_per_byte: float = 0.0
    log_bytes: tuple[float, ...] = ()
    log_s: tuple[float, ...] = ()
    probes: int = 0
    fit_mape: float = 0.0  # its mean relative error on its own probes

    def seconds(self, flops: np.ndarray, moved: np.ndarray) -> np.ndarray:
        if self.form == "shaped":
            return self.overhead_s + flops * self.s_per_flop + moved * self.s_per_byte
        x = np.log(np.maximum(moved, 1.0))
        xs, ys = np.array(self.log_bytes), np.array(self.log_s)
        inside = np.interp(x, xs, ys)
        if len(xs) > 1:  # beyond the largest probe: that probe's rate (time linear in bytes)
            inside = np.where(x > xs[-1], ys[-1] + (x - xs[-1]), inside)
        return np.exp(inside)

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class CpuOpModel:
    """Per (class, precision) fits; ``threads`` is the torch thread count the probes ran with."""

    fits: Mapping[str, ClassFit]
    threads: int
    source: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def fit_for(self, cls: str, prec: str) -> ClassFit | None:
        """The fit of ``cls`` in ``prec``, else in float32, else its stand-in's (``STAND_IN``), else None."""
        while cls is not None:
            fit = self.fits.get(f"{cls}/{prec}") or self.fits.get(f"{cls}/float32")
            if fit is not None:
                return fit
            cls = STAND_IN.get(cls)
        return None

    def seconds(self, classes: Sequence[tuple[str, str]], flops: np.ndarray, moved: np.ndarray) -> np.ndarray:
        """Device seconds [op, config] for ops of the given (class, precision), FLOPs and bytes [op, config]."""
        out = np.zeros(np.shape(flops))
        for key in set(classes):
            rows = [i for i, c in enumerate(classes) if c == key]
            fit = self.fit_for(*key)
            if fit is not None:
                out[rows] = fit.seconds(flops[rows], moved[rows])
        return out

    def node_seconds(self, nodes: Sequence[Any], flops: np.ndarray, moved: np.ndarray) -> np.ndarray:
        """Device seconds [node, config] of graph nodes (views: 0)."""
        classes = [node_class(n) for n in nodes]
        out = self.seconds(classes, flops, moved)
        views = np.array([n.is_view for n in nodes], dtype=bool)
        out[views] = 0.0
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": CPU_OP_MODEL_VERSION,
            "threads": self.threads,
            "source": self.source,
            "details": dict(self.details),
            "fits": {k: f.as_dict() for k, f in sorted(self.fits.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CpuOpModel:
        fits = {
            k: ClassFit(**{n: (tuple(v) if isinstance(v, list) else v) for n, v in f.items()})
            for k, f in data["fits"].items()
        }
        return cls(fits, int(data["threads"]), str(data.get("source", "")), dict(data.get("details", {})))


def node_class(node: Any) -> tuple[str, str]:
    out = node.outputs[0].dtype if node.outputs else "float32"
    shapes = [tuple(t.shape) for t in (*node.inputs[:2], *node.outputs[:1])]
    kernel, stride = conv_geometry(*shapes) if node.op == ops.CONV and len(shapes) == 3 else (3, 1)
    return op_class(node.op, node.target, int(node.attrs.get("groups", 1) or 1), kernel, stride), precision(out)


def conv_geometry(x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...]) -> tuple[int, int]:
    """(largest kernel side, stride) of a convolution from its input, weight and output shapes (stride 1 where the
    output keeps the input's spatial size)."""
    kernel = max(w[2:], default=1)
    stride = 1 if tuple(x[2:]) == tuple(y[2:]) else 2
    return int(kernel), stride


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
    from perfpredict.predictors.op_efficiency import row_shape

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
        if cls not in probes.SHAPED:
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
