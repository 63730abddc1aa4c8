"""The roofline kernels as table rows (BabelStream style): what each moves and computes per element.

One row says which ceiling a kernel measures, how many bytes it moves and FLOPs it does per element, and in
which dtype. Every implementation (Numba CUDA, CuPy RawKernel, native CUDA C++, Numba CPU) reports its element
count, and the work is ``elements x per-element`` here, so the accounting lives in one place and is unit-tested.

"Element" means: one array element for the stream kernels, one FMA instruction per lane for the FMA chains
(a ``half2`` FMA is one element of 4 FLOPs), one multiply-accumulate for a GEMM (2 FLOPs; its bytes come from
:func:`gemm_bytes`), one byte for PCIe copies, and one launch for the launch-overhead kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError, close_matches

# the package's dtype sizes, plus "none": a kernel row without that operand (no output dtype) moves no bytes for it
DTYPE_BYTES = {**ops.DTYPE_BYTES, "none": 0}


@dataclass(frozen=True)
class KernelSpec:
    """One roofline kernel. ``ceiling`` is the DeviceCeilings key it feeds (``None``: reported only)."""

    name: str
    target: str  # "cuda" or "cpu"
    kind: str  # "compute", "tensor", "memory", "transfer", "latency"
    dtype: str
    bytes_per_element: int
    flops_per_element: int
    ceiling: str | None
    implementations: tuple[str, ...]
    description: str

    def bytes_moved(self, elements: int) -> int:
        """Bytes the kernel moves for ``elements`` elements (STREAM counting: no write-allocate traffic)."""
        return self.bytes_per_element * int(elements)

    def flops(self, elements: int) -> int:
        return self.flops_per_element * int(elements)

    @property
    def unit(self) -> str:
        if self.kind == "latency":
            return "s"
        return "FLOP/s" if self.kind in ("compute", "tensor") else "B/s"

    def work(self, elements: int) -> int:
        """What the rate is counted in: FLOPs for compute rows, bytes for memory and transfer rows, launches."""
        if self.kind in ("compute", "tensor"):
            return self.flops(elements)
        if self.kind == "latency":
            return int(elements)
        return self.bytes_moved(elements)


def _k(name, target, kind, dtype, nbytes, flops, ceiling, impls, text) -> KernelSpec:
    return KernelSpec(name, target, kind, dtype, nbytes, flops, ceiling, tuple(impls), text)


_GPU = ("numba", "cupy", "native")
KERNELS: tuple[KernelSpec, ...] = (
    # --- GPU compute: per thread >= 8 independent FMA chains, fully unrolled, stored under a never-true test.
    _k(
        "fp32_fma",
        "cuda",
        "compute",
        "float32",
        0,
        2,
        "fp32_flops_per_s",
        _GPU,
        "FP32 FMA chains, 8 per thread (ILP 8); element = one fma.rn.f32",
    ),
    _k(
        "fp64_fma",
        "cuda",
        "compute",
        "float64",
        0,
        2,
        "fp64_flops_per_s",
        _GPU,
        "FP64 FMA chains, 8 per thread; element = one fma.rn.f64",
    ),
    _k(
        "fp16_hfma2",
        "cuda",
        "compute",
        "float16",
        0,
        4,
        "fp16_flops_per_s",
        ("cupy", "native"),
        "half2 __hfma2 chains (Numba has no half2); element = one fma.rn.f16x2 = 4 FLOP",
    ),
    _k(
        "bf16_hfma2",
        "cuda",
        "compute",
        "bfloat16",
        0,
        4,
        "bf16_flops_per_s",
        ("cupy", "native"),
        "__nv_bfloat162 __hfma2 chains (sm_80+); element = one fma.rn.bf16x2 = 4 FLOP",
    ),
    # --- GPU tensor cores: cuBLAS through torch.matmul (or cupy.matmul), MAMF-style shape search, L2 flushed.
    _k(
        "gemm_fp16",
        "cuda",
        "tensor",
        "float16",
        0,
        2,
        "fp16_tensor_flops_per_s",
        ("torch", "cupy"),
        "cuBLAS FP16 GEMM (FP32 accumulate), best shape of a search; element = one MAC",
    ),
    _k(
        "gemm_bf16",
        "cuda",
        "tensor",
        "bfloat16",
        0,
        2,
        "bf16_tensor_flops_per_s",
        ("torch", "cupy"),
        "cuBLAS BF16 GEMM, best shape of a search; element = one MAC",
    ),
    _k(
        "gemm_tf32",
        "cuda",
        "tensor",
        "float32",
        0,
        2,
        "tf32_tensor_flops_per_s",
        ("torch", "cupy"),
        "cuBLAS FP32 GEMM with TF32 tensor cores allowed; element = one MAC",
    ),
    _k(
        "gemm_fp8",
        "cuda",
        "tensor",
        "float8_e4m3fn",
        0,
        2,
        "fp8_tensor_flops_per_s",
        ("torch",),
        "torch._scaled_mm FP8 e4m3 GEMM (sm_89+); element = one MAC",
    ),
    # --- GPU memory: buffers >= 4x L2, 16-byte vector accesses, grid-stride persistent grid.
    _k(
        "hbm_read",
        "cuda",
        "memory",
        "float32",
        4,
        1,
        "hbm_read_bandwidth_bytes_per_s",
        _GPU,
        "sum of a[i] with float4 __ldcg loads, 4 loads in flight per thread",
    ),
    _k(
        "hbm_write",
        "cuda",
        "memory",
        "float32",
        4,
        0,
        "hbm_write_bandwidth_bytes_per_s",
        _GPU,
        "a[i] = s with float4 stores",
    ),
    _k(
        "hbm_copy",
        "cuda",
        "memory",
        "float32",
        8,
        0,
        "hbm_copy_bandwidth_bytes_per_s",
        _GPU,
        "c[i] = a[i] (BabelStream copy: 2 x 4 B)",
    ),
    _k(
        "hbm_triad",
        "cuda",
        "memory",
        "float32",
        12,
        2,
        "hbm_triad_bandwidth_bytes_per_s",
        _GPU,
        "a[i] = b[i] + s * c[i] (BabelStream triad: 3 x 4 B, 2 FLOP)",
    ),
    _k(
        "l2_read",
        "cuda",
        "memory",
        "float32",
        4,
        1,
        "l2_bandwidth_bytes_per_s",
        ("cupy", "native"),
        "working-set sweep below the L2 size, repeated passes with .cg loads (bypass L1)",
    ),
    _k(
        "l1_read",
        "cuda",
        "memory",
        "float32",
        4,
        1,
        "l1_bandwidth_bytes_per_s",
        ("cupy", "native"),
        "one block per SM re-reading a 16 KiB buffer through L1 (float4 loads)",
    ),
    _k(
        "shared_read",
        "cuda",
        "memory",
        "float32",
        4,
        1,
        "shared_bandwidth_bytes_per_s",
        ("numba", "cupy", "native"),
        "conflict-free shared-memory reads, one block per SM",
    ),
    _k(
        "pcie_h2d",
        "cuda",
        "transfer",
        "uint8",
        1,
        0,
        "pcie_h2d_bandwidth_bytes_per_s",
        ("cupy", "native"),
        "pinned host -> device cudaMemcpyAsync, large-size plateau",
    ),
    _k(
        "pcie_d2h",
        "cuda",
        "transfer",
        "uint8",
        1,
        0,
        "pcie_d2h_bandwidth_bytes_per_s",
        ("cupy", "native"),
        "device -> pinned host cudaMemcpyAsync, large-size plateau",
    ),
    _k(
        "launch_back_to_back",
        "cuda",
        "latency",
        "none",
        0,
        0,
        "launch_overhead_s",
        ("cupy", "native"),
        "CUDA events around N empty kernels on one stream, / N",
    ),
    _k(
        "launch_graph",
        "cuda",
        "latency",
        "none",
        0,
        0,
        "launch_overhead_graph_s",
        ("cupy", "native"),
        "the same N empty kernels captured in one CUDA graph and replayed, / N",
    ),
    # --- CPU: the same interface, Numba-jitted.
    _k(
        "cpu_fp32_fma",
        "cpu",
        "compute",
        "float32",
        0,
        2,
        "fp32_flops_per_s",
        ("numba",),
        "explicit SIMD FMA chains (llvm.fma on the host's widest vector), one per core",
    ),
    _k(
        "cpu_fp64_fma",
        "cpu",
        "compute",
        "float64",
        0,
        2,
        "fp64_flops_per_s",
        ("numba",),
        "explicit SIMD FP64 FMA chains, one per core",
    ),
    _k(
        "cpu_gemm_fp32",
        "cpu",
        "tensor",
        "float32",
        0,
        2,
        "fp32_gemm_flops_per_s",
        ("torch",),
        "torch.matmul FP32 (oneDNN/MKL), best shape; a reference for what GEMM reaches",
    ),
    # bf16 has no arithmetic of its own on CPUs without AVX512_BF16/AMX, so what nn.Linear reaches is the ceiling.
    _k(
        "cpu_gemm_bf16",
        "cpu",
        "tensor",
        "bfloat16",
        0,
        2,
        "bf16_flops_per_s",
        ("torch",),
        "torch.mm(x, w.t()) bf16, nn.Linear's layout, best shape",
    ),
    _k(
        "cpu_stream_read",
        "cpu",
        "memory",
        "float64",
        8,
        1,
        "dram_read_bandwidth_bytes_per_s",
        ("numba",),
        "sum of a[i], arrays >= 4x last-level cache, all cores",
    ),
    _k(
        "cpu_stream_write",
        "cpu",
        "memory",
        "float64",
        8,
        0,
        "dram_write_bandwidth_bytes_per_s",
        ("numba",),
        "a[i] = s (write-allocate traffic not counted, as STREAM)",
    ),
    _k(
        "cpu_stream_copy",
        "cpu",
        "memory",
        "float64",
        16,
        0,
        "dram_copy_bandwidth_bytes_per_s",
        ("numba",),
        "c[i] = a[i] (STREAM copy)",
    ),
    _k(
        "cpu_stream_triad",
        "cpu",
        "memory",
        "float64",
        24,
        2,
        "dram_triad_bandwidth_bytes_per_s",
        ("numba",),
        "a[i] = b[i] + s * c[i] (STREAM triad)",
    ),
    _k(
        "cpu_cache_read",
        "cpu",
        "memory",
        "float64",
        8,
        1,
        None,
        ("numba",),
        "working-set sweep 16 KiB .. 4x LLC; the plateaus give the L1, L2 and L3 ceilings",
    ),
    _k(
        "cpu_dispatch",
        "cpu",
        "latency",
        "none",
        0,
        0,
        "launch_overhead_s",
        ("torch",),
        "eager torch.add on 1-element tensors back to back: per-op dispatch cost",
    ),
)

# Composite ceilings: the best of several kernels' ceilings (gpus.md 3.2: HBM = best of copy, triad, write).
COMPOSITES = {
    "cuda": {
        "hbm_bandwidth_bytes_per_s": (
            "hbm_copy_bandwidth_bytes_per_s",
            "hbm_triad_bandwidth_bytes_per_s",
            "hbm_write_bandwidth_bytes_per_s",
        )
    },
    "cpu": {"dram_bandwidth_bytes_per_s": ("dram_copy_bandwidth_bytes_per_s", "dram_triad_bandwidth_bytes_per_s")},
}


def kernels_for(target: str) -> list[KernelSpec]:
    return [k for k in KERNELS if k.target == target]


def get_kernel(name: str) -> KernelSpec:
    for k in KERNELS:
        if k.name == name:
            return k
    names = [k.name for k in KERNELS]
    hint = close_matches(name, names)
    raise InvalidInputError(
        f"unknown roofline kernel {name!r}"
        + (f"; did you mean {hint}?" if hint else "")
        + f" Choose from: {', '.join(names)}"
    )


def select(target: str, names: list[str] | None) -> list[KernelSpec]:
    """The kernels of ``target`` named in ``names`` (all when empty); a name may be a prefix (``hbm``, ``gemm``)."""
    rows = kernels_for(target)
    if not names:
        return rows
    chosen: list[KernelSpec] = []
    for raw in names:
        name = raw.strip()
        hits = [k for k in rows if k.name == name or k.name.startswith(name + "_") or k.name.startswith(name)]
        if not hits:
            hint = close_matches(name, [k.name for k in rows])
            raise InvalidInputError(
                f"no {target} roofline kernel matches {name!r}"
                + (f"; did you mean {hint}?" if hint else "")
                + f" Choose from: {', '.join(k.name for k in rows)}"
            )
        chosen += [k for k in hits if k not in chosen]
    return chosen


def gemm_flops(m: int, n: int, k: int) -> int:
    """2 x M x N x K: one multiply and one add per MAC."""
    return 2 * m * n * k


def gemm_bytes(m: int, n: int, k: int, dtype: str, out_dtype: str | None = None) -> int:
    """Compulsory traffic of C = A @ B: read A (MxK) and B (KxN), write C (MxN)."""
    size = DTYPE_BYTES[dtype]
    return (m * k + k * n) * size + m * n * DTYPE_BYTES[out_dtype or dtype]
