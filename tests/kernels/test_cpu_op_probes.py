"""The CPU op probes calibrate-host times: their FLOP and byte counts, their timing, the ceilings they give."""

from __future__ import annotations

import pytest

from perfpredict.core import ops
from perfpredict.kernels import cpu_op_probes as probes
from perfpredict.predictors import cpu_op_classes as classes
from perfpredict.predictors import host_model


def test_probe_counts_follow_the_graphs_formulas():
    g = probes.gemm_probe(64, 128, 256)
    assert g.flops == 2 * 64 * 128 * 256  # 4,194,304
    assert g.bytes == 4 * (64 * 128 + 128 * 256 + 64 * 256)  # x, w and out in float32: 229,376
    b = probes.gemm_probe(16, 8, 32, batch=4, dtype="bfloat16")
    assert b.flops == 2 * 4 * 16 * 8 * 32 and b.bytes == 2 * 4 * (16 * 8 + 8 * 32 + 16 * 32)
    c = probes.conv_probe(8, 16, 10, 3)  # padding 1: 10x10 out
    assert c.flops == 2 * 16 * 10 * 10 * 8 * 9  # 230,400, as ops.conv counts it
    assert c.bytes == 4 * (8 * 100 + 16 * 8 * 9 + 16 * 100)
    dw = probes.conv_probe(8, 8, 10, 3, stride=2, depthwise=True)  # 5x5 out, one input channel per group
    assert dw.cls == classes.CONV_DW and dw.flops == 2 * 8 * 25 * 1 * 9
    a = probes.attention_probe(2, 4, 16, 8)
    assert a.flops == ops.attention_flops((2, 4, 16, 8), (2, 4, 16, 8), (2, 4, 16, 8))  # 4 * 2 * 4 * 16^2 * 8
    e = probes.sized_probe(classes.ELTWISE, 1000)
    assert e.bytes == 4 * 3 * 1000  # two inputs and one output of 1000 floats


def test_every_class_is_probed_and_quick_is_a_subset():
    full, quick = probes.probe_set(), probes.probe_set(quick=True)
    assert {p.cls for p in full} == set(classes.CLASSES)
    assert {p.cls for p in quick} == set(classes.CLASSES) and len(quick) < len(full) / 3
    assert {p.dtype for p in full} == {"float32", "bfloat16"}
    assert all(p.bytes > 0 for p in full) and all(p.flops > 0 for p in full if p.cls in classes.SHAPED)


def test_probes_run_their_op_and_are_timed_in_rounds():
    chosen = [probes.gemm_probe(8, 8, 8), probes.sized_probe(classes.SOFTMAX, 4096)]
    out = chosen[0].build()()
    assert tuple(out.shape) == (8, 8)
    results = probes.time_probes(chosen, rounds=2, window_s=0.001)
    assert [r.label for r in results] == [p.label for p in chosen]
    assert all(r.seconds > 0 and r.rounds == 2 and r.spread >= 0 for r in results)
    # the clock given is the one read: one advancing 1 us per reading sizes a 10 ms window at 10,000 calls (one
    # call read as 1 us), then reads 1 us around the 10,000 calls of the round: 1e-10 s per call
    ticks = iter(range(0, 10**12, 1000))
    fake = probes.time_probes(chosen, rounds=1, window_s=0.01, clock=lambda: next(ticks))
    assert [r.seconds for r in fake] == pytest.approx([1e-10, 1e-10])


def test_ceilings_are_the_best_gemm_rate_and_the_largest_elementwise_bandwidth():
    def result(cls, dtype, flops, nbytes, seconds):
        return probes.ProbeResult(cls, dtype, "x", flops, nbytes, seconds, 0.0, 1)

    got = probes.ceilings(
        [
            result(classes.GEMM, "float32", 1e9, 1e6, 0.01),  # 100 GFLOP/s
            result(classes.GEMM, "float32", 1e8, 1e6, 0.002),  # 50 GFLOP/s
            result(classes.ELTWISE, "float32", 0.0, 1e8, 0.01),  # 10 GB/s, the largest
            result(classes.ELTWISE, "float32", 0.0, 1e4, 1e-6),  # 10 GB/s too, but in cache
        ]
    )
    assert got["fp32_flops_per_s"]["max"] == pytest.approx(1e11)
    assert got["dram_bandwidth_bytes_per_s"]["max"] == pytest.approx(1e10)
    assert got["launch_overhead_s"]["max"] == pytest.approx(1e-6)
    assert "bf16_flops_per_s" not in got  # no bfloat16 GEMM probed: nothing claimed


def test_a_quick_calibration_fits_an_op_model_and_measures_ceilings():
    from perfpredict.learning.host_calibration import calibrate

    profile = calibrate("ci", quick=True)
    model = profile.cpu_op_model()
    assert model is not None and model.threads >= 1
    assert {k.split("/")[0] for k in model.fits} == set(classes.CLASSES)
    assert profile.cpu_ceilings["fp32_flops_per_s"]["max"] > 1e8  # any CPU multiplies faster than 0.1 GFLOP/s
    assert profile.details["quick"] and len(profile.details["probes"]) == len(probes.probe_set(quick=True))
    again = host_model.HostProfile(**{**profile.__dict__})
    assert again.cpu_op_model().fits == model.fits
