"""The op-kind registry: one registration carries a kind through FLOPs, bytes, fusion, tensor cores and the host
probe; and one tensor-core decision is shared by the report, the learned features and the roofline plot."""

from __future__ import annotations

import math

import pytest

from perfpredict.core import op_kinds, ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.core.op_kinds import registry
from perfpredict.hardware.devices import get_device
from perfpredict.kernels.plot import roofline_points
from perfpredict.predictors.analytical import AnalyticalPredictor
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.two_timeline import TwoTimelinePredictor, fused_groups


@pytest.fixture
def scratch_registry(monkeypatch):
    """A copy of the registry, so a kind registered in a test is gone after it."""
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    monkeypatch.setattr(registry, "_VIEWS", set(registry._VIEWS))


def _spectral_flops(name, arg_metas, args, kwargs, outputs):
    n = arg_metas[0].shape[-1]
    return 5 * math.prod(arg_metas[0].shape[:-1]) * n * int(math.log2(n))  # NB: radix-2 FFT, 5 N log2 N


def _spectral_bytes(name, inputs, outputs, arg_metas):
    return 2 * sum(t.nbytes for t in inputs), sum(t.nbytes for t in outputs)  # two passes over the input


def _graph(*nodes: OpNode) -> OpGraph:
    return OpGraph(nodes=nodes, edges=tuple((i, i + 1) for i in range(len(nodes) - 1)), batch_size=1)


def _node(name: str, kind: str, dtype: str = "float32", flops: int = 0) -> OpNode:
    x = TensorMeta((64, 1024), dtype)
    return OpNode(name, kind, name, (x,), (x,), flops=flops, bytes_read=x.nbytes, bytes_written=x.nbytes)


def test_a_made_up_kind_flows_through_flops_bytes_fusion_and_tensor_cores(scratch_registry):
    op_kinds.register_op_kind(
        op_kinds.OpKind(
            "spectral",
            _spectral_flops,
            _spectral_bytes,
            tensor_cores=True,
            tf32_switch="cudnn",
            fusible=True,
            host_probe=lambda: lambda: None,
        )
    )
    x = TensorMeta((64, 1024), "float32")  # 64 rows of 1024 points, 256 KiB
    assert op_kinds.op_flops("spectral", "fft", [x], (), {}, [x]) == 5 * 64 * 1024 * 10  # 3_276_800
    assert op_kinds.op_bytes("spectral", "fft", [x], [x], [x]) == (2 * 262144, 262144)
    assert op_kinds.is_known("spectral") and _node("f", "spectral").known

    # fusion: inductor's groups take it in with its elementwise neighbour
    g = _graph(_node("mm", ops.MATMUL), _node("f", "spectral"), _node("add", ops.ELEMENTWISE), _node("mm2", ops.MATMUL))
    assert fused_groups(g) == [[0], [1, 2], [3]]

    # tensor cores: float32 as TF32 under cuDNN's switch, on for the report by default, as the plot shows it
    assert op_kinds.uses_tensor_cores("spectral", "float32", True, tf32=False, conv_tf32=True)
    assert not op_kinds.uses_tensor_cores("spectral", "float32", True, tf32=True, conv_tf32=False)
    assert RunConfig().tensor_cores("spectral", "float32", gpu=True)
    h100 = get_device("H100-SXM")
    heavy = _graph(_node("f", "spectral", flops=10**12))
    assert [p["peak_key"] for p in roofline_points(heavy, h100)] == ["tf32_tensor"]
    assert [p["peak_key"] for p in roofline_points(heavy, h100, conv_tf32=False)] == ["fp32"]
    out = AnalyticalPredictor().predict(heavy, h100, RunConfig())
    fp32 = AnalyticalPredictor().predict(heavy, h100, RunConfig(conv_tf32=False))
    assert out.latency_ms.value < fp32.latency_ms.value  # 10^12 FLOPs: compute-bound, faster on the tensor cores

    # the default predictor answers for it, on a GPU and a CPU (the learned models see it as no known kind)
    for device in (h100, get_device("cpu")):
        rows = TwoTimelinePredictor().predict(g, device, RunConfig()).per_op
        assert "spectral" in {r.op for r in rows}

    # the host probe is timed with the rest
    assert "spectral" in op_kinds.host_probes()


def test_the_registry_refuses_what_it_cannot_use(scratch_registry):
    with pytest.raises(InvalidInputError, match="already registered"):
        op_kinds.register_op_kind(op_kinds.OpKind(ops.MATMUL))
    with pytest.raises(InvalidInputError, match="tf32_switch"):
        op_kinds.OpKind("gemm2", tensor_cores=True)
    with pytest.raises(InvalidInputError, match="registered: attention, conv"):
        op_kinds.get_op_kind("fft")
    assert op_kinds.op_flops("fft", "fft", [], (), {}, []) == 0  # an unregistered kind costs nothing it cannot know
    assert not op_kinds.is_known("fft") and not op_kinds.is_known(ops.UNKNOWN)


def test_every_builtin_kind_is_registered_with_a_host_probe():
    assert sorted(op_kinds.BUILTIN_KINDS) == list(op_kinds.BUILTIN_KINDS) == op_kinds.list_op_kinds()
    probes = op_kinds.host_probes()
    assert set(probes) == set(op_kinds.BUILTIN_KINDS) - {ops.UNKNOWN}
    for call in probes.values():
        call()  # each runs on a CPU
    assert {k for k in op_kinds.BUILTIN_KINDS if op_kinds.lookup(k).tensor_cores} == {
        ops.MATMUL,
        ops.CONV,
        ops.ATTENTION,
    }
    assert {k for k in op_kinds.BUILTIN_KINDS if op_kinds.is_fusible(k)} == {
        ops.ELEMENTWISE,
        ops.REDUCTION,
        ops.NORM,
        ops.SOFTMAX,
        ops.COPY,
    }


@pytest.mark.parametrize("kind", [ops.MATMUL, ops.CONV, ops.ATTENTION, ops.ELEMENTWISE])
@pytest.mark.parametrize("config", [RunConfig(), RunConfig(tf32=True), RunConfig(conv_tf32=False)])
def test_the_roofline_plot_puts_each_op_on_the_ceiling_the_report_used(kind, config):
    """fp32 convolutions were the case where five copies disagreed: the report (cuDNN's TF32 on) now decides."""
    h100 = get_device("H100-SXM")
    graph = _graph(_node("op", kind, "float32", flops=10**9))
    (point,) = roofline_points(graph, h100, tf32=config.tf32, conv_tf32=config.conv_tf32)
    assert point["peak_key"].endswith("_tensor") == config.tensor_cores(kind, "float32", gpu=True)
    assert (
        point["peak_key"]
        == op_kinds.attainable_rate(kind, "float32", h100, tf32=config.tf32, conv_tf32=config.conv_tf32)[1]
    )


def test_an_embedding_lookup_reads_its_rows_not_its_table():
    table, idx, out = (
        TensorMeta((50000, 768), "float32"),
        TensorMeta((8, 128), "int64"),
        TensorMeta((8, 128, 768), "float32"),
    )
    # read: the gathered rows 8*128*768*4 = 3_145_728 plus the indices 8*128*8 = 8192
    assert op_kinds.op_bytes(ops.EMBEDDING, "embedding", [table, idx], [out], [table, idx]) == (3_153_920, 3_145_728)
    # the backward writes (and here reads) whole tensors
    assert op_kinds.op_bytes(ops.EMBEDDING, "embedding_dense_backward", [out, idx], [table], [out, idx]) == (
        out.nbytes + idx.nbytes,
        table.nbytes,
    )
