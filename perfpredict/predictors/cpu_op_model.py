"""The CPU op model: each op's time on this machine, fitted on the probes ``perfpredict calibrate-host`` timed here
(the fitting: ``perfpredict.learning.cpu_op_model_fit``).

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfpredict.core import ops
from perfpredict.predictors import cpu_op_classes as classes

CPU_OP_MODEL_VERSION = 1
HALF = ("bfloat16", "float16")
#: the probe classes' canonical op kinds (whose dispatch cost the host part already holds)
KIND_OF = {
    classes.GEMM: ops.MATMUL,
    classes.CONV: ops.CONV,
    classes.CONV_DW: ops.CONV,
    classes.CONV_1X1: ops.CONV,
    classes.ATTENTION: ops.ATTENTION,
    classes.ELTWISE: ops.ELEMENTWISE,
    classes.ELTWISE_MATH: ops.ELEMENTWISE,
    classes.LAYER_NORM: ops.NORM,
    classes.BATCH_NORM: ops.NORM,
    classes.SOFTMAX: ops.SOFTMAX,
    classes.REDUCTION: ops.REDUCTION,
    classes.POOLING: ops.POOLING,
    classes.COPY: ops.COPY,
    classes.EMBEDDING: ops.EMBEDDING,
    classes.CREATION: ops.CREATION,
}
_CLASS_OF_KIND = {
    ops.MATMUL: classes.GEMM,
    ops.ATTENTION: classes.ATTENTION,
    ops.SOFTMAX: classes.SOFTMAX,
    ops.REDUCTION: classes.REDUCTION,
    ops.POOLING: classes.POOLING,
    ops.COPY: classes.COPY,
    ops.EMBEDDING: classes.EMBEDDING,
    ops.CREATION: classes.CREATION,
    ops.LOSS: classes.SOFTMAX,  # cross-entropy: a log-softmax and a gather
}
#: elementwise ops that evaluate a transcendental function per element (ATen's vectorised exp, erf, tanh), as
#: a word of the op's name (``gelu_backward`` is one; ``hardtanh``, a clamp, is not)
MATH_TARGETS = frozenset(
    {"gelu", "silu", "sigmoid", "tanh", "erf", "exp", "log", "softplus", "pow", "mish", "elu", "sqrt", "rsqrt"}
)
#: the class whose fit stands in for a class with no samples: fused attention is two GEMMs around a softmax (op rows
#: time it as its parts), and every memory-bound class is at worst an elementwise pass
STAND_IN = {
    classes.ATTENTION: classes.GEMM,
    classes.CONV_DW: classes.CONV,
    classes.CONV_1X1: classes.CONV,
    **{cls: classes.ELTWISE for cls in classes.SIZED if cls != classes.ELTWISE},
}
MAX_DISPATCH_SHARE = 0.9  # never take more than this share of a probe's time off as dispatch


def op_class(kind: str, target: str = "", groups: int = 1, kernel: int = 3, stride: int = 1) -> str:
    """The probe class of a graph node: its canonical ``kind``, frontend ``target``, and for a convolution its
    groups, (largest) kernel side and stride."""
    name = target.lower()
    if kind == ops.CONV:
        return classes.conv_class(kernel, stride, groups)
    if kind == ops.NORM:
        return classes.BATCH_NORM if "batch_norm" in name else classes.LAYER_NORM
    if kind == ops.ELEMENTWISE:
        return classes.ELTWISE_MATH if MATH_TARGETS & set(name.strip("_").split("_")) else classes.ELTWISE
    return _CLASS_OF_KIND.get(kind, classes.ELTWISE)


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
