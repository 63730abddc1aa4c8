"""The ONNX frontend: shapes, overrides, external data, unknown ops, onnx-tool cross-check, CLI errors."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from perfpredict.compiler_hooks.onnx_file import graph_from_onnx_args, parse_input_shapes  # noqa: E402
from perfpredict.compiler_hooks.onnx_frontend import graph_from_onnx, onnx_tool_crosscheck  # noqa: E402
from perfpredict.core.errors import FrontendError, InvalidInputError, PerfPredictError  # noqa: E402
from perfpredict.graph_report import report_for_graph  # noqa: E402


def _mlp(extra_node=None):
    """x[batch, 64] -> MatMul(W1 64x128) + b1 -> Relu -> Gemm(W2 128x10, b2): a dynamic batch dimension."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((64, 128)).astype("float32"), "W1"),
        numpy_helper.from_array(np.zeros(128, "float32"), "b1"),
        numpy_helper.from_array(rng.standard_normal((10, 128)).astype("float32"), "W2"),
        numpy_helper.from_array(np.zeros(10, "float32"), "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], transB=1),
    ]
    out = "y"
    if extra_node is not None:
        nodes.append(extra_node)
        out = extra_node.output[0]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        inits,
    )
    opsets = [helper.make_opsetid("", 17)]
    if extra_node is not None and extra_node.domain:
        opsets.append(helper.make_opsetid(extra_node.domain, 1))
    return helper.make_model(graph, opset_imports=opsets)


def test_flops_bytes_and_params_from_onnx_with_input_shape_override():
    g = graph_from_onnx(_mlp(), input_shapes={"x": (4, 64)})
    # matmul 2*4*64*128 = 65,536 (bias add folded in); relu 4*128 = 512; gemm 2*4*128*10 = 10,240
    assert g.total_flops == 65_536 + 512 + 10_240
    assert [n.op for n in g.nodes] == ["matmul", "elementwise", "matmul"]
    assert g.param_count == 64 * 128 + 128 + 10 * 128 + 10 and g.batch_size == 4 and g.coverage == 1.0
    first = g.nodes[0]  # reads x, W1, b1 once; writes h once: (4*64 + 64*128 + 128 + 4*128) * 4 bytes
    assert first.bytes_read + first.bytes_written == (256 + 8192 + 128 + 512) * 4
    report = report_for_graph(g, device="A100-40GB")
    assert report.latency_ms.value > 0 and report.graph.source == "onnx"


def test_dynamic_dimension_without_shape_is_a_clear_error():
    with pytest.raises(InvalidInputError, match=r"input_shapes=\{'x': \(1, 128\)\}|--input-shape x="):
        graph_from_onnx(_mlp())
    with pytest.raises(InvalidInputError, match="model's inputs are"):
        graph_from_onnx(_mlp(), input_shapes={"nope": (1, 64)})


def test_external_data_is_loaded_from_the_model_folder(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save_model(
        _mlp(),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="mlp.weights",
        size_threshold=0,
    )
    assert (tmp_path / "mlp.weights").stat().st_size >= (64 * 128 + 10 * 128) * 4
    g = graph_from_onnx(str(path), input_shapes={"x": (2, 64)})
    assert g.param_bytes == (64 * 128 + 128 + 10 * 128 + 10) * 4
    assert g.total_flops == 2 * 2 * 64 * 128 + 2 * 128 + 2 * 2 * 128 * 10


def test_unknown_op_is_kept_and_lowers_coverage():
    custom = helper.make_node("FancyOp", ["y"], ["z"], domain="my.ops")
    model = _mlp(custom)
    g = graph_from_onnx(model, input_shapes={"x": (2, 64)})
    assert g.unknown_targets == {"my.ops.FancyOp": 1}
    assert g.coverage == pytest.approx(3 / 4)
    assert report_for_graph(g).latency_ms.value > 0


def test_onnx_tool_cross_check_agrees_on_macs_and_params():
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx_tool")
    import io

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(16)
            self.fc = torch.nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.bn(self.conv(x)))
            return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))

    buf = io.BytesIO()
    torch.onnx.export(CNN().eval(), (torch.randn(2, 3, 32, 32),), buf, dynamo=False)
    check = onnx_tool_crosscheck(onnx.load_from_string(buf.getvalue()))
    assert "error" not in check, check
    ours, theirs = check["ours"], check["onnx_tool"]
    # conv MACs: 2*32*32*16*3*3*3 = 884,736; fc: 2*16*10 = 320 (bias adds not counted, as torch counts)
    assert ours["macs"] == theirs["macs"] == 884_736 + 320
    assert ours["params"] == pytest.approx(theirs["params"], rel=0.01)
    assert ours["memory"] == pytest.approx(theirs["memory"], rel=0.10)


def test_onnx_tool_gaps_are_reported_not_raised():
    pytest.importorskip("onnx_tool")
    isnan = helper.make_node("IsNaN", ["y"], ["z"])
    check = onnx_tool_crosscheck(_mlp(isnan), input_shapes={"x": (2, 64)})
    assert check["ours"]["macs"] == 2 * 64 * 128 + 2 * 128 * 10  # ours is there whatever onnx-tool does
    assert "onnx_tool" in check or "error" in check


# --- CLI helpers: each failure is one PerfPredictError line (cli.py prints it and exits 2) -------------------


def test_cli_helper_parses_shapes_and_builds_the_graph(tmp_path):
    assert parse_input_shapes(["input_ids=1x128", "pixel_values=2x3x224x224"]) == {
        "input_ids": (1, 128),
        "pixel_values": (2, 3, 224, 224),
    }
    path = tmp_path / "m.onnx"
    onnx.save_model(_mlp(), str(path))
    g = graph_from_onnx_args(path, ["x=8x64"])
    assert g.batch_size == 8 and g.name == "m"


@pytest.mark.parametrize("case", ["missing", "not_onnx", "dynamic", "bad_spec", "unknown_name"])
def test_cli_helper_errors_are_one_clear_line(tmp_path, case):
    path = tmp_path / "m.onnx"
    onnx.save_model(_mlp(), str(path))
    args = {
        "missing": (tmp_path / "nope.onnx", ["x=1x64"]),
        "not_onnx": (tmp_path / "notes.txt", ["x=1x64"]),
        "dynamic": (path, []),
        "bad_spec": (path, ["x:1x64"]),
        "unknown_name": (path, ["wrong_name=1x128"]),
    }[case]
    (tmp_path / "notes.txt").write_text("this is not a model\n" * 20)
    with pytest.raises(PerfPredictError) as err:
        graph_from_onnx_args(*args)
    message = str(err.value)
    assert "\n" not in message
    expected = {
        "missing": "does not exist",
        "not_onnx": "ONNX",
        "dynamic": "--input-shape x=Nx64",
        "bad_spec": "NAME=DIMxDIM",
        "unknown_name": "--input-shape names 'wrong_name', which is not an input of 'm.onnx'; its inputs are: x=Nx64",
    }[case]
    assert expected in message
    assert isinstance(err.value, (InvalidInputError, FrontendError))


def test_a_dynamic_batch_export_at_batch_one_keeps_its_graph(tmp_path):
    """The dynamo exporter's BERT computes its mask shapes at run time; at batch 1 ONNX's shape inference lost every
    tensor after an ambiguous Expand (0 ops, then a ZeroDivisionError in the CLI). Folding the shape arithmetic
    keeps the graph: batch 1 has the ops of batch 2 and half its FLOPs."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    cfg = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100
    )
    path = tmp_path / "bert.onnx"
    torch.onnx.export(
        transformers.BertModel(cfg).eval(),
        (torch.randint(0, 100, (2, 16)),),
        str(path),
        dynamo=True,
        input_names=["input_ids"],
        dynamic_axes={"input_ids": {0: "batch", 1: "seq"}},
    )
    one, two = graph_from_onnx_args(path, ["input_ids=1x16"]), graph_from_onnx_args(path, ["input_ids=2x16"])
    assert len(one.nodes) == len(two.nodes) > 10 and [n.op for n in one.nodes] == [n.op for n in two.nodes]
    assert 2 * one.total_flops == two.total_flops
    assert report_for_graph(one, device="H100-SXM").latency_ms.value > 0


def test_an_empty_graph_is_refused_not_divided_by():
    empty = graph_from_onnx(_mlp(), input_shapes={"x": (2, 64)}).with_run(nodes=(), edges=())
    with pytest.raises(FrontendError, match="no operation"):
        report_for_graph(empty, device="H100-SXM")
