"""CuPy RawKernel path: the same CUDA source as the native build (``cuda/roofline_kernels.cuh``) through NVRTC.

This is where the half2 (``__hfma2``), bf16x2 and 16-byte vectorised (``float4``, ``__ldcg``) kernels run, since
Numba has neither half2 nor vector loads. :func:`offline_ptx` compiles the source with NVRTC and no GPU (the
``nvidia-cuda-nvrtc-cu12`` wheel provides libnvrtc), which the tests use to count FMAs and check 16-byte loads.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from perfpredict.core.errors import MissingDependencyError

CUDA_DIR = Path(__file__).parent / "cuda"
KERNEL_HEADER = CUDA_DIR / "roofline_kernels.cuh"
CHAINS = 8
UNROLL = 16
KERNEL_NAMES = (
    "pp_fp32_fma",
    "pp_fp64_fma",
    "pp_fp16_hfma2",
    "pp_bf16_hfma2",
    "pp_read_v4",
    "pp_write_v4",
    "pp_copy_v4",
    "pp_triad_v4",
    "pp_l2_read_v4",
    "pp_l1_read_v4",
    "pp_shared_read_v4",
    "pp_empty",
)


def source() -> str:
    return KERNEL_HEADER.read_text().replace("#pragma once\n", "")


def cuda_include_dirs() -> list[str]:
    """Directories holding cuda_fp16.h / cuda_bf16.h for NVRTC: $CUDA_PATH, $CUDA_HOME, /usr/local/cuda."""
    found = []
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_fp16.h").is_file():
            found.append(str(Path(root) / "include"))
    return list(dict.fromkeys(found))


def nvrtc_options(arch: str) -> list[str]:
    return [
        f"-arch={arch}",
        "-std=c++17",
        f"-DPP_CHAINS={CHAINS}",
        f"-DPP_UNROLL={UNROLL}",
        *(f"-I{d}" for d in cuda_include_dirs()),
    ]


def offline_ptx(arch: str = "compute_90") -> str:
    """PTX of every kernel, compiled by NVRTC without a GPU (needs cupy and libnvrtc)."""
    try:
        from cupy.cuda import nvrtc
    except ImportError as err:
        raise MissingDependencyError(
            'offline NVRTC compile needs cupy: pip install "perfpredict[gpu]" nvidia-cuda-nvrtc-cu12'
        ) from err
    prog = nvrtc.createProgram(source(), "roofline_kernels.cu", [], [])
    try:
        nvrtc.compileProgram(prog, nvrtc_options(arch))
    except nvrtc.NVRTCError as err:
        raise RuntimeError(f"NVRTC failed: {err}\n{nvrtc.getProgramLog(prog)}") from err
    ptx = nvrtc.getPTX(prog)
    return ptx.decode() if isinstance(ptx, bytes) else ptx


@functools.cache
def module():
    """The compiled cupy.RawModule (needs a GPU); arch from the current device."""
    import cupy

    opts = tuple(o for o in nvrtc_options("x") if not o.startswith("-arch"))
    return cupy.RawModule(code=source(), options=opts, name_expressions=None)


def kernel(name: str):
    return module().get_function(name)
