"""Roofline kernels without a GPU: byte/FLOP accounting, statistics, fractions of peak, the DeviceCeilings shape."""

from __future__ import annotations

import math

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.hardware.devices import apply_ceilings, get_device
from perfpredict.kernels import ceilings as C
from perfpredict.kernels import table as T


def test_stream_accounting_matches_babelstream():
    n = 1000
    assert T.get_kernel("hbm_copy").bytes_moved(n) == 8000  # read a + write c: 2 x 4 B x 1000
    assert T.get_kernel("hbm_triad").bytes_moved(n) == 12000  # read b, c + write a: 3 x 4 B x 1000
    assert T.get_kernel("hbm_triad").flops(n) == 2000  # one multiply + one add per element
    assert T.get_kernel("hbm_read").bytes_moved(n) == 4000
    assert T.get_kernel("hbm_write").bytes_moved(n) == 4000
    assert T.get_kernel("cpu_stream_triad").bytes_moved(n) == 24000  # float64: 3 x 8 B x 1000


def test_fma_and_gemm_accounting():
    assert T.get_kernel("fp32_fma").work(10) == 20  # one FMA = 2 FLOP
    assert T.get_kernel("fp16_hfma2").work(10) == 40  # one half2 FMA = 2 lanes x 2 FLOP
    assert T.gemm_flops(2, 3, 4) == 48  # 2*2*3*4
    assert T.gemm_bytes(2, 3, 4, "float16") == (2 * 4 + 4 * 3 + 2 * 3) * 2  # A + B + C, 2 B each = 52
    assert T.get_kernel("gemm_bf16").work(2 * 3 * 4) == 48
    assert T.get_kernel("launch_back_to_back").work(7) == 7


def test_every_row_is_consistent():
    for k in T.KERNELS:
        assert k.target in ("cuda", "cpu") and k.kind in ("compute", "tensor", "memory", "transfer", "latency")
        assert k.dtype in T.DTYPE_BYTES
        if k.kind == "memory":
            assert k.bytes_per_element > 0
        if k.kind in ("compute", "tensor"):
            assert k.flops_per_element > 0 and k.bytes_per_element == 0
    names = [k.name for k in T.KERNELS]
    assert len(names) == len(set(names))


def test_select_by_prefix_and_unknown_name():
    assert [k.name for k in T.select("cuda", ["hbm"])] == ["hbm_read", "hbm_write", "hbm_copy", "hbm_triad"]
    assert {k.name for k in T.select("cuda", ["gemm"])} == {"gemm_fp16", "gemm_bf16", "gemm_tf32", "gemm_fp8"}
    with pytest.raises(InvalidInputError, match="hbm_triad"):
        T.select("cuda", ["hbm_triadd"])


def test_stats_best_is_max_rate_and_spread_flag():
    s = C.rate_stat([2.0, 1.0, 4.0], work=8.0)  # rates 4, 8, 2
    assert (s.min, s.median, s.max) == (2.0, 4.0, 8.0)
    assert s.spread == pytest.approx((8 - 2) / 4)
    assert s.flagged
    tight = C.summarize([100.0, 101.0, 102.0])
    assert tight.spread == pytest.approx(0.0198, abs=1e-4) and not tight.flagged  # 2/101 < 5%
    with pytest.raises(InvalidInputError):
        C.rate_stat([0.0], 1.0)


def test_fractions():
    assert C.fraction(3.05e12, 3.35e12) == pytest.approx(0.9104, abs=1e-4)
    assert C.fraction(None, 1.0) is None and C.fraction(1.0, 0.0) is None


def test_gpu_theoretical_matches_datasheet_at_boost():
    # H100 SXM: 132 SMs x 256 FLOP/clk (128 lanes x FMA) x 1980 MHz = 66.9 TF
    fp32 = C.gpu_theoretical("fp32_flops_per_s", cc="9.0", sm_count=132, sm_clock_mhz=1980)
    assert fp32 == pytest.approx(66.9e12, rel=2e-3)
    # dense BF16 tensor: 132 x 4096 x 1830 MHz = 989 TF
    assert C.gpu_theoretical("bf16_tensor_flops_per_s", cc="9.0", sm_count=132, sm_clock_mhz=1830) == pytest.approx(
        989.4e12, rel=2e-3
    )
    # A100: 108 x 2048 x 1410 MHz = 312 TF
    assert C.gpu_theoretical("fp16_tensor_flops_per_s", cc="8.0", sm_count=108, sm_clock_mhz=1410) == pytest.approx(
        312e12, rel=2e-3
    )
    # HBM: 2 x 2619 MHz x 5120 bit / 8 = 3.35 TB/s
    assert C.gpu_theoretical(
        "hbm_bandwidth_bytes_per_s", cc="9.0", sm_count=132, sm_clock_mhz=1980, mem_clock_mhz=2619, bus_width_bits=5120
    ) == pytest.approx(3.352e12, rel=1e-3)
    # L1: 132 x 128 B/clk x 1980 MHz = 33.5 TB/s
    assert C.gpu_theoretical("l1_bandwidth_bytes_per_s", cc="9.0", sm_count=132, sm_clock_mhz=1980) == pytest.approx(
        33.45e12, rel=1e-3
    )
    assert C.gpu_theoretical("fp8_tensor_flops_per_s", cc="8.0", sm_count=108, sm_clock_mhz=1410) is None
    assert C.gpu_theoretical("fp32_flops_per_s", cc="12.0", sm_count=1, sm_clock_mhz=1) is None


def test_cpu_theoretical():
    # 2 cores x 8 FP32 lanes (AVX2) x 2 (FMA) x 2 FMA pipes x 3 GHz = 192 GFLOP/s
    assert C.cpu_theoretical("fp32_flops_per_s", cores=2, clock_hz=3e9, vector_bits=256) == pytest.approx(192e9)
    assert C.cpu_theoretical("fp64_flops_per_s", cores=2, clock_hz=3e9, vector_bits=256) == pytest.approx(96e9)


def _result(name, times, elements, impl="cupy", ok=True):
    return C.KernelResult(T.get_kernel(name), impl, elements, times, ok)


def test_build_ceilings_shape_composite_and_apply():
    n = 10**9
    results = [
        _result("hbm_copy", [2.7e-3, 2.75e-3, 2.8e-3], n // 1000),  # 8e6 B / 2.7e-3 s
        _result("hbm_triad", [4.0e-3, 4.05e-3, 4.1e-3], n // 1000),  # 12e6 B / 4e-3 s = 3.0e9 B/s: best
        _result("fp32_fma", [1.0, 1.01, 1.02], 30 * 10**12),  # 6e13 FLOP/s
        _result("launch_back_to_back", [2.5e-3, 2.6e-3, 3.0e-3], 1000),  # 2.5 us per launch at best
        _result("hbm_write", [1e-6], 10**9, ok=False),  # failed check: never a ceiling
    ]
    h100 = get_device("H100-SXM")
    data = C.build_ceilings(
        results, target="cuda", device_name="H100-SXM", catalog_device=h100, theoretical={"fp32_flops_per_s": 62e12}
    )
    ce = data["ceilings"]
    assert ce["hbm_bandwidth_bytes_per_s"]["kernel"] == "hbm_triad"
    assert ce["hbm_bandwidth_bytes_per_s"]["max"] == pytest.approx(12e6 / 4e-3)
    assert "hbm_write_bandwidth_bytes_per_s" not in ce
    assert any("failed its result check" in w for w in data["warnings"])
    assert ce["fp32_flops_per_s"]["fraction_of_datasheet"] == pytest.approx(6e13 / 66.9e12, abs=1e-4)
    assert ce["fp32_flops_per_s"]["fraction_at_observed_clock"] == pytest.approx(6e13 / 62e12, abs=1e-4)
    assert ce["launch_overhead_s"]["min"] == pytest.approx(2.5e-6)
    for entry in ce.values():
        assert {"min", "median", "max", "method", "spread", "spread_flagged"} <= set(entry)
    measured = apply_ceilings(h100, data)
    assert measured.memory_bandwidth_bytes_per_s == pytest.approx(3.0e9)
    assert measured.peak_flops_per_s["fp32"] == pytest.approx(6e13)
    assert measured.launch_overhead_s == pytest.approx(2.5e-6)
    assert "memory_bandwidth_bytes_per_s" in measured.measured


def test_write_and_read_roundtrip(tmp_path):
    data = C.build_ceilings([_result("fp64_fma", [1.0, 1.0, 1.0], 10)], target="cuda", device_name="H100-SXM")
    path = C.write_ceilings(data, tmp_path / "m" / "h100.json")
    back = C.read_ceilings(path)
    assert back["ceilings"]["fp64_flops_per_s"]["max"] == 20.0
    assert math.isclose(back["ceilings"]["fp64_flops_per_s"]["spread"], 0.0)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(InvalidInputError, match="not a DeviceCeilings"):
        C.read_ceilings(tmp_path / "bad.json")


def test_native_json_is_finished_like_the_python_suite():
    from perfpredict.kernels.native import finish_native

    raw = {
        "device_name_reported": "NVIDIA H100 80GB HBM3",
        "device_attributes": {
            "cc": "9.0",
            "sms": 132,
            "clock_khz": 1980000,
            "mem_clock_khz": 2619000,
            "bus_width_bits": 5120,
        },
        "kernels": [
            {
                "kernel": "hbm_copy",
                "implementation": "native",
                "ceiling": "hbm_copy_bandwidth_bytes_per_s",
                "unit": "B/s",
                "min": 2.9e12,
                "median": 3.0e12,
                "max": 3.05e12,
                "samples": 10,
                "spread": 0.05,
                "spread_flagged": False,
                "check_ok": True,
                "method": "m",
            }
        ],
    }
    data = finish_native(raw)
    assert data["device"] == "H100-SXM"
    hbm = data["ceilings"]["hbm_bandwidth_bytes_per_s"]
    assert hbm["fraction_of_datasheet"] == pytest.approx(3.05e12 / 3.35e12, abs=1e-4)
    assert hbm["fraction_at_observed_clock"] == pytest.approx(3.05e12 / 3.352e12, abs=1e-3)


def test_import_stays_light():
    import subprocess
    import sys

    code = (
        "import sys, perfpredict.kernels.table, perfpredict.kernels.ceilings, perfpredict.kernels.suite, "
        "perfpredict.kernels.plot, perfpredict.cli.roofline; "
        "print(sorted(m for m in ('numba', 'cupy', 'matplotlib', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
