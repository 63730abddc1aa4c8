"""The op classes of the CPU op model (``cpu_op_model.py``): every graph node maps onto one, and ``calibrate-host``
times one probe family per class (``kernels/cpu_op_probes.py``). They live here, below both, so the model that
answers never imports the probes that measure.
"""

from __future__ import annotations

#: op classes the probes time; ``cpu_op_model.op_class`` maps every graph node onto one of them
GEMM, CONV, CONV_1X1, CONV_DW, ATTENTION = "gemm", "conv", "conv_1x1", "conv_dw", "attention"
ELTWISE, ELTWISE_MATH, LAYER_NORM, BATCH_NORM = "eltwise", "eltwise_math", "layer_norm", "batch_norm"
SOFTMAX, REDUCTION, POOLING, COPY, EMBEDDING, CREATION = (
    "softmax",
    "reduction",
    "pooling",
    "copy",
    "embedding",
    "creation",
)
#: classes whose time is fitted as overhead + FLOPs / rate + bytes / bandwidth (their shapes vary in more than size)
SHAPED = (GEMM, CONV, CONV_1X1, CONV_DW, ATTENTION)
#: classes whose time is a curve in the bytes they move (one shape family each, at several sizes)
SIZED = (ELTWISE, ELTWISE_MATH, LAYER_NORM, BATCH_NORM, SOFTMAX, REDUCTION, POOLING, COPY, EMBEDDING, CREATION)
CLASSES = SHAPED + SIZED


def conv_class(kernel: int, stride: int, groups: int) -> str:
    """Depthwise (grouped), pointwise (1x1, stride 1: a GEMM over the pixels, which ATen runs outside oneDNN on one
    thread, ``use_mkldnn`` in Convolution.cpp), or a dense spatial convolution."""
    if groups > 1:
        return CONV_DW
    return CONV_1X1 if kernel == 1 and stride == 1 else CONV
