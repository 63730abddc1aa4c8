"""The CPU op model: classes, fits, and its place in the two-timeline model and the catalog."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from perfpredict.core import op_kinds, ops
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.hardware.devices import get_device, reset_catalog
from perfpredict.kernels import cpu_op_probes as probes
from perfpredict.learning import cpu_op_model_fit as cof
from perfpredict.predictors import cpu_op_classes as classes
from perfpredict.predictors import cpu_op_model as com
from perfpredict.predictors import host_model
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.two_timeline import TwoTimelinePredictor, calibration


def test_graph_nodes_fall_into_the_probe_classes():
    assert com.op_class(ops.MATMUL, "linear") == classes.GEMM
    assert com.op_class(ops.CONV, "conv2d", groups=1) == classes.CONV
    assert com.op_class(ops.CONV, "conv2d", groups=32) == classes.CONV_DW
    assert com.op_class(ops.CONV, "conv2d", kernel=1, stride=1) == classes.CONV_1X1  # a GEMM over the pixels
    assert com.op_class(ops.CONV, "conv2d", kernel=1, stride=2) == classes.CONV  # a strided 1x1 is not
    # a 1x1 weight keeping 56x56 is pointwise; a 3x3 is spatial; a 1x1 halving the image is strided
    assert com.conv_geometry((1, 64, 56, 56), (256, 64, 1, 1), (1, 256, 56, 56)) == (1, 1)
    assert com.conv_geometry((1, 64, 56, 56), (64, 64, 3, 3), (1, 64, 56, 56)) == (3, 1)
    assert com.conv_geometry((1, 256, 56, 56), (512, 256, 1, 1), (1, 512, 28, 28)) == (1, 2)
    assert com.op_class(ops.NORM, "batch_norm") == classes.BATCH_NORM
    assert com.op_class(ops.NORM, "native_layer_norm_backward") == classes.LAYER_NORM
    assert com.op_class(ops.ELEMENTWISE, "gelu") == classes.ELTWISE_MATH
    assert com.op_class(ops.ELEMENTWISE, "add") == classes.ELTWISE
    assert com.op_class(ops.ELEMENTWISE, "gelu_backward") == classes.ELTWISE_MATH
    assert com.op_class(ops.ELEMENTWISE, "hardtanh") == classes.ELTWISE  # ReLU6: a clamp, not a tanh
    assert com.op_class(ops.UNKNOWN, "mystery") == classes.ELTWISE
    assert com.precision("bfloat16") == "half" and com.precision("float32") == "float32"
    assert set(com.KIND_OF) == set(classes.CLASSES)


def test_a_shaped_fit_recovers_the_figures_that_made_its_samples():
    # samples made by t = 5 us + flops / 100 GFLOP/s + bytes / 20 GB/s: the fit must find those three figures
    shapes = [(2e6, 1e5), (4e8, 3e6), (1e9, 1e6), (5e7, 4e7), (1e4, 2e4), (3e9, 6e7)]
    samples = [cof.Sample(classes.GEMM, "float32", f, b, 5e-6 + f / 1e11 + b / 2e10) for f, b in shapes]
    fit = cof.fit_shaped(samples)
    assert fit.overhead_s == pytest.approx(5e-6, rel=1e-6)
    assert 1 / fit.s_per_flop == pytest.approx(1e11, rel=1e-6)
    assert 1 / fit.s_per_byte == pytest.approx(2e10, rel=1e-6)
    assert fit.fit_mape < 1e-6


def test_the_least_squares_never_goes_negative():
    a = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]])
    x = cof.nonnegative_lstsq(a, np.array([3.0, 2.0, 1.0]))  # unconstrained: slope -1
    assert (x >= 0).all() and x[1] == 0.0 and x[0] == pytest.approx(2.0)


def test_isotonic_pools_the_values_that_go_down():
    assert cof.isotonic([1.0, 3.0, 2.0, 4.0], [1, 1, 1, 1]) == [1.0, 2.5, 2.5, 4.0]
    assert cof.isotonic([2.0, 1.0], [3, 1]) == [1.75, 1.75]  # (2 * 3 + 1 * 1) / 4


def test_a_sized_curve_is_flat_below_its_probes_and_keeps_the_last_rate_beyond():
    # 1 us up to 4 KiB, then 10 GB/s: 1 MiB in 104.9 us, 4 MiB in 419.4 us
    sizes = [1024.0, 4096.0, 2.0**20, 4 * 2.0**20]
    times = [1e-6, 1e-6, 2.0**20 / 1e10, 4 * 2.0**20 / 1e10]
    fit = cof.fit_sized([cof.Sample(classes.ELTWISE, "float32", 0.0, b, t) for b, t in zip(sizes, times)])
    got = fit.seconds(np.zeros(4), np.array([10.0, 2.0**21, 16 * 2.0**20, 64 * 2.0**20]))
    assert got[0] == pytest.approx(1e-6)  # below the smallest probe: its time
    assert 2.0**20 / 1e10 < got[1] < 4 * 2.0**20 / 1e10  # between probes
    assert got[2] == pytest.approx(16 * 2.0**20 / 1e10, rel=1e-6)  # beyond: the largest probe's rate
    assert got[3] == pytest.approx(4 * got[2], rel=1e-6)


def test_a_slow_outlier_does_not_lift_every_larger_size():
    sizes = [1e3, 1e4, 1e5, 1e6, 1e7]
    times = [1e-6, 1e-3, 1e-5, 1e-4, 1e-3]  # the 10 KB op was timed during a stall
    fit = cof.fit_sized([cof.Sample(classes.ELTWISE, "float32", 0.0, b, t) for b, t in zip(sizes, times)])
    assert fit.seconds(np.zeros(1), np.array([1e7]))[0] == pytest.approx(1e-3)
    assert np.all(np.diff(fit.log_s) >= 0)


def test_probe_dispatch_is_taken_off_once_and_never_all():
    r = probes.ProbeResult(classes.ELTWISE, "float32", "x", 0.0, 1e3, 3e-6, 0.0, 1)
    tiny = probes.ProbeResult(classes.ELTWISE, "float32", "y", 0.0, 1e2, 1e-6, 0.0, 1)
    got = cof.device_samples([r, tiny], {ops.ELEMENTWISE: 2.0})
    assert got[0].seconds == pytest.approx(1e-6)  # 3 us - 2 us of dispatch
    assert got[1].seconds == pytest.approx(1e-7)  # 1 us: at most 90% is dispatch


def _toy_model(gemm_rate: float) -> com.CpuOpModel:
    gemm = [cof.Sample(classes.GEMM, "float32", f, 1e6, 1e-6 + f / gemm_rate) for f in (1e7, 1e8, 1e9)]
    elt = [cof.Sample(classes.ELTWISE, "float32", 0.0, b, 1e-6 + b / 1e10) for b in (1e3, 1e5, 1e7)]
    return cof.fit(gemm + elt, threads=2, source="toy")


def test_the_model_round_trips_through_json_and_prices_nodes():
    model = _toy_model(1e11)
    again = com.CpuOpModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert again.fits == model.fits and again.threads == 2
    t = TensorMeta((64, 64), "float32")
    nodes = [
        OpNode("mm", ops.MATMUL, "linear", (t, t), (t,), flops=int(1e9), bytes_read=int(1e6)),
        OpNode("v", ops.VIEW, "view", (t,), (t,)),
        OpNode("sm", ops.SOFTMAX, "softmax", (t,), (t,), bytes_read=int(1e5)),
    ]
    got = again.node_seconds(nodes, np.array([[1e9], [0.0], [0.0]]), np.array([[1e6], [0.0], [1e5]]))
    assert got[0, 0] == pytest.approx(1e-6 + 1e9 / 1e11, rel=1e-3)
    assert got[1, 0] == 0.0  # a view runs nothing
    assert got[2, 0] > 0  # no softmax probes: the elementwise curve stands in


def _matmul_graph() -> OpGraph:
    x, w, y = (
        TensorMeta((512, 1024), "float32"),
        TensorMeta((1024, 1024), "float32"),
        TensorMeta((512, 1024), "float32"),
    )
    flops = 2 * 512 * 1024 * 1024  # 1.07 GFLOP
    node = OpNode("mm", ops.MATMUL, "linear", (x, w), (y,), flops=flops, bytes_read=x.nbytes + w.nbytes)
    return OpGraph(nodes=(node,), edges=(), phase="inference", batch_size=1, seq_len=None, dtype="float32", source="fx")


def test_a_calibrated_cpu_answers_with_its_own_op_model():
    reference = host_model.HostProfile.from_file(host_model.REFERENCE)
    fast = replace(reference, cpu_ops=_toy_model(2e11).to_dict())
    slow = replace(reference, cpu_ops=_toy_model(1e11).to_dict())
    graph, cpu = _matmul_graph(), get_device("cpu")
    t_fast = TwoTimelinePredictor(fast).latency_s(graph, cpu, RunConfig())
    t_slow = TwoTimelinePredictor(slow).latency_s(graph, cpu, RunConfig())
    # 1.07 GFLOP: 5.4 ms at 200 GFLOP/s, 10.7 ms at 100, times the CPU's device-time scale; the host part (one
    # op's dispatch) is the same
    scale = calibration(cpu, "device_time_scale", 1.0)
    assert t_slow - t_fast == pytest.approx(scale * graph.total_flops * (1 / 1e11 - 1 / 2e11), rel=1e-3)
    gpu = get_device("H100-SXM")  # a GPU never reads the CPU's op model
    assert TwoTimelinePredictor(fast).latency_s(graph, gpu, RunConfig()) == TwoTimelinePredictor(slow).latency_s(
        graph, gpu, RunConfig()
    )


def test_the_calibration_in_use_sets_the_cpu_devices_ceilings(tmp_path, monkeypatch):
    reference = host_model.HostProfile.from_file(host_model.REFERENCE)
    ceilings = {
        "fp32_flops_per_s": {"min": 1e11, "median": 1.2e11, "max": 1.5e11},
        "dram_bandwidth_bytes_per_s": {"min": 1e10, "median": 1.1e10, "max": 1.3e10},
    }
    path = tmp_path / "host.json"
    path.write_text(replace(reference, cpu_ceilings=ceilings).to_json())
    estimated = get_device("cpu")
    monkeypatch.setenv("PERFPREDICT_HOST_PROFILE", str(path))
    reset_catalog()
    cpu = get_device("cpu")
    assert cpu.peak_flops_per_s["fp32"] == 1.5e11 and cpu.memory_bandwidth_bytes_per_s == 1.3e10
    assert "calibrate-host" in cpu.source and "memory_bandwidth_bytes_per_s" in cpu.measured
    assert cpu.memory_bytes == estimated.memory_bytes  # what was not measured stays detected


def test_training_steps_get_their_own_dispatch_scale_where_fitted():
    profile = host_model.HostProfile(
        "p", {k: 1.0 for k in op_kinds.BUILTIN_KINDS}, 0.0, "t", {"cpu": 2.0, "cpu_training": 5.0}
    )
    assert host_model.dispatch_scale(profile, "cpu", "inference") == 2.0
    assert host_model.dispatch_scale(profile, "cpu", "training") == 5.0
    assert host_model.dispatch_scale(profile, "gpu", "training") == 1.0  # none fitted: 1
    gpu_only = replace(profile, dispatch_scale={"gpu": 3.0})
    assert host_model.dispatch_scale(gpu_only, "gpu", "training") == 3.0  # no training scale: the kind's


def test_the_reference_profile_carries_an_op_model_for_every_class():
    model = host_model.HostProfile.from_file(host_model.REFERENCE).cpu_op_model()
    assert model is not None and "op rows" in model.source
    assert all(model.fit_for(cls, "float32") is not None for cls in classes.CLASSES)
    # the op rows time attention as its parts (the meta device decomposes it): the GEMM fit stands in
    assert "attention/float32" not in model.fits
    assert model.fit_for(classes.ATTENTION, "float32") is model.fit_for(classes.GEMM, "float32")
    # GEMMs: more FLOPs never take less time, and a 1-GFLOP GEMM runs between 10 and 1000 GFLOP/s
    gemm = model.fit_for(classes.GEMM, "float32")
    t = gemm.seconds(np.array([1e8, 1e9, 1e10]), np.array([1e6, 4e6, 1.6e7]))
    assert np.all(np.diff(t) > 0) and 1e-3 < t[1] < 0.1
    assert math.isfinite(gemm.fit_mape)


def test_a_class_probed_at_a_few_shapes_follows_its_float32_fit_at_its_own_speed():
    # float32 GEMMs: 2 us + flops / 100 GFLOP/s; two bfloat16 probes run 4x faster than float32 at their shapes
    shapes = ((1e6, 1e4), (1e7, 3e5), (1e8, 2e6), (1e9, 4e6), (1e10, 5e7))  # (flops, bytes)
    f32 = [cof.Sample(classes.GEMM, "float32", f, b, 2e-6 + f / 1e11) for f, b in shapes]
    half = [cof.Sample(classes.GEMM, "half", f, b / 2, (2e-6 + f / 1e11) / 4) for f, b in shapes[2:4]]
    model = cof.fit(f32 + half, threads=2)
    got = model.fit_for(classes.GEMM, "half").seconds(np.array([1e11]), np.array([1e7]))
    assert got[0] == pytest.approx((2e-6 + 1e11 / 1e11) / 4, rel=1e-6)  # 100 GFLOP: 250 ms, not a constant
