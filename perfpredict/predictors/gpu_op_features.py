"""What the GPU device-time model knows of one op on one GPU: a feature vector, on one basis for every GPU.

The basis is the datasheet (:func:`datasheet_basis`): every GPU's bound is read at its datasheet peaks and
bandwidth, so that the learned efficiency, not which GPU happened to be measured, ranks the GPUs. A roofline run's
measured ceilings describe one machine's sustained rates and stay in the roofline plot; the model learns the
sustained share itself, from op rows of that kind of GPU.

Features of the op:
- its kind and dtype class, whether it runs on tensor cores (and as TF32), FLOPs, bytes, arithmetic intensity, the
  roofline bound and which side of the ridge point it sits on;
- for GEMM-like ops (matmul, attention, convolution as an implicit GEMM): batch, M, N and K, the padding of a
  64/128/256 tiling (tile quantisation) and the tiles per wave of SMs (wave quantisation), and 8-alignment;
- for the others: rows and columns (a norm's or softmax's reduction length), elements per SM, bytes against L2.

Features of the GPU: the peak of the op's unit and dtype, bandwidth, SMs, clock, L2, compute capability, FP32
lanes per SM, board power and power per peak TFLOP (the 70 W cards run far below boost under load).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from perfpredict.core import op_kinds, ops
from perfpredict.core.units import MIB
from perfpredict.predictors.op_efficiency import OpShape

KINDS = (
    ops.MATMUL,
    ops.CONV,
    ops.ATTENTION,
    ops.ELEMENTWISE,
    ops.NORM,
    ops.SOFTMAX,
    ops.REDUCTION,
    ops.EMBEDDING,
    ops.POOLING,
    ops.COPY,
    "other",
)
GEMM_KINDS = frozenset({ops.MATMUL, ops.CONV, ops.ATTENTION})
DTYPE_CLASSES = ("float32", "half", "float8", "int", "other")
TILES = (64, 128, 256)
FEATURE_NAMES = (
    *(f"kind_{k}" for k in KINDS),
    *(f"dtype_{d}" for d in DTYPE_CLASSES),
    "tensor_core",
    "tf32",
    "log_flops",
    "log_bytes",
    "log_intensity",
    "log_bound_s",
    "compute_bound",
    "log_intensity_over_ridge",
    "log2_batch",
    "log2_m",
    "log2_n",
    "log2_k",
    *(f"{f}_{t}" for t in TILES for f in ("pad_eff", "waves", "wave_eff")),
    "aligned8",
    "weight_operand",
    "log2_groups",
    "log2_rows",
    "log2_cols",
    "log_elems_per_sm",
    "log_bytes_over_l2",
    "log_rate",
    "log_bandwidth",
    "sm_count",
    "clock_ghz",
    "log2_l2_mib",
    "compute_capability",
    "fp32_lanes_per_sm",
    "tdp_w",
    "w_per_fp32_tflop",
)


def datasheet_basis(device: Any) -> Any:
    """``device`` as its datasheet describes it: measured ceilings (a roofline run) replaced by the catalog's
    datasheet figures, so every GPU's bound is on one basis. A MIG slice keeps its slice of the datasheet."""
    if not getattr(device, "measured", None):
        return device
    from perfpredict.hardware.devices import datasheet_device

    return datasheet_device(device)


def dtype_class(dtype: str) -> str:
    if dtype == "float32" or dtype == "float64":
        return "float32"
    if dtype in ("float16", "bfloat16"):
        return "half"
    if dtype.startswith("float8"):
        return "float8"
    return "int" if dtype.startswith(("int", "uint", "bool")) else "other"


@dataclass(frozen=True)
class Unit:
    """Where an op's FLOPs run: the peak key it is bound by, and whether that is a tensor core (as TF32)."""

    tensor_core: bool
    tf32: bool


def unit_of(op: OpShape, device: Any, config: Any) -> Unit:
    """The unit ``op`` runs on under ``config``'s TF32 switches (a RunConfig's ``tf32`` and ``conv_tf32``), as
    :func:`perfpredict.core.op_kinds.attainable_rate` decides it for every caller: a tensor core only where the GPU
    has one for the dtype (a V100 has no TF32, a T4 no bf16), TF32 for float32."""
    _, key = op_kinds.attainable_rate(
        op.kind, op.dtype, device, tf32=config.tf32, conv_tf32=config.conv_tf32, integers_as_float32=True
    )
    used = key.endswith("_tensor")
    return Unit(used, used and op_kinds.compute_dtype(op.dtype) == "float32")


def rate(op: OpShape, device: Any, unit: Unit) -> float:
    return max(device.peak_flops(op_kinds.compute_dtype(op.dtype), unit.tensor_core)[0], 1.0)


def bound_s(op: OpShape, device: Any, unit: Unit) -> tuple[float, float, float]:
    """(roofline bound, compute time, memory time) in seconds, at ``device``'s figures."""
    compute = op.flops / rate(op, device, unit)
    memory = op.bytes / max(device.memory_bandwidth_bytes_per_s, 1.0)
    return max(compute, memory, 1e-9), compute, memory


@dataclass(frozen=True)
class Gemm:
    """An op as one (batched) GEMM: ``batch`` independent [M, K] x [K, N] products."""

    batch: float
    m: float
    n: float
    k: float
    weight: bool = False  # the second operand is a 2-D weight (linear, addmm, x @ W): the "TN" layout of cuBLAS


def gemm_of(op: OpShape) -> Gemm | None:
    """The GEMM a matmul, attention or convolution runs (None for other kinds). K comes from the FLOPs
    (2·batch·M·N·K), so every spelling of a matmul (linear, addmm, bmm, matmul) gives the same dims."""
    if op.kind not in GEMM_KINDS or not op.out_shape or op.flops <= 0:
        return None
    out = [max(int(d), 1) for d in op.out_shape]
    numel = math.prod(out)
    if op.kind == ops.CONV and len(out) >= 3:
        n = out[1]  # output channels; M runs over batch and output pixels
        return Gemm(1.0, numel / n, float(n), op.flops / (2.0 * numel))
    if op.kind == ops.ATTENTION and len(out) >= 3:
        # NB: attention as its score GEMM per (batch, head): [Sq, d] x [d, Sk]; Sk from the FLOPs (4·b·h·Sq·Sk·d)
        batch, sq, d = math.prod(out[:-2]), out[-2], out[-1]
        return Gemm(float(batch), float(sq), op.flops / (4.0 * numel), float(d))
    n = out[-1]
    batched = len(op.in_shapes) >= 2 and all(len(s) >= 3 for s in op.in_shapes[:2])
    batch = math.prod(out[:-2]) if batched and len(out) >= 3 else 1
    weight = len(op.in_shapes) >= 2 and any(len(s) <= 2 for s in op.in_shapes[:2])
    return Gemm(float(batch), numel / (n * batch), float(n), op.flops / (2.0 * numel), weight)


def features(op: OpShape, device: Any, unit: Unit) -> list[float]:
    """One feature vector (FEATURE_NAMES order) of ``op`` on ``device`` (already on the datasheet basis)."""
    b, compute, memory = bound_s(op, device, unit)
    peak = rate(op, device, unit)
    bw = max(device.memory_bandwidth_bytes_per_s, 1.0)
    sms = max(int(device.sm_count or 1), 1)
    kind = op.kind if op.kind in KINDS else "other"
    intensity = (op.flops + 1.0) / (op.bytes + 1.0)
    out = [max(int(d), 1) for d in op.out_shape] or [1]
    numel = math.prod(out)
    gemm = gemm_of(op)
    return [
        *(float(kind == k) for k in KINDS),
        *(float(dtype_class(op.dtype) == d) for d in DTYPE_CLASSES),
        float(unit.tensor_core),
        float(unit.tf32),
        math.log10(op.flops + 1.0),
        math.log10(op.bytes + 1.0),
        math.log10(intensity),
        math.log10(b),
        float(compute >= memory),
        math.log10(intensity / (peak / bw)),
        *_gemm_features(gemm, sms),
        math.log2(max(op.groups, 1)),
        math.log2(numel / out[-1]),
        math.log2(out[-1]),
        math.log10(numel / sms),
        math.log10((op.bytes + 1.0) / max(float(device.l2_bytes or 0), 1.0)),
        *device_features(device, peak),
    ]


def _gemm_features(gemm: Gemm | None, sms: int) -> list[float]:
    if gemm is None:
        return [0.0] * (4 + 3 * len(TILES) + 2)
    values = [math.log2(gemm.batch), math.log2(max(gemm.m, 1)), math.log2(max(gemm.n, 1)), math.log2(max(gemm.k, 1))]
    for t in TILES:
        rows, cols = math.ceil(gemm.m / t), math.ceil(gemm.n / t)
        waves = gemm.batch * rows * cols / sms
        values += [gemm.m * gemm.n / (rows * t * cols * t), math.log2(waves), waves / math.ceil(waves)]
    aligned = all(abs(x - 8 * round(x / 8)) < 1e-6 for x in (gemm.m, gemm.n, gemm.k))
    return [*values, float(aligned), float(gemm.weight)]


def device_features(device: Any, peak: float) -> list[float]:
    """The GPU's part of the vector; ``peak`` is the rate of the op's unit and dtype."""
    sms = max(int(device.sm_count or 1), 1)
    clock_ghz = float(device.boost_clock_mhz or 1000.0) / 1e3
    fp32 = max(device.peak_flops("float32", False)[0], 1.0)
    cc = device.compute_capability or "0"
    return [
        math.log10(peak),
        math.log10(max(device.memory_bandwidth_bytes_per_s, 1.0)),
        float(sms),
        clock_ghz,
        math.log2(max(float(device.l2_bytes or 0) / MIB, 1 / 16)),
        float(cc) if cc.replace(".", "", 1).isdigit() else 0.0,
        fp32 / (sms * clock_ghz * 1e9 * 2),
        float(device.tdp_w),
        float(device.tdp_w) / (fp32 / 1e12),
    ]
