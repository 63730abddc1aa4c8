"""The analytical predictor's arithmetic on hand-built graphs, and predict_many's batch scaling."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perfpredict.core import ops
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.hardware.devices import get_device
from perfpredict.predictors.analytical import ACHIEVED_FRACTION, AnalyticalPredictor
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.memory_model import activation_peak, element_bytes, free_steps


def _matmul_graph(m: int, k: int, n: int, dtype: str = "bfloat16") -> OpGraph:
    size = ops.DTYPE_BYTES[dtype]
    node = OpNode(
        "mm",
        ops.MATMUL,
        "mm",
        (TensorMeta((m, k), dtype), TensorMeta((k, n), dtype)),
        (TensorMeta((m, n), dtype),),
        flops=ops.matmul_flops((m, k), (k, n)),
        bytes_read=(m * k + k * n) * size,
        bytes_written=m * n * size,
        params=k * n,
    )
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
    measured = dataclasses.replace(
        device, memory_bandwidth_bytes_per_s=3.0e12, measured=frozenset({"memory_bandwidth_bytes_per_s"})
    )
    graph = _matmul_graph(1, 8192, 8192)
    t_measured = AnalyticalPredictor().latency_s(graph, measured, RunConfig()) - device.launch_overhead_s
    assert t_measured == pytest.approx((8192 + 8192 * 8192 + 8192) * 2 / 3.0e12, rel=1e-9)


def _chain(sizes: list[int]) -> OpGraph:
    """a -> b -> c ...: each node consumes the previous one's output."""
    nodes = tuple(
        OpNode(f"n{i}", ops.ELEMENTWISE, "relu", outputs=(TensorMeta((s,), "uint8"),)) for i, s in enumerate(sizes)
    )
    edges = tuple((i, i + 1) for i in range(len(sizes) - 1))
    return OpGraph(nodes, edges, keep_alive=frozenset({len(sizes) - 1}))


def test_liveness_peak_of_a_chain_is_the_largest_adjacent_pair():
    graph = _chain([10, 100, 1000, 1])
    sizes = np.array([[10.0], [100.0], [1000.0], [1.0]])
    # live after each allocation: 10; 10+100; 100+1000 (10 freed); 1000+1 -> peak 1100
    assert activation_peak(sizes, free_steps(graph))[0] == 1100


def test_liveness_keeps_a_skip_connection_alive():
    # n0 feeds n1 and n3 (a residual): n0's 500 bytes stay live through n1 and n2
    nodes = tuple(
        OpNode(f"n{i}", ops.ELEMENTWISE, "add", outputs=(TensorMeta((s,), "uint8"),))
        for i, s in enumerate([500, 10, 10, 10])
    )
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
    many = perfpredict.predict_many(
        model,
        (torch.randn(4, 64),),
        [{"device": "H100-SXM", "batch_size": b} for b in (1, 4, 37)],
        predictor="analytical",
    )
    for result in many.records():
        single = perfpredict.predict(
            model, (torch.randn(result["batch_size"], 64),), device="H100-SXM", predictor="analytical"
        )
        assert result["latency_ms"] == pytest.approx(single.latency_ms.value, rel=1e-9)
        assert result["peak_memory_bytes"] == pytest.approx(single.peak_memory_bytes.value, rel=1e-9)
        assert result["energy_j"] == pytest.approx(single.energy_j.value, rel=1e-9)


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
    trained = dataclasses.replace(
        trained, trainable_param_count=trained.param_count, trainable_param_bytes=trained.param_bytes
    )
    training = AnalyticalPredictor().predict(trained, device, RunConfig(phase="training"))
    assert training.memory.load_transient_bytes == 0  # weights + grads + AdamW state: 4x the bf16 weights


def test_weights_built_in_must_be_a_floating_dtype():
    from perfpredict.core.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="weights_built_in"):
        RunConfig(weights_built_in="int8")


def test_predict_many_and_the_report_carry_the_load():
    import torch

    import perfpredict

    model = torch.nn.Linear(2048, 2048).eval()
    x = torch.randn(2, 2048)
    many = perfpredict.predict_many(model, (x,), [{"device": "H100-SXM"}], dtype="bfloat16")
    report = perfpredict.predict(model, (x,), device="H100-SXM", dtype="bfloat16", predictor="analytical")
    direct = perfpredict.predict(
        model, (x,), device="H100-SXM", dtype="bfloat16", predictor="analytical", weights_built_in=None
    )
    assert many["peak_memory_bytes"][0] == pytest.approx(report.peak_memory_bytes.value, rel=1e-9)
    assert report.memory.load_transient_bytes > 0 and direct.memory.load_transient_bytes == 0
    assert report.peak_memory_bytes.value - direct.peak_memory_bytes.value == report.memory.load_transient_bytes
    assert any("weights_built_in=None" in note for note in report.notes)
    assert not any("weights_built_in" in note for note in direct.notes)


def _conv_net(phase: str = "inference", backward: bool = False) -> OpGraph:
    """image (1000 B) -> conv (800 B out, 100 B of weights) -> relu (800 B) -> pool (10 B), all uint8."""
    u8 = "uint8"
    conv = OpNode(
        "conv",
        ops.CONV,
        "conv2d",
        (TensorMeta((1000,), u8),),
        (TensorMeta((800,), u8),),
        bytes_read=1100,
        bytes_written=800,
        params=100,
        attrs={"backward": backward},
    )
    relu = OpNode(
        "relu",
        ops.ELEMENTWISE,
        "relu",
        (TensorMeta((800,), u8),),
        (TensorMeta((800,), u8),),
        bytes_read=800,
        bytes_written=800,
    )
    pool = OpNode(
        "pool",
        ops.POOLING,
        "avg_pool",
        (TensorMeta((800,), u8),),
        (TensorMeta((10,), u8),),
        bytes_read=800,
        bytes_written=10,
    )
    return OpGraph(
        (conv, relu, pool),
        ((0, 1), (1, 2)),
        phase=phase,
        dtype=u8,
        input_bytes=1000,
        param_count=100,
        param_bytes=100,
        keep_alive=frozenset({2}),
    )


def test_a_gpu_conv_holds_a_copy_of_its_input_and_output_while_it_runs():
    from perfpredict.predictors.cost_arrays import CostArrays
    from perfpredict.predictors.memory_model import gpu_conv_workspace_bytes

    graph = _conv_net()
    arrays = CostArrays.from_graph(graph)
    _, moved, out_bytes, _ = arrays.at(np.array([1.0]))
    # moved 1900 = 1000 in + 100 weights + 800 out: the scratch is in + out, weights left out
    assert gpu_conv_workspace_bytes(graph, moved, out_bytes)[:, 0].tolist() == [1800.0, 0.0, 0.0]
    assert gpu_conv_workspace_bytes(_conv_net(backward=True), moved, out_bytes).sum() == 0

    def activations(device: str) -> float:
        return float(
            AnalyticalPredictor()
            .evaluate(arrays, get_device(device), RunConfig(), np.array([1.0]))
            .activations_bytes[0]
        )

    # liveness alone: conv out + relu out = 1600 at the relu, plus the 1000 B image (a graph input)
    assert activations("cpu") == 1600 + 1000
    # a GPU adds the 1800 B scratch at the conv step, where 800 B are live: 2600, plus the image
    assert activations("H100-SXM") == 2600 + 1000


def test_transient_bytes_count_only_at_their_own_step():
    graph = _chain([10, 100, 1000, 1])
    sizes = np.array([[10.0], [100.0], [1000.0], [1.0]])
    # 500 B of scratch at n1 (live 110 there) stays under the 1100 peak at n2; 2000 at n0 (live 10) sets it
    assert activation_peak(sizes, free_steps(graph), np.array([[0.0], [500.0], [0.0], [0.0]]))[0] == 1100
    assert activation_peak(sizes, free_steps(graph), np.array([[2000.0], [0.0], [0.0], [0.0]]))[0] == 2010


def test_a_training_step_that_keeps_only_the_loss_frees_the_logits_before_the_backward():
    # n0 logits (1000 B, a graph output) -> n1 loss (1 B, a graph output) -> n2 backward (500 B grad, a parameter
    # gradient output) -> n3 backward (1200 B)
    u8 = "uint8"
    nodes = (
        OpNode("logits", ops.MATMUL, "mm", outputs=(TensorMeta((1000,), u8),)),
        OpNode("loss", ops.LOSS, "nll_loss", outputs=(TensorMeta((1,), u8),)),
        OpNode("grad_w", ops.MATMUL, "mm", outputs=(TensorMeta((500,), u8),), attrs={"backward": True}),
        OpNode("grad_x", ops.ELEMENTWISE, "mul", outputs=(TensorMeta((1200,), u8),), attrs={"backward": True}),
    )
    graph = OpGraph(
        nodes, ((0, 1), (1, 2), (2, 3)), phase="training", keep_alive=frozenset({0, 1, 2}), grad_outputs=frozenset({2})
    )
    sizes = np.array([[1000.0], [1.0], [500.0], [1200.0]])
    kept, dropped = free_steps(graph), free_steps(graph, forward_outputs_kept=False)
    assert kept.tolist() == [4, 4, 4, 3]
    assert dropped.tolist() == [1, 2, 4, 3]  # logits die after the loss, the loss after its backward
    # the backward's peak: 1000 + 1 + 500 + 1200 with the logits kept, 500 + 1200 without
    assert activation_peak(sizes, kept)[0] == 2701 and activation_peak(sizes, dropped)[0] == 1700
    inference = dataclasses.replace(graph, phase="inference")  # an inference graph's outputs are the result
    assert free_steps(inference, forward_outputs_kept=False).tolist() == kept.tolist()


def test_the_analytical_model_frees_the_logits_on_a_gpu_keeps_them_on_a_cpu_and_takes_an_override():
    from perfpredict.predictors.cost_arrays import CostArrays

    u8 = "uint8"
    nodes = (
        OpNode("logits", ops.MATMUL, "mm", outputs=(TensorMeta((1000,), u8),)),
        OpNode("loss", ops.LOSS, "nll_loss", outputs=(TensorMeta((1,), u8),)),
        OpNode("grad_x", ops.ELEMENTWISE, "mul", outputs=(TensorMeta((1200,), u8),), attrs={"backward": True}),
    )
    graph = OpGraph(nodes, ((0, 1), (1, 2)), phase="training", dtype=u8, keep_alive=frozenset({0, 1}))
    arrays = CostArrays.from_graph(graph)

    def activations(device: str, kept: bool | None = None) -> float:
        ev = AnalyticalPredictor().evaluate(
            arrays, get_device(device), RunConfig(phase="training"), np.array([1.0]), forward_outputs_kept=kept
        )
        return float(ev.activations_bytes[0])

    # kept: 1000 + 1 + 1200 live at the backward; freed: the logits die after the loss, the loss after the backward
    assert activations("cpu") == activations("H100-SXM", kept=True) == 2201
    assert activations("H100-SXM") == activations("cpu", kept=False) == 1201


def test_a_gpu_training_step_s_gradients_are_born_in_its_backward_and_meet_the_optimizer_scratch_at_its_end():
    from perfpredict.predictors.cost_arrays import CostArrays
    from perfpredict.predictors.memory_model import backward_born_peak, fixed_tensor_bytes

    # n0 activation (1000 B) -> n1 loss (1 B) -> n2 backward mm (500 B) -> n3 its transpose, a parameter gradient.
    # 800 B of parameters train: the walk carries 500 B of their gradients, the other 300 B join at the end.
    u8 = "uint8"
    nodes = (
        OpNode("act", ops.MATMUL, "mm", outputs=(TensorMeta((1000,), u8),)),
        OpNode("loss", ops.LOSS, "nll_loss", outputs=(TensorMeta((1,), u8),)),
        OpNode("grad_mm", ops.MATMUL, "mm", outputs=(TensorMeta((500,), u8),), attrs={"backward": True}),
        OpNode("grad_w", ops.VIEW, "t", outputs=(TensorMeta((500,), u8),), attrs={"backward": True}),
    )
    graph = OpGraph(
        nodes,
        ((0, 1), (0, 2), (1, 2), (2, 3)),
        phase="training",
        dtype=u8,
        param_bytes=800,
        trainable_param_bytes=800,
        keep_alive=frozenset({1, 3}),
        grad_outputs=frozenset({3}),
    )
    walk = np.array([[1000.0], [1.0], [500.0], [0.0]])
    frees = free_steps(graph, {}, forward_outputs_kept=False)
    # live: 1000, 1001, 1501 at the backward mm (no gradient resident before it), then 500 kept to the end
    assert backward_born_peak(graph, walk, frees, None, (), 800.0, 0.0).total[0] == 1501 - 800
    # the optimizer step: 500 carried + 300 joining + 800 of AdamW scratch = 1600 tops the backward's 1501
    assert backward_born_peak(graph, walk, frees, None, (), 800.0, 800.0).total[0] == 1600 - 800

    arrays = CostArrays.from_graph(graph)
    for optimizer, peak in (("sgd", 1501), ("adamw", 1600)):
        config = RunConfig(phase="training", optimizer=optimizer)
        ev = AnalyticalPredictor().evaluate(arrays, get_device("H100-SXM"), config, np.array([1.0]))
        # the breakdown's resident terms (weights, gradients, optimizer state) plus its activations: the peak
        resident = fixed_tensor_bytes(graph, config)
        assert resident + ev.activations_bytes[0] == 800 + 800 * config.optimizer_states + peak
    # a CPU keeps memory model 1's accounting: every gradient resident, the walk on top
    cpu = AnalyticalPredictor().evaluate(arrays, get_device("cpu"), RunConfig(phase="training"), np.array([1.0]))
    assert cpu.activations_bytes[0] == 1501


def test_predict_with_a_dtype_captures_once_and_then_answers_from_the_cache(monkeypatch):
    import torch

    import perfpredict
    from perfpredict.compiler_hooks import capture

    calls = []
    real = capture.capture_graph
    monkeypatch.setattr(capture, "capture_graph", lambda *a, **k: calls.append(1) or real(*a, **k))
    model = torch.nn.Sequential(torch.nn.Linear(32, 32)).eval()
    x = torch.randn(4, 32)
    first = perfpredict.predict(model, (x,), device="L4", dtype="bfloat16", predictor="analytical")
    again = perfpredict.predict(model, (x,), device="A100-80GB", dtype="bfloat16", predictor="analytical")
    assert len(calls) == 1 and first.dtype == again.dtype == "bfloat16"
    assert next(model.parameters()).dtype == torch.float32  # the caller's model is never cast
