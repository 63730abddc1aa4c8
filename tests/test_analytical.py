"""The analytical predictor's arithmetic on hand-built graphs, and predict_many's batch scaling."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perfpredict import ops
from perfpredict.devices import get_device
from perfpredict.graph import OpGraph, OpNode, TensorMeta
from perfpredict.predictors.analytical import ACHIEVED_FRACTION, AnalyticalPredictor
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.memory_model import activation_peak, element_bytes, free_steps


def _matmul_graph(m: int, k: int, n: int, dtype: str = "bfloat16") -> OpGraph:
    size = ops.DTYPE_BYTES[dtype]
    node = OpNode("mm", ops.MATMUL, "mm", (TensorMeta((m, k), dtype), TensorMeta((k, n), dtype)),
                  (TensorMeta((m, n), dtype),), flops=ops.matmul_flops((m, k), (k, n)),
                  bytes_read=(m * k + k * n) * size, bytes_written=m * n * size, params=k * n)
    return OpGraph((node,), (), batch_size=m, dtype=dtype, param_count=k * n, param_bytes=k * n * size)


def test_large_bf16_matmul_is_compute_bound_on_tensor_cores():
    device = get_device("H100-SXM")
    graph = _matmul_graph(8192, 8192, 8192)
    out = AnalyticalPredictor().predict(graph, device, RunConfig())
    # 2*8192^3 = 1.0995e12 FLOPs at 80% of the dense BF16 tensor peak, plus one launch
    expected_s = 2 * 8192**3 / (device.peak_flops_per_s["bf16_tensor"] * ACHIEVED_FRACTION["gpu"]["tensor"])
    assert out.latency_ms.value == pytest.approx((expected_s + device.launch_overhead_s) * 1e3, rel=1e-9)
    assert out.per_op[0].bound == "compute"
    assert out.latency_ms.low < out.latency_ms.value < out.latency_ms.high


def test_fp32_matmul_uses_vector_peak_unless_tf32():
    device = get_device("A100-40GB")
    graph = _matmul_graph(4096, 4096, 4096, "float32")
    plain = AnalyticalPredictor().latency_s(graph, device, RunConfig())
    tf32 = AnalyticalPredictor().latency_s(graph, device, RunConfig(tf32=True))
    # A100: 19.5 TF FP32 vs 156 TF TF32 (both derated by different fractions): TF32 is ~7x faster
    assert 5 < plain / tf32 < 10


def test_vector_times_matrix_is_memory_bound():
    device = get_device("H100-SXM")
    out = AnalyticalPredictor().predict(_matmul_graph(1, 8192, 8192), device, RunConfig())
    assert out.per_op[0].bound == "memory"
    # reads 8192*8192*2 bytes of weight (+ the tiny vector) at 90% of 3.35 TB/s
    moved = (8192 + 8192 * 8192 + 8192) * 2
    expected_s = moved / (device.memory_bandwidth_bytes_per_s * ACHIEVED_FRACTION["gpu"]["memory"])
    assert out.latency_ms.value == pytest.approx((expected_s + device.launch_overhead_s) * 1e3, rel=1e-9)


def test_measured_bandwidth_replaces_derated_datasheet():
    device = get_device("H100-SXM")
    measured = dataclasses.replace(device, memory_bandwidth_bytes_per_s=3.0e12,
                                   measured=frozenset({"memory_bandwidth_bytes_per_s"}))
    graph = _matmul_graph(1, 8192, 8192)
    t_measured = AnalyticalPredictor().latency_s(graph, measured, RunConfig()) - device.launch_overhead_s
    assert t_measured == pytest.approx((8192 + 8192 * 8192 + 8192) * 2 / 3.0e12, rel=1e-9)


def _chain(sizes: list[int]) -> OpGraph:
    """a -> b -> c ...: each node consumes the previous one's output."""
    nodes = tuple(OpNode(f"n{i}", ops.ELEMENTWISE, "relu", outputs=(TensorMeta((s,), "uint8"),))
                  for i, s in enumerate(sizes))
    edges = tuple((i, i + 1) for i in range(len(sizes) - 1))
    return OpGraph(nodes, edges, keep_alive=frozenset({len(sizes) - 1}))


def test_liveness_peak_of_a_chain_is_the_largest_adjacent_pair():
    graph = _chain([10, 100, 1000, 1])
    sizes = np.array([[10.0], [100.0], [1000.0], [1.0]])
    # live after each allocation: 10; 10+100; 100+1000 (10 freed); 1000+1 -> peak 1100
    assert activation_peak(sizes, free_steps(graph))[0] == 1100


def test_liveness_keeps_a_skip_connection_alive():
    # n0 feeds n1 and n3 (a residual): n0's 500 bytes stay live through n1 and n2
    nodes = tuple(OpNode(f"n{i}", ops.ELEMENTWISE, "add", outputs=(TensorMeta((s,), "uint8"),))
                  for i, s in enumerate([500, 10, 10, 10]))
    graph = OpGraph(nodes, ((0, 1), (1, 2), (2, 3), (0, 3)), keep_alive=frozenset({3}))
    sizes = np.array([[500.0], [10.0], [10.0], [10.0]])
    # at n3: 500 (n0) + 10 (n2) + 10 (n3) = 520; n1 was freed after n2
    assert activation_peak(sizes, free_steps(graph))[0] == 520


def test_a_kept_element_of_a_multi_output_op_does_not_keep_its_siblings_alive():
    # A training batch norm: n0 returns (out 1000 B, running stat 4 B); the stat is a graph output, the out
    # feeds n2 and is then dead. n3 is a backward returning (grad input 800 B, grad weight 4 B); its grad
    # weight is a parameter gradient (counted by the gradient term), its grad input feeds n5.
    u8 = "uint8"
    nodes = (
        OpNode("bn", ops.NORM, "bn", outputs=(TensorMeta((1000,), u8), TensorMeta((4,), u8))),
        OpNode("stat", ops.VIEW, "getitem", outputs=(TensorMeta((4,), u8),)),
        OpNode("relu", ops.ELEMENTWISE, "relu", outputs=(TensorMeta((1000,), u8),)),
        OpNode("bwd", ops.CONV, "convolution_backward", outputs=(TensorMeta((800,), u8), TensorMeta((4,), u8))),
        OpNode("gw", ops.VIEW, "getitem", outputs=(TensorMeta((4,), u8),)),
        OpNode("gi", ops.VIEW, "getitem", outputs=(TensorMeta((800,), u8),)),
        OpNode("next", ops.ELEMENTWISE, "mul", outputs=(TensorMeta((10,), u8),)),
    )
    edges = ((0, 1), (0, 2), (2, 3), (3, 4), (3, 5), (5, 6))
    graph = OpGraph(nodes, edges, phase="training", keep_alive=frozenset({1, 4, 6}), grad_outputs=frozenset({4}))
    sizes = np.array([[1004.0], [0.0], [1000.0], [804.0], [0.0], [0.0], [10.0]])  # views own nothing yet
    moved = element_bytes(graph, sizes)
    # The picked stat and grad input own their bytes; the grad weight's go to the gradient term.
    assert moved[:, 0].tolist() == [1000.0, 4.0, 1000.0, 0.0, 0.0, 800.0, 10.0]
    frees = free_steps(graph)
    assert frees[0] == 2 and frees[1] == len(nodes)  # the out dies after relu; the stat lives to the end
    assert frees[5] == 6  # the grad input dies after its consumer
    # peak: bn out + stat + relu out while relu runs
    assert activation_peak(moved, frees)[0] == 2004
    # Before, the stat kept the whole 1004 B tuple to the end and the grad weight the 804 B one:
    # 1004 + 1000 + 804 at the backward.
    assert activation_peak(sizes, _old_frees(graph))[0] == 2808


def _old_frees(graph: OpGraph) -> np.ndarray:
    """The liveness as it was before picked elements had their own storage (every view extends its base)."""
    from perfpredict.predictors.memory_model import storage_roots

    root = storage_roots(graph)
    last = list(range(len(graph.nodes)))
    for src, dst in graph.edges:
        last[root[src]] = max(last[root[src]], dst)
    for i in graph.keep_alive:
        last[root[i]] = len(graph.nodes)
    return np.array(last)


def test_predict_many_is_exact_at_other_batch_sizes():
    import torch

    import perfpredict

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).eval()
    many = perfpredict.predict_many(model, (torch.randn(4, 64),),
                                    [{"device": "H100-SXM", "batch_size": b} for b in (1, 4, 37)])
    for result in many:
        single = perfpredict.predict(model, (torch.randn(result.batch_size, 64),), device="H100-SXM",
                                     predictor="analytical")  # predict_many's default; "auto" may be learned
        assert result.latency_ms == pytest.approx(single.latency_ms.value, rel=1e-9)
        assert result.peak_memory_bytes == pytest.approx(single.peak_memory_bytes.value, rel=1e-9)
        assert result.energy_j == pytest.approx(single.energy_j.value, rel=1e-9)


def test_half_precision_weights_built_in_float32_peak_at_their_float32_size():
    device = get_device("H100-SXM")
    graph = _matmul_graph(2, 4096, 4096)  # 32 MiB of bf16 weights, a few KiB of activations
    built = AnalyticalPredictor().predict(graph, device, RunConfig())
    loaded = AnalyticalPredictor().predict(graph, device, RunConfig(weights_built_in=None))
    weights_bf16 = 4096 * 4096 * 2
    # Module.to(bfloat16): every weight in float32, plus the one being cast, in bfloat16
    load_peak = 2 * weights_bf16 + weights_bf16
    step = loaded.memory.total_bytes - device.runtime_overhead_bytes
    assert loaded.memory.load_transient_bytes == 0
    assert built.memory.load_transient_bytes == load_peak - step
    assert built.peak_memory_bytes.value == load_peak + device.runtime_overhead_bytes


def test_the_load_adds_nothing_when_the_step_needs_more_or_nothing_is_cast():
    device = get_device("H100-SXM")
    fp32 = _matmul_graph(2, 4096, 4096, "float32")
    assert AnalyticalPredictor().predict(fp32, device, RunConfig()).memory.load_transient_bytes == 0
    big_batch = _matmul_graph(65536, 4096, 4096)  # 512 MiB of activations dwarf 96 MiB of load
    assert AnalyticalPredictor().predict(big_batch, device, RunConfig()).memory.load_transient_bytes == 0
    trained = _matmul_graph(2, 4096, 4096)
    trained = dataclasses.replace(trained, trainable_param_count=trained.param_count,
                                  trainable_param_bytes=trained.param_bytes)
    training = AnalyticalPredictor().predict(trained, device, RunConfig(phase="training"))
    assert training.memory.load_transient_bytes == 0  # weights + grads + AdamW state: 4x the bf16 weights


def test_weights_built_in_must_be_a_floating_dtype():
    from perfpredict.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="weights_built_in"):
        RunConfig(weights_built_in="int8")


def test_predict_many_and_the_report_carry_the_load():
    import torch

    import perfpredict

    model = torch.nn.Linear(2048, 2048).eval()
    x = torch.randn(2, 2048)
    many, = perfpredict.predict_many(model, (x,), [{"device": "H100-SXM"}], dtype="bfloat16")
    report = perfpredict.predict(model, (x,), device="H100-SXM", dtype="bfloat16", predictor="analytical")
    direct = perfpredict.predict(model, (x,), device="H100-SXM", dtype="bfloat16", predictor="analytical",
                                 weights_built_in=None)
    assert many.peak_memory_bytes == pytest.approx(report.peak_memory_bytes.value, rel=1e-9)
    assert report.memory.load_transient_bytes > 0 and direct.memory.load_transient_bytes == 0
    assert report.peak_memory_bytes.value - direct.peak_memory_bytes.value == report.memory.load_transient_bytes
    assert any("weights_built_in=None" in note for note in report.notes)
    assert not any("weights_built_in" in note for note in direct.notes)
