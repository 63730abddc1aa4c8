"""Per-op device time = roofline bound / efficiency, the efficiency learned from op rows (NeuSight's idea).

The bound is physics: ``max(FLOPs / peak rate, bytes / bandwidth)`` at the device's ceilings (measured where a
roofline run exists, else the datasheet), with the rate of the op's dtype and unit (tensor cores for matmul, conv
and attention in half precision). On a GPU nothing is predicted faster than it, but for an op that fits in L2
(which streams faster than HBM: ``L2_SPEEDUP``); on a CPU, whose catalog ceilings are estimates, the ratio is
learned as measured (``CPU_MAX_RATIO``). The efficiency says how much of that bound
an op of this kind and shape reaches on this device. It is learned (XGBoost, on ``log(efficiency)``) from the op
rows of ``perfpredict collect --ops`` (:mod:`perfpredict.profiling.collect_ops`), with the device's ceilings among
the features, so that a device with no op rows is predicted from its ceilings alone.

Features (:func:`features`): the op kind, the dtype class, FLOPs, bytes, arithmetic intensity and the bound (logs),
the output's size and its largest dimensions' remainders mod 64 and 128 (tile quantisation), the tiles per SM
wave of a 128 x 128 tiling, and the device's rate, bandwidth, SM count and L2 size.

On a CPU an op row's time includes the op's own dispatch (there is one timeline): the device part learned here is
the row's time less the host profile's dispatch cost for its kind (at least a tenth of the row's time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfpredict.core import op_kinds, ops

KINDS = op_kinds.BUILTIN_KINDS  # the trained one-hot columns
DTYPE_CLASSES = ("float32", "bfloat16", "float16", "int", "other")
FEATURE_NAMES = (
    *(f"kind_{k}" for k in KINDS),
    *(f"dtype_{d}" for d in DTYPE_CLASSES),
    "log_flops",
    "log_bytes",
    "log_intensity",
    "log_bound_s",
    "compute_bound",
    "log_out_numel",
    "mod64",
    "mod128",
    "waves_frac",
    "log_waves",
    "log_rate",
    "log_bandwidth",
    "sm_count",
    "log_l2",
    *(f"in{t}_d{d}" for t in (0, 1) for d in range(4)),
    "log_groups",
)
EFFICIENCY_FLOOR = 1e-4
#: An op whose bytes fit in a GPU's L2 can stream faster than HBM (about 3x on Ampere and Hopper), so its
#: "efficiency" against the HBM bound may exceed 1 up to this; no other GPU op is predicted faster than its bound.
L2_SPEEDUP = 3.0
#: The catalog's CPU ceilings are estimates (datasheet-free: cores x clock x vector width, 20 GB/s a channel), and
#: a CPU op runs from caches many times faster than that DRAM figure: measured CPU ops beat the estimated bound by
#: up to 37x (benchmarks/results/op_efficiency-*.md), so on a CPU the ratio is learned as it is, up to this.
CPU_MAX_RATIO = 100.0


@dataclass(frozen=True)
class OpShape:
    """What the efficiency model needs of one op, from an op row or an OpNode alike."""

    kind: str
    dtype: str
    flops: float
    bytes: float
    out_shape: tuple[int, ...]
    in_shapes: tuple[tuple[int, ...], ...] = ()  # the first two tensor inputs (a conv's input and weight)
    groups: int = 1  # a convolution's groups (depthwise: = channels)


def dtype_class(dtype: str) -> str:
    if dtype in ("float32", "bfloat16", "float16"):
        return dtype
    return "int" if dtype.startswith(("int", "uint", "bool")) else "other"


def bound_s(op: OpShape, device: Any, tf32: bool = False) -> tuple[float, float, float]:
    """(roofline bound, compute time, memory time) in seconds at the device's ceilings."""
    rate, _ = op_kinds.attainable_rate(op.kind, op.dtype, device, tf32=tf32, conv_tf32=tf32, integers_as_float32=True)
    compute = op.flops / max(rate, 1.0)
    memory = op.bytes / max(device.memory_bandwidth_bytes_per_s, 1.0)
    return max(compute, memory, 1e-9), compute, memory


def max_efficiency(op: OpShape, device: Any) -> float:
    """The largest bound / time an op may reach on ``device`` (see L2_SPEEDUP and CPU_MAX_RATIO)."""
    if device.kind != "gpu":
        return CPU_MAX_RATIO
    return L2_SPEEDUP if op.bytes <= float(getattr(device, "l2_bytes", 0) or 0) else 1.0


def features(op: OpShape, device: Any) -> list[float]:
    """One feature vector (FEATURE_NAMES order)."""
    b, compute, memory = bound_s(op, device)
    # the trained basis: float32 never on tensor cores (see op_kinds.compute_unit)
    rate, _ = op_kinds.attainable_rate(op.kind, op.dtype, device, tf32=False, conv_tf32=False, integers_as_float32=True)
    dims = sorted(op.out_shape, reverse=True)[:2] or [1]
    out_numel = math.prod(op.out_shape) if op.out_shape else 1
    rows, cols = (op.out_shape[-2] if len(op.out_shape) > 1 else 1), (op.out_shape[-1] if op.out_shape else 1)
    tiles = math.ceil(max(rows, 1) / 128) * math.ceil(max(cols, 1) / 128) * (out_numel // max(rows * cols, 1) or 1)
    sms = max(int(getattr(device, "sm_count", 1) or 1), 1)
    waves = tiles / sms
    kind = op.kind if op.kind in KINDS else ops.UNKNOWN
    return [
        *(float(kind == k) for k in KINDS),
        *(float(dtype_class(op.dtype) == d) for d in DTYPE_CLASSES),
        math.log10(op.flops + 1),
        math.log10(op.bytes + 1),
        math.log10((op.flops + 1) / (op.bytes + 1)),
        math.log10(b),
        float(compute >= memory),
        math.log10(out_numel + 1),
        float(dims[0] % 64),
        float(dims[0] % 128),
        waves - math.floor(waves),
        math.log10(waves + 1e-3),
        math.log10(rate),
        math.log10(device.memory_bandwidth_bytes_per_s),
        float(sms),
        math.log10(float(getattr(device, "l2_bytes", 0) or 0) + 1),
        *_dims(op.in_shapes[0] if op.in_shapes else ()),
        *_dims(op.in_shapes[1] if len(op.in_shapes) > 1 else ()),
        math.log2(max(op.groups, 1)),
    ]


def _dims(shape: tuple[int, ...]) -> list[float]:
    """log2 of the last four dimensions, right-aligned (0 where the tensor has fewer)."""
    tail = list(shape[-4:])
    return [0.0] * (4 - len(tail)) + [math.log2(max(int(d), 1)) for d in tail]


#: the trees' settings (``perfpredict.learning.op_efficiency_fit`` fits them)
PARAMS = {
    "n_estimators": 400,
    "max_depth": 7,
    "learning_rate": 0.05,
    "subsample": 0.9,
    "colsample_bytree": 0.9,
    "min_child_weight": 2,
    "n_jobs": 2,
    "random_state": 0,
}


class EfficiencyModel:
    """``log(efficiency)`` from :func:`features`, by gradient-boosted trees (a fitted ``XGBRegressor``);
    predictions clipped to [EFFICIENCY_FLOOR, max_efficiency]."""

    def __init__(self, booster: Any = None, params: dict[str, Any] | None = None) -> None:
        self.booster = booster
        self.params = params or dict(PARAMS)

    def efficiency(self, X: np.ndarray, cap: np.ndarray | float = 1.0) -> np.ndarray:
        return np.clip(np.exp(self.booster.predict(np.asarray(X, dtype=float))), EFFICIENCY_FLOOR, cap)

    def device_s(self, ops_: Sequence[OpShape], device: Any) -> np.ndarray:
        """Predicted device seconds per op: bound / efficiency, never under bound / max_efficiency."""
        if not ops_:
            return np.zeros(0)
        X = np.array([features(o, device) for o in ops_])
        bounds = np.array([bound_s(o, device)[0] for o in ops_])
        return bounds / self.efficiency(X, np.array([max_efficiency(o, device) for o in ops_]))


def node_shape(
    node: Any, flops: float | None = None, moved: float | None = None, dims: tuple[tuple[int, ...], ...] | None = None
) -> OpShape:
    """An OpGraph node's OpShape; ``flops``, ``moved`` and ``dims`` (``cost_arrays.tensor_dims``) replace the
    node's own figures to read it at another batch (``CostArrays.shapes_at``)."""
    from perfpredict.predictors.cost_arrays import tensor_dims

    out = node.outputs[0] if node.outputs else None
    dims = dims if dims is not None else tensor_dims(node)
    return OpShape(
        node.op,
        out.dtype if out is not None else "float32",
        float(node.flops if flops is None else flops),
        float(node.bytes_read + node.bytes_written if moved is None else moved),
        dims[0],
        dims[1:],
        int(node.attrs.get("groups", 1) or 1),
    )


ARTIFACTS = __import__("pathlib").Path(__file__).resolve().parent / "artifacts"


def load_model(device: Any) -> EfficiencyModel | None:
    """The shipped efficiency model for ``device``'s kind (``artifacts/op-efficiency-*``, trained on op rows of a
    device of the same kind; its ceilings are features, so it transfers), or None: no artifact for this kind, or
    xgboost is not installed (then the two-timeline model keeps the analytical fixed fractions)."""
    import json

    for folder in sorted(ARTIFACTS.glob("op-efficiency-*")):
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except (OSError, ValueError):
            continue
        if manifest.get("device_kind") != device.kind or manifest.get("features") != list(FEATURE_NAMES):
            continue
        try:
            from xgboost import XGBRegressor
        except ImportError:
            return None
        booster = XGBRegressor()
        booster.load_model(str(folder / "efficiency.ubj"))
        model = EfficiencyModel(booster)
        model.source = f"{folder.name} ({manifest.get('rows')} op rows of {manifest.get('rows_device')})"
        return model
    return None
