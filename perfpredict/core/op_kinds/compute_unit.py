"""Which unit an op's FLOPs run on, decided once: :func:`uses_tensor_cores` and :func:`attainable_rate`.

The predictors, the learned features and the roofline plot all ask here, so the plot cannot place an op on a
ceiling the report did not use. What differs between callers is only the TF32 policy they pass:

- the report (``RunConfig.tensor_cores``): PyTorch's defaults, float32 convolutions as TF32 (cuDNN's switch is on),
  float32 matmuls in full FP32 (the matmul switch is off), both changeable by the user;
- the learned features (``features.node_matrix``, ``op_efficiency.features``): ``tf32=False, conv_tf32=False``,
  the basis the shipped artifacts were trained on, where the flag marks half-precision tensor-core ops only.

NB: an integer op of a tensor-core kind (an int64 matmul: CPU graphs, index arithmetic) is read at two rates today.
The report reads it at the FP32 vector rate (the catalog has no integer rates); the learned op features read it at
float32's rate with its tensor cores (TF32), as the shipped artifacts were trained (``integers_as_float32``).
Retraining the artifacts with ``integers_as_float32=False`` would make them one.
"""

from __future__ import annotations

from typing import Any

from perfpredict.core import ops
from perfpredict.core.op_kinds.registry import lookup


def uses_tensor_cores(kind: str, dtype: str, gpu: bool, *, tf32: bool, conv_tf32: bool) -> bool:
    """Whether an op of ``kind`` with output ``dtype`` runs on tensor cores: on a GPU, for a tensor-core kind, always
    outside float32; in float32 as TF32 where the kind's switch allows it (``tf32`` for the matmul switch,
    ``conv_tf32`` for cuDNN's)."""
    entry = lookup(kind)
    if not gpu or not entry.tensor_cores:
        return False
    return dtype != "float32" or (conv_tf32 if entry.tf32_switch == "cudnn" else tf32)


def compute_dtype(dtype: str) -> str:
    """The dtype the learned features read an op's rate at: its own where floating, else float32."""
    return dtype if dtype in ops.FLOAT_DTYPES else "float32"


def attainable_rate(
    kind: str, dtype: str, device: Any, *, tf32: bool, conv_tf32: bool, integers_as_float32: bool = False
) -> tuple[float, str]:
    """The compute ceiling an op of ``kind`` in ``dtype`` can attain on ``device``, in FLOP/s, and its peak key
    (``"bf16_tensor"``, ``"fp32"``, ...): the peak of the unit it runs on (:func:`uses_tensor_cores`), falling back
    to a vector unit where the device has no tensor core for the dtype. The roofline's attainable performance of
    one op is ``min(this, intensity x bandwidth)``; the analytical predictor scales it by an achieved fraction
    where the ceiling is not measured. ``integers_as_float32``: the learned features' reading of an integer op
    (see the module's NB)."""
    tensor = uses_tensor_cores(kind, dtype, device.kind == "gpu", tf32=tf32, conv_tf32=conv_tf32)
    return device.peak_flops(compute_dtype(dtype) if integers_as_float32 else dtype, tensor)
