"""Weight formats for serving: bytes per weight, and the work the step does to use them.

The format applies to the weights of the transformer's linear layers (as bitsandbytes, torchao and vLLM quantize
them; embeddings, norms and the LM head stay in the compute dtype). NB: a MoE model's expert weights (grouped GEMMs)
stay in the compute dtype here; the report says so. Two routes, as the common libraries take them:

- **native**: the GEMM reads the format as it is (bf16/fp16; fp8 on a GPU with FP8 tensor cores, Hopper and later):
  the matmul reads ``bytes_per_weight`` per weight. Its FLOPs are costed at the compute dtype's rate (a decode step
  is bound by the bytes; a prefill in fp8 would be up to 2x faster than this says).
- **weight-only**: the weights are stored compressed and widened to the compute dtype on the fly (int8, nf4, and fp8
  before Hopper). A decode step (a few tokens per sequence) runs a fused kernel that reads the compressed weights
  once (bitsandbytes' 4-bit gemv, Marlin); a prefill (many tokens) dequantizes each weight into a compute-dtype
  copy first (read compressed, write and read it back in the compute dtype: ``prefill_extra_bytes``).

| format | bytes per weight | scales | route |
|---|---:|---|---|
| fp32 | 4 | - | native |
| bf16, fp16 | 2 | - | native |
| int8 | 1 | one float per output row | weight-only |
| fp8 | 1 | one float per tensor | native on FP8 tensor cores, else weight-only |
| nf4 | 0.5 | one float32 absmax per 64 weights | weight-only (bitsandbytes; CUDA GPUs only) |
| int4 | 0.5 | an fp16 scale and a 4-bit zero per 128 weights | weight-only (AWQ/GPTQ checkpoints, Marlin-style kernels; CUDA GPUs only) |
| int4-g32 | 0.5 | a 16-bit scale and zero per 32 weights | weight-only (gpt-fast's int4; CUDA GPUs only) |
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from perfpredict import ops
from perfpredict.errors import InvalidInputError
from perfpredict.graph import OpGraph


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bytes_per_weight: float  # scales included (nf4: 0.5 + 4/64)
    compute_dtype: str | None  # the dtype a native GEMM computes in; None: the model's own
    gpu_only: bool = False


FORMATS = {
    "fp32": WeightFormat("fp32", 4.0, "float32"),
    "bf16": WeightFormat("bf16", 2.0, "bfloat16"),
    "fp16": WeightFormat("fp16", 2.0, "float16"),
    "int8": WeightFormat("int8", 1.0, None),
    "fp8": WeightFormat("fp8", 1.0, "float8_e4m3fn"),
    "nf4": WeightFormat("nf4", 0.5 + 4 / 64, None, gpu_only=True),
    "int4": WeightFormat("int4", 0.5 + 2.5 / 128, None, gpu_only=True),
    "int4-g32": WeightFormat("int4-g32", 0.5 + 4 / 32, None, gpu_only=True),
}


def route(fmt: WeightFormat, device: Any) -> str:
    """ "native" or "weight-only" for this format on this device."""
    if fmt.name in ("fp32", "bf16", "fp16"):
        return "native"
    if fmt.name == "fp8" and device.kind == "gpu" and device.peak_flops_per_s.get("fp8_tensor"):
        return "native"
    return "weight-only"


def check(fmt_name: str, device: Any) -> WeightFormat:
    """The format, or an error saying why it cannot run on ``device``."""
    if fmt_name not in FORMATS:
        raise InvalidInputError(f"weights {fmt_name!r} is not one of {', '.join(FORMATS)}")
    fmt = FORMATS[fmt_name]
    if fmt.gpu_only and device.kind != "gpu":
        raise InvalidInputError(
            f"--weights {fmt_name} needs a CUDA GPU (its 4-bit kernels are CUDA's); "
            f"{device.name} is a {device.kind}: use int8 or bf16"
        )
    if fmt.name == "bf16" and device.kind == "gpu" and not device.supports_dtype("bfloat16"):
        raise InvalidInputError(f"{device.name} has no bfloat16 hardware: use --weights fp16")
    return fmt


def quantized_linears(graph: OpGraph) -> list[int]:
    """The matmuls that read a weight of a transformer layer (not the embeddings or the LM head)."""
    from perfpredict.compiler_hooks.layer_replication import layer_of

    return [
        i
        for i, n in enumerate(graph.nodes)
        if n.op == ops.MATMUL and n.params > 0 and layer_of(n.module_path) is not None
    ]


def apply(graph: OpGraph, fmt: WeightFormat, device: Any, *, many_tokens: bool) -> OpGraph:
    """``graph`` with its layers' weights in ``fmt``: each such matmul reads the compressed weight, plus (a prefill,
    ``many_tokens``, on the weight-only route) the dequantized copy written and read back in the compute dtype."""
    linears = quantized_linears(graph)
    own = {i: float(ops.DTYPE_BYTES.get(graph.nodes[i].outputs[0].dtype, 2)) for i in linears}  # the weight's dtype
    if route(fmt, device) == "native" and all(b == fmt.bytes_per_weight for b in own.values()):
        return graph
    nodes = list(graph.nodes)
    weight_only = route(fmt, device) == "weight-only"
    for i in linears:
        n = nodes[i]
        read = n.bytes_read - n.params * own[i] + n.params * fmt.bytes_per_weight
        if weight_only and many_tokens:
            read += 2 * n.params * own[i]  # dequantize: write the compute-dtype copy, and the GEMM reads it
        nodes[i] = replace(n, bytes_read=int(round(read)))
    saved = sum(nodes[i].params * (own[i] - fmt.bytes_per_weight) for i in linears)
    return replace(
        graph,
        nodes=tuple(nodes),
        param_bytes=int(round(graph.param_bytes - saved)),
        notes=(
            *graph.notes,
            f"layer weights in {fmt.name} ({fmt.bytes_per_weight:g} bytes each, {route(fmt, device)} on {device.name})",
        ),
    )


def compute_dtype(dtype: str | None, weights: str | None, declared: str | None, device: Any) -> str:
    """The dtype activations (and 16-bit weights) compute in: asked for, implied by 16-bit weights, the config's,
    else bf16 where the device has it and fp16 where not."""
    if dtype is not None:
        return dtype
    if weights in ("bf16", "fp16"):
        return {"bf16": "bfloat16", "fp16": "float16"}[weights]
    if declared in ("bfloat16", "float16") and (declared != "bfloat16" or device.supports_dtype("bfloat16")):
        return declared
    return "bfloat16" if device.kind != "gpu" or device.supports_dtype("bfloat16") else "float16"
