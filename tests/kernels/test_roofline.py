"""The CPU roofline runs for real here; the CLI, the plot and the catalog pick-up of measured ceilings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from perfpredict.hardware.devices import apply_ceilings, get_device, local_cpu

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    from perfpredict.cli import main

    out = tmp_path_factory.mktemp("roofline") / "cpu.json"
    code = main(
        [
            "roofline",
            "--device",
            "cpu",
            "--quick",
            "--kernels",
            "cpu_fp32_fma",
            "cpu_fp64_fma",
            "cpu_stream_triad",
            "cpu_stream_copy",
            "cpu_cache_read",
            "cpu_dispatch",
            "cpu_gemm_bf16",
            "--reps",
            "5",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    return json.loads(out.read_text())


def test_cpu_roofline_runs_for_real(cpu_run):
    data = cpu_run
    ce = data["ceilings"]
    assert data["device"] == "cpu" and data["target"] == "cpu"
    assert all(k["check_ok"] for k in data["kernels"]), [k["kernel"] for k in data["kernels"] if not k["check_ok"]]
    for key in (
        "fp32_flops_per_s",
        "fp64_flops_per_s",
        "dram_bandwidth_bytes_per_s",
        "launch_overhead_s",
        "l1_bandwidth_bytes_per_s",
    ):
        assert ce[key]["min"] <= ce[key]["median"] <= ce[key]["max"]
    # sanity: any x86 core of the last decade does > 1 GFLOP/s and > 1 GB/s; SIMD FP32 beats FP64
    assert ce["fp32_flops_per_s"]["max"] > 1e9 and ce["dram_bandwidth_bytes_per_s"]["max"] > 1e9
    assert ce["fp32_flops_per_s"]["max"] > ce["fp64_flops_per_s"]["max"]
    assert 0 < ce["launch_overhead_s"]["min"] < 1e-3
    assert ce["fp32_flops_per_s"]["fraction_of_datasheet"] is not None
    assert data["clocks"]["before"]["loadavg"] is not None


def test_cpu_ceilings_apply_to_the_local_cpu(cpu_run):
    data = cpu_run
    cpu = apply_ceilings(local_cpu(), data)
    assert cpu.source.startswith("measured:")
    assert cpu.peak_flops_per_s["fp32"] == data["ceilings"]["fp32_flops_per_s"]["max"]
    assert cpu.memory_bandwidth_bytes_per_s == data["ceilings"]["dram_bandwidth_bytes_per_s"]["max"]
    # bf16 matmuls take the measured nn.Linear rate, not the fp32 peak nor an AMX estimate (where the CPU has AMX,
    # the rate is labelled bf16_tensor)
    assert cpu.peak_flops("bfloat16", tensor_core=True)[0] == data["ceilings"]["bf16_flops_per_s"]["max"]


def test_measured_dir_is_picked_up(cpu_run, tmp_path, monkeypatch):
    from perfpredict.hardware.devices import reset_catalog

    data = cpu_run
    (tmp_path / "cpu.json").write_text(json.dumps(data))
    monkeypatch.setenv("PERFPREDICT_MEASURED_DIR", str(tmp_path))
    reset_catalog()
    try:
        assert "memory_bandwidth_bytes_per_s" in local_cpu().measured
    finally:
        monkeypatch.delenv("PERFPREDICT_MEASURED_DIR")
        reset_catalog()


def test_missing_gpu_prints_one_line_and_exits_2():
    from perfpredict.kernels.suite import cuda_status

    if cuda_status()[0]:
        pytest.skip("a CUDA device is present")
    proc = subprocess.run(
        [sys.executable, "-m", "perfpredict", "roofline", "--device", "cuda"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfpredict: error: no CUDA device")
    assert "--device cpu" in lines[0] and "perfpredict[gpu]" in lines[0]
    assert proc.stdout == ""


def _tiny_graph():
    from perfpredict.core.graph import OpGraph, OpNode, TensorMeta

    t = TensorMeta((64, 64), "float16")
    nodes = (
        OpNode(
            "mm",
            "matmul",
            "aten.mm",
            (t, t),
            (t,),
            flops=2 * 64**3,
            bytes_read=2 * 64 * 64 * 2,
            bytes_written=64 * 64 * 2,
        ),
        OpNode(
            "relu", "relu", "aten.relu", (t,), (t,), flops=64 * 64, bytes_read=64 * 64 * 2, bytes_written=64 * 64 * 2
        ),
    )
    return OpGraph(nodes=nodes, edges=((0, 1),), dtype="float16", name="tiny")


def test_roofline_points_intensity_and_bound():
    from perfpredict.kernels.plot import roofline_points

    pts = {p["name"]: p for p in roofline_points(_tiny_graph(), get_device("H100-SXM"))}
    assert pts["mm"]["intensity_flop_per_byte"] == pytest.approx(2 * 64**3 / (3 * 64 * 64 * 2))  # 21.33
    assert pts["relu"]["intensity_flop_per_byte"] == pytest.approx(0.25)  # 4096 / 16384
    assert pts["relu"]["bound"] == "memory"
    assert pts["relu"]["attainable_flops_per_s"] == pytest.approx(0.25 * 3.35e12)


def test_plot_png_svg_and_inline_svg(tmp_path, cpu_run):
    pytest.importorskip("matplotlib")
    from perfpredict.kernels.plot import plot_roofline, roofline_svg

    data = cpu_run
    written = plot_roofline(_tiny_graph(), "H100-SXM", tmp_path / "r", measured={"mm": 1e-6})
    assert [p.suffix for p in written] == [".png", ".svg"] and all(p.stat().st_size > 1000 for p in written)
    cpu = apply_ceilings(local_cpu(), data)
    svg = roofline_svg(_tiny_graph(), cpu, ceilings=data)
    assert svg.startswith("<svg") and "</svg>" in svg and "L1" in svg


def test_op_kinds_are_one_marker_each_sized_by_their_share_of_the_time():
    from perfpredict.kernels.plot import kind_points, roofline_points, roofline_svg

    h100 = get_device("H100-SXM")
    points = roofline_points(_tiny_graph(), h100)
    kinds = kind_points(points, h100)
    assert sorted(k["op"] for k in kinds) == sorted({p["op"] for p in points})
    assert sum(k["time_share"] for k in kinds) == pytest.approx(1.0)
    # a memory-bound kind achieves its intensity x the bandwidth
    relu = next(k for k in kinds if k["op"] == "relu")
    assert relu["achieved_flops_per_s"] == pytest.approx(0.25 * h100.memory_bandwidth_bytes_per_s)
    svg = roofline_svg(_tiny_graph(), h100)
    assert all(f"{k['op']}: {k['time_share']:.1%} of the roofline time" in svg for k in kinds)
