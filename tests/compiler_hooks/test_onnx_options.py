"""An ONNX file takes --batch, --seq and --dtype: each applied to the file's dynamic dimensions and floating tensors,
or refused in one line naming --input-shape; before, the CLI threw --batch and --seq away and ignored --dtype, and
answered in float32 at the file's own batch with exit 0."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from perfpredict.compiler_hooks.onnx_file import graph_from_onnx_args  # noqa: E402
from perfpredict.core.errors import InvalidInputError  # noqa: E402

VOCAB, WIDTH = 100, 16


def _text_model(batch="batch", seq="seq"):
    """input_ids[batch, seq] -> Gather(E 100x16) -> MatMul(W 16x16): a token embedding and one projection."""
    inits = [
        numpy_helper.from_array(np.zeros((VOCAB, WIDTH), "float32"), "E"),
        numpy_helper.from_array(np.zeros((WIDTH, WIDTH), "float32"), "W"),
    ]
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["h"]), helper.make_node("MatMul", ["h", "W"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "text",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def dynamic(tmp_path):
    path = tmp_path / "text.onnx"
    onnx.save_model(_text_model(), str(path))
    return path


def test_batch_and_seq_size_the_dynamic_dimensions(dynamic):
    graph = graph_from_onnx_args(dynamic, batch=8, seq=32)
    matmul = next(n for n in graph.nodes if n.op == "matmul")
    assert graph.batch_size == 8 and matmul.inputs[0].shape == (8, 32, WIDTH)
    assert matmul.flops == 2 * 8 * 32 * WIDTH * WIDTH  # 2 x batch x seq x 16 x 16 = 131,072


def test_a_static_dimension_that_disagrees_is_refused_naming_input_shape(tmp_path):
    path = tmp_path / "static.onnx"
    onnx.save_model(_text_model(batch=1, seq=128), str(path))
    assert graph_from_onnx_args(path, batch=1, seq=128).batch_size == 1  # agreeing with the file is fine
    with pytest.raises(InvalidInputError, match=r"--batch 8 disagrees with input 'input_ids' of 'static.onnx': the "
                       r"file exports 1 there \(1x128\); drop --batch, or give .*--input-shape NAME=DIMS"):  # fmt: skip
        graph_from_onnx_args(path, batch=8)
    with pytest.raises(InvalidInputError, match="--seq 64 disagrees with input 'input_ids'"):
        graph_from_onnx_args(path, seq=64)


def test_seq_without_a_sequence_input_and_a_contradicting_input_shape_are_refused(dynamic, tmp_path):
    image = tmp_path / "image.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])
    relu = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "img", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])  # fmt: skip
    onnx.save_model(helper.make_model(relu, opset_imports=[helper.make_opsetid("", 17)]), str(image))
    assert graph_from_onnx_args(image, batch=4).batch_size == 4
    with pytest.raises(InvalidInputError, match=r"--seq 16 sizes .* has none \(its inputs: x=Nx3x8x8\)"):
        graph_from_onnx_args(image, batch=4, seq=16)
    with pytest.raises(InvalidInputError, match="--batch 8 disagrees .* --input-shape gives 2 there"):
        graph_from_onnx_args(dynamic, ["input_ids=2x32"], batch=8)


def test_dtype_costs_every_floating_tensor_and_weight_in_it(dynamic):
    fp32 = graph_from_onnx_args(dynamic, batch=2, seq=16)
    bf16 = graph_from_onnx_args(dynamic, batch=2, seq=16, dtype="bfloat16")
    # (100 x 16 + 16 x 16) weights: 1,856 x 4 bytes in float32, x 2 in bfloat16
    assert (fp32.param_bytes, bf16.param_bytes) == (1_856 * 4, 1_856 * 2)
    assert bf16.dtype == "bfloat16" and fp32.dtype == "float32"
    ids = next(t for n in bf16.nodes for t in n.inputs if t.shape == (2, 16))
    assert ids.dtype == "int64"  # token ids keep theirs


def test_the_cli_applies_batch_seq_and_dtype_to_an_onnx_file(dynamic, capsys):
    from perfpredict.cli import main

    ask = ["predict", "--onnx", str(dynamic), "--device", "L4", "--batch", "8", "--seq", "32"]
    assert main([*ask, "--dtype", "bfloat16", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["batch_size"], report["dtype"]) == (8, "bfloat16")
    assert report["assumptions"]["dtype"].startswith("bfloat16 (from --dtype): the file's floating tensors")
    assert main([*ask, "--attn-implementation", "eager"]) == 2
    assert "cannot change an ONNX file's attention" in capsys.readouterr().err
