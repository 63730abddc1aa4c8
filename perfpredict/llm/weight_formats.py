"""Weight formats for serving: bytes per weight, and the work the step does to use them.

The format applies to the weights of the transformer's linear layers (as bitsandbytes, torchao and vLLM quantize
them; embeddings, norms and the LM head stay in the compute dtype). NB: a MoE model's expert weights (grouped GEMMs)
stay in the compute dtype here; the report says so. Two routes, as the common libraries take them:

- **native**: the GEMM reads the format as it is (bf16/fp16; fp8 on a GPU with FP8 tensor cores, Hopper and later):
  the matmul reads ``bytes_per_weight`` per weight. Its FLOPs are costed at the compute dtype's rate (a decode step
  is bound by the bytes; a prefill in fp8 would be up to 2x faster than this says).
- **weight-only**: the weights are stored compressed and widened to the compute dtype on the fly (int8, nf4, int4,
  and fp8 before Hopper). Two kernels do it (``kernel_for``, ``--quant-kernel``):
  - **fused** dequant-GEMM reads the compressed weights once (bitsandbytes' 4-bit gemv for one input row, Marlin
    and gpt-fast's int4 kernels for a few rows);
  - **dequantize**-then-GEMM widens each whole weight into a compute-dtype copy first (read compressed, write and
    read back the copy: 2 bytes x 2 per weight more), as bitsandbytes does for any input of more than one row.
  By default ("auto") a prefill dequantizes; a decode step of nf4 (bitsandbytes) runs the fused gemv at batch 1 and
  dequantizes at batch > 1; the other formats' decode steps are fused.

| format | bytes per weight | scales | route |
|---|---:|---|---|
| fp32 | 4 | - | native |
| bf16, fp16 | 2 | - | native |
| int8 | 1 | one float per output row | weight-only |
| fp8 | 1 | one float per tensor | native on FP8 tensor cores, else weight-only |
| nf4 | 0.5 | one float32 absmax per 64 weights | weight-only (bitsandbytes; CUDA GPUs only) |
| int4 | 0.5 | an fp16 scale and a 4-bit zero per 128 weights | weight-only (AWQ/GPTQ checkpoints, Marlin-style kernels; CUDA GPUs only) |
| int4-g32 | 0.5 | a 16-bit scale and zero per 32 weights | weight-only (gpt-fast's int4; CUDA GPUs only) |

llama.cpp's GGUF block formats (``--engine llamacpp`` only; its kernels dequantize inside the matmul, ``mmvq`` for
one token and ``mmq`` for a batch; bits per weight as ggml's block layouts give them, scales included):

| format | bits per weight | block |
|---|---:|---|
| q8_0 | 8.5 | 32 int8 and an fp16 scale (34 bytes) |
| q6_k | 6.5625 | 256 weights in 210 bytes |
| q5_k_m | 5.5 | Q5_K: 256 weights in 176 bytes (the m mix keeps a few tensors at q6_k: about 5.7 bits) |
| q4_k_m | 4.85 | Q4_K (4.5 bits: 256 weights in 144 bytes) with half the attention-v and down projections at q6_k |
| q4_0 | 4.5 | 32 4-bit weights and an fp16 scale (18 bytes) |
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bytes_per_weight: float  # scales included (nf4: 0.5 + 4/64)
    compute_dtype: str | None  # the dtype a native GEMM computes in; None: the model's own
    gpu_only: bool = False
    gguf: bool = False  # a llama.cpp GGUF block format


FORMATS = {
    "fp32": WeightFormat("fp32", 4.0, "float32"),
    "bf16": WeightFormat("bf16", 2.0, "bfloat16"),
    "fp16": WeightFormat("fp16", 2.0, "float16"),
    "int8": WeightFormat("int8", 1.0, None),
    "fp8": WeightFormat("fp8", 1.0, "float8_e4m3fn"),
    "nf4": WeightFormat("nf4", 0.5 + 4 / 64, None, gpu_only=True),
    "int4": WeightFormat("int4", 0.5 + 2.5 / 128, None, gpu_only=True),
    "int4-g32": WeightFormat("int4-g32", 0.5 + 4 / 32, None, gpu_only=True),
    "q8_0": WeightFormat("q8_0", 34 / 32, None, gguf=True),
    "q6_k": WeightFormat("q6_k", 210 / 256, None, gguf=True),
    "q5_k_m": WeightFormat("q5_k_m", 5.7 / 8, None, gguf=True),
    "q4_k_m": WeightFormat("q4_k_m", 4.85 / 8, None, gguf=True),
    "q4_0": WeightFormat("q4_0", 18 / 32, None, gguf=True),
}
#: the formats llama.cpp runs (its own GGUF blocks, and unquantized weights)
LLAMACPP_FORMATS = ("fp32", "fp16", "bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0")


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


def check_engine(fmt: WeightFormat, engine: str) -> None:
    """Refuse a format the engine does not run: GGUF blocks outside llama.cpp, and the other quantized formats
    in it."""
    if fmt.gguf and engine != "llamacpp":
        raise InvalidInputError(
            f"--weights {fmt.name} is a llama.cpp GGUF format; use --engine llamacpp, or int8/int4/fp8 with {engine}"
        )
    if engine == "llamacpp" and fmt.name not in LLAMACPP_FORMATS:
        raise InvalidInputError(
            f"llama.cpp runs GGUF weights: --weights {fmt.name} is not one of {', '.join(LLAMACPP_FORMATS)}"
        )


QUANT_KERNELS = ("auto", "fused", "dequantize")


def kernel_for(fmt: WeightFormat, device: Any, *, prefill: bool, rows: int, choice: str = "auto") -> str | None:
    """The kernel a layer's weight-only matmul runs: "fused" or "dequantize" (None on the native route).

    ``rows``: the input rows of the matmul (a decode step's batch); ``choice``: ``--quant-kernel``."""
    if choice not in QUANT_KERNELS:
        raise InvalidInputError(f"quant kernel {choice!r} is not one of {', '.join(QUANT_KERNELS)}")
    if route(fmt, device) == "native":
        return None
    if choice != "auto":
        return choice
    if prefill or (fmt.name == "nf4" and rows > 1):
        return "dequantize"  # bitsandbytes' 4-bit gemv takes one row; more rows dequantize the whole weight
    return "fused"


def describe_kernels(fmt: WeightFormat, device: Any, batch: int, choice: str = "auto") -> str:
    """One line for the assumptions: the kernel the prefill and this batch's decode steps are costed with."""
    if route(fmt, device) == "native":
        return f"{fmt.name} is read as it is by the GEMM (no dequantization)"
    pre = kernel_for(fmt, device, prefill=True, rows=batch, choice=choice)
    dec = kernel_for(fmt, device, prefill=False, rows=batch, choice=choice)
    name = {
        "fused": "fused dequant-GEMM (reads the compressed weights once)",
        "dequantize": "dequantize-then-GEMM (a compute-dtype copy of each weight is written and read back)",
    }
    why = ""
    if choice == "auto" and fmt.name == "nf4":
        why = "; bitsandbytes fuses only a one-row input (batch 1) and dequantizes whole weights for more rows"
    return (
        f"decode at batch {batch}: {name[dec]}; prefill: {name[pre]}{why} "
        f"(--quant-kernel {'auto' if choice == 'auto' else choice}; fused|dequantize chooses)"
    )  # fmt: skip


def quantized_linears(graph: OpGraph) -> list[int]:
    """The matmuls that read a weight of a transformer layer (not the embeddings or the LM head)."""
    from perfpredict.compiler_hooks.layer_replication import layer_of

    return [
        i
        for i, n in enumerate(graph.nodes)
        if n.op == ops.MATMUL and n.params > 0 and layer_of(n.module_path) is not None
    ]


def apply(
    graph: OpGraph, fmt: WeightFormat, device: Any, *, many_tokens: bool = False, kernel: str | None = None
) -> OpGraph:
    """``graph`` with its layers' weights in ``fmt``: each such matmul reads the compressed weight (a fused kernel),
    or, on the weight-only route with the "dequantize" kernel, a dequantize op before it widens the weight into a
    compute-dtype copy that the GEMM then reads (:func:`with_dequantize`). ``kernel``: "fused" or "dequantize"
    (default: dequantize for ``many_tokens``, a prefill, else fused)."""
    linears = quantized_linears(graph)
    own = {i: float(ops.DTYPE_BYTES.get(graph.nodes[i].outputs[0].dtype, 2)) for i in linears}  # the weight's dtype
    if route(fmt, device) == "native" and all(b == fmt.bytes_per_weight for b in own.values()):
        return graph
    nodes = list(graph.nodes)
    for i in linears:
        n = nodes[i]
        nodes[i] = replace(n, bytes_read=int(round(n.bytes_read - n.params * own[i] + n.params * fmt.bytes_per_weight)))
    saved = sum(nodes[i].params * (own[i] - fmt.bytes_per_weight) for i in linears)
    out = replace(
        graph,
        nodes=tuple(nodes),
        param_bytes=int(round(graph.param_bytes - saved)),
        notes=(
            *graph.notes,
            f"layer weights in {fmt.name} ({fmt.bytes_per_weight:g} bytes each, {route(fmt, device)} on {device.name})",
        ),
    )
    kernel = kernel or ("dequantize" if many_tokens else "fused")
    return with_dequantize(out, fmt, device) if kernel == "dequantize" else out


def with_dequantize(graph: OpGraph, fmt: WeightFormat, device: Any) -> OpGraph:
    """``graph`` (its layer matmuls reading ``fmt``'s compressed weights) with dequantize-then-GEMM: before each
    such matmul a dequantize kernel reads the compressed weight and writes a compute-dtype copy, and the GEMM reads
    that copy as a native one would. The dequantize is its own op (a launch, a memory-bound kernel), as
    bitsandbytes runs it. Applied to a tensor-parallel rank's graph, it dequantizes the rank's shard."""
    if route(fmt, device) == "native":
        return graph
    linears = set(quantized_linears(graph))
    nodes: list = []
    index: dict[int, int] = {}
    for i, n in enumerate(graph.nodes):
        if i in linears:
            dtype = n.outputs[0].dtype
            own = float(ops.DTYPE_BYTES.get(dtype, 2))
            packed = int(round(n.params * fmt.bytes_per_weight))
            nodes.append(
                OpNode(
                    f"{n.name}_dequantize",
                    ops.ELEMENTWISE,
                    f"dequantize_{fmt.name}",
                    inputs=(TensorMeta((packed,), "uint8"),),
                    outputs=(TensorMeta((n.params,), dtype),),
                    flops=n.params,
                    bytes_read=packed,
                    bytes_written=int(n.params * own),
                    module_path=n.module_path,
                )
            )
            n = replace(n, bytes_read=int(round(n.bytes_read + n.params * (own - fmt.bytes_per_weight))))
        nodes.append(n)
        index[i] = len(nodes) - 1
    edges = [(index[a], index[b]) for a, b in graph.edges] + [(index[i] - 1, index[i]) for i in sorted(linears)]
    return replace(
        graph,
        nodes=tuple(nodes),
        edges=tuple(edges),
        keep_alive=frozenset(index[i] for i in graph.keep_alive),
        grad_outputs=frozenset(index[i] for i in graph.grad_outputs),
        notes=(*graph.notes, f"{fmt.name} weights dequantized before each GEMM (dequantize-then-GEMM)"),
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
