"""CUDA kernels checked without a GPU (gpus.md section 6): the CUDA simulator, PTX, NVRTC and the CMake build.

Real-GPU runs are marked ``gpu`` and skip where no CUDA device is visible.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfpredict.kernels import cupy_kernels, numba_kernels

ROOT = Path(__file__).resolve().parents[2]
CUDA_HOME = os.environ.get("CUDA_HOME") or ("/usr/local/cuda" if Path("/usr/local/cuda").is_dir() else None)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


needs_numba = pytest.mark.skipif(not _has("numba"), reason='needs numba (pip install "perfpredict[gpu]")')

SIM_SCRIPT = textwrap.dedent("""
    import numpy as np
    from numba import cuda
    from perfpredict.kernels import numba_kernels as nk

    assert cuda.is_available() and cuda.simulator_mode if hasattr(cuda, "simulator_mode") else True
    for dtype in ("float32", "float64"):
        T = np.dtype(dtype).type
        out = np.zeros(48, dtype=dtype)
        nk.fma_kernel(dtype)[3, 16](out, 2, T(0.9), T(0.1), 1)
        want = [nk.fma_expected(2, 0.9, 0.1, t) for t in range(48)]
        assert np.allclose(out, want, rtol=1e-5), (dtype, out[:4], want[:4])
        silent = np.zeros(48, dtype=dtype)
        nk.fma_kernel(dtype)[3, 16](silent, 2, T(0.9), T(0.1), 0)
        assert not silent.any()  # store only under the never-true test
    ks = nk.stream_kernels()
    n = 300
    a, b, c = np.zeros(n, np.float32), np.full(n, 2.0, np.float32), np.arange(n, dtype=np.float32)
    ks["write"][2, 8](a, np.float32(5.0)); assert (a == 5.0).all()
    ks["copy"][2, 8](c, b); assert (b == c).all()
    b[:] = 2.0
    ks["triad"][2, 8](a, b, c, np.float32(3.0)); assert np.allclose(a, 2.0 + 3.0 * c)
    partial = np.zeros(16, np.float32)
    ks["read"][2, 8](c, partial, 1); assert np.isclose(partial.sum(), c.sum())
    partial = np.zeros(32, np.float32)  # one slot per thread of the [1, 32] launch
    ks["shared_read"][1, 32](2, partial, 1); assert np.isclose(partial.sum(), 2 * nk.SHARED_WORDS)
    print("SIM-OK")
""")


@needs_numba
def test_numba_kernels_under_cuda_simulator():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-c", SIM_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and "SIM-OK" in proc.stdout, proc.stderr[-2000:]


@needs_numba
@pytest.mark.skipif(CUDA_HOME is None, reason="needs the CUDA toolkit's NVVM for offline PTX")
@pytest.mark.parametrize("dtype,instr", [("float32", "fma.rn.f32"), ("float64", "fma.rn.f64")])
def test_numba_fma_chain_survives_in_ptx(dtype, instr, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", CUDA_HOME)
    ptx = numba_kernels.compile_fma_ptx(dtype, cc=(9, 0))
    per_trip = numba_kernels.CHAINS * numba_kernels.UNROLL  # 8 x 8 = 64 FMAs per loop trip
    count = ptx.count(instr)
    assert count >= per_trip and count % per_trip == 0, count
    if dtype == "float32":
        assert "fma.rn.f64" not in ptx  # no silent promotion of the FP32 chain to FP64


def _check_cuda_ptx(ptx: str) -> None:
    per_kernel = cupy_kernels.CHAINS * cupy_kernels.UNROLL  # 8 chains x 16 unroll = 128
    for instr in ("fma.rn.f64", "fma.rn.f16x2", "fma.rn.bf16x2"):
        n = ptx.count(instr)
        assert n >= per_kernel and n % per_kernel == 0, (instr, n)
    assert ptx.count("fma.rn.f32") >= per_kernel
    # 16-byte vector accesses: .cg loads in read/copy/triad/L2, .ca in L1, v4 stores, v4 shared loads
    assert len(re.findall(r"ld\.global\.cg\.v4\.f32", ptx)) >= 6
    assert re.search(r"ld\.global\.(ca\.|nc\.)?v4\.f32", ptx)
    assert re.search(r"st\.global\.v4\.f32", ptx)
    assert re.search(r"ld\.shared\.v4\.f32", ptx)
    assert not re.search(r"ld\.global(\.[a-z]+)?\.f32\s", ptx.split(".entry pp_read_v4")[1].split(".entry")[0])


@pytest.mark.skipif(
    not (_has("cupy") and cupy_kernels.cuda_include_dirs()),
    reason="needs cupy, nvidia-cuda-nvrtc-cu12 and CUDA headers",
)
def test_cupy_rawkernel_source_compiles_with_nvrtc():
    try:
        ptx = cupy_kernels.offline_ptx("compute_90")
    except Exception as err:
        if "nvrtc" in str(err).lower() and "NVRTC failed" not in str(err):
            pytest.skip(f"libnvrtc unavailable: {err}")
        raise
    _check_cuda_ptx(ptx)
    for name in cupy_kernels.KERNEL_NAMES:
        assert f".entry {name}(" in ptx


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_native_kernels_ptx_with_nvcc(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(cupy_kernels.source())
    subprocess.run(
        ["nvcc", "-arch=sm_90", "-ptx", "-std=c++17", str(src), "-o", str(tmp_path / "k.ptx")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    _check_cuda_ptx((tmp_path / "k.ptx").read_text())


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("cmake") is None, reason="needs nvcc and cmake")
def test_cmake_builds_native_executable(tmp_path):
    """Build-only (one arch, to stay fast; the default build covers sm_80, sm_90 and sm_100)."""
    build = tmp_path / "build"
    cfg = subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(build), "-DPERFPREDICT_BUILD_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cfg.returncode == 0, cfg.stdout[-2000:] + cfg.stderr[-2000:]
    out = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    exe = build / "perfpredict-roofline"
    assert exe.is_file() and os.access(exe, os.X_OK)


def test_cmake_default_is_off(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake")
    cfg = subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(tmp_path / "b")], capture_output=True, text=True, timeout=120
    )
    assert cfg.returncode == 0 and "PERFPREDICT_BUILD_CUDA is OFF" in cfg.stdout


def _cuda_ok() -> bool:
    from perfpredict.kernels.suite import cuda_status

    return cuda_status()[0]


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ok(), reason="needs a CUDA GPU")
def test_gpu_quick_suite_meets_sanity_bands():
    from perfpredict.kernels.suite import run_roofline

    data = run_roofline("cuda", quick=True, kernels=["fp32_fma", "hbm", "launch"])
    ce = data["ceilings"]
    assert all(k["check_ok"] for k in data["kernels"])
    assert ce["hbm_bandwidth_bytes_per_s"]["fraction_of_datasheet"] > 0.7
    assert ce["fp32_flops_per_s"]["fraction_of_datasheet"] > 0.7
    assert 0 < ce["launch_overhead_s"]["min"] < 50e-6
