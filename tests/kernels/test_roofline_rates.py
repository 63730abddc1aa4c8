"""The roofline plot places each op at its predicted achieved rate, FLOPs / the report's predicted time, not on the
roof (issue 45, item 4: BERT's matmuls were drawn at 64.9 TFLOP/s when the prediction implied 15-30)."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("matplotlib")

from perfpredict.core import breakdown
from perfpredict.hardware.devices import get_device

N = 4096  # a square fp16 GEMM: 2 N^3 FLOPs over 3 N^2 x 2 bytes, 1,365 FLOP/byte, compute-bound on any GPU


def _graph():
    from perfpredict.core.graph import OpGraph, OpNode, TensorMeta

    t = TensorMeta((N, N), "float16")
    mm = OpNode(
        "mm", "matmul", "aten.mm", (t, t), (t,), flops=2 * N**3, bytes_read=2 * N * N * 2, bytes_written=N * N * 2
    )
    relu = OpNode(
        "relu", "elementwise", "aten.relu", (t,), (t,), flops=N * N, bytes_read=N * N * 2, bytes_written=N * N * 2
    )
    return OpGraph(nodes=(mm, relu), edges=((0, 1),), dtype="float16", name="gemm")


def _drawn(fig) -> dict[str, list[tuple[float, float]]]:
    """Every scatter of the plot by its legend label: the (x, y) points it draws."""
    return {c.get_label(): [tuple(p) for p in c.get_offsets()] for c in fig.axes[0].collections}


def _report(graph, device, mm_ms: float):
    """A real report of ``graph`` with the matmul's predicted time set to ``mm_ms`` (its rows and op-kind totals
    rebuilt as a predictor builds them)."""
    from perfpredict.assemble import build_report
    from perfpredict.predictors.base import RunConfig

    report = build_report(graph, device, RunConfig(), "analytical")
    rows = tuple(dataclasses.replace(o, time_ms=mm_ms) if o.name == "mm" else o for o in report.per_op)
    latency = sum(o.time_ms for o in rows)
    return dataclasses.replace(
        report,
        per_op=rows,
        by_kind=breakdown.by_kind(rows, latency),
        latency_ms=dataclasses.replace(report.latency_ms, value=latency),
    )


def test_a_matmul_predicted_at_twice_its_roofline_time_is_drawn_at_half_the_roof():
    from perfpredict.kernels.plot import _figure, roofline_points

    h100 = get_device("H100-SXM")
    graph = _graph()
    roof = next(p for p in roofline_points(graph, h100) if p["name"] == "mm")
    assert roof["bound"] == "compute" and roof["attainable_flops_per_s"] == h100.peak_flops_per_s["fp16_tensor"]
    bound_ms = 2 * N**3 / roof["attainable_flops_per_s"] * 1e3  # 137 GFLOP / 989 TFLOP/s = 0.139 ms
    fig = _figure(graph, h100, None, None, None, False, _report(graph, h100, 2 * bound_ms))
    drawn = _drawn(fig)
    (single,) = [pts for label, pts in drawn.items() if label.startswith("single ops, compute-bound")]
    assert single == [pytest.approx((roof["intensity_flop_per_byte"], roof["attainable_flops_per_s"] / 2))]
    (kind,) = [pts for label, pts in drawn.items() if label.startswith("matmul:")]
    assert kind == [pytest.approx((roof["intensity_flop_per_byte"], roof["attainable_flops_per_s"] / 2))]
    label = next(label for label in drawn if label.startswith("single ops"))
    assert "at their predicted rate" in label
    # without a report there is no prediction: the ops sit on the roof, and the legend says so
    bare = _drawn(_figure(graph, h100, None, None, None, False))
    (on_roof,) = [pts for label, pts in bare.items() if label.startswith("single ops, compute-bound")]
    assert on_roof[0][1] == pytest.approx(roof["attainable_flops_per_s"])
    assert any("at their roofline bound (no prediction)" in label for label in bare)


def test_a_predicted_report_draws_every_op_below_the_roof_at_flops_over_its_time():
    import torch

    from perfpredict.compiler_hooks.capture import capture_graph
    from perfpredict.kernels.plot import _figure, roofline_points
    from perfpredict.pipeline import predict
    from perfpredict.request import Request

    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
    graph = capture_graph(model.eval(), (torch.randn(256, 1024),), {}, phase="inference", dtype=None, name="mlp")
    l4 = get_device("L4")
    report = predict(Request(source=graph, device=l4, top_ops=2))  # two rows kept of three: the legend says so
    fig = _figure(graph, l4, None, None, None, False, report)
    drawn = _drawn(fig)
    roofs = {p["name"]: p["attainable_flops_per_s"] for p in roofline_points(graph, l4)}
    singles = [pt for label, pts in drawn.items() if label.startswith("single ops") for pt in pts]
    expected = [o.flops / (o.time_ms * 1e-3) for o in report.per_op if o.flops > 0]
    assert sorted(y for _, y in singles) == pytest.approx(sorted(expected))
    for o in report.per_op:
        assert o.flops / (o.time_ms * 1e-3) < roofs[o.name]  # a predicted op runs below its roof
    assert any("the report's top 2 of 3 ops" in label for label in drawn)
    matmul = next(k for k in report.by_kind if k.name == "matmul")
    (kind,) = [pts for label, pts in drawn.items() if label.startswith("matmul:")]
    assert kind[0][1] == pytest.approx(matmul.flops / (matmul.time_ms * 1e-3))  # both linears, summed


TINY_RESNET = {
    "model_type": "resnet",
    "architectures": ["ResNetForImageClassification"],
    "embedding_size": 8,
    "hidden_sizes": [16, 32],
    "depths": [1, 1],
    "layer_type": "bottleneck",
    "num_labels": 10,
}


def test_the_html_report_and_the_web_page_hand_the_plot_every_op(tmp_path, monkeypatch):
    """The doors that draw the roofline keep every op's row, so every op is placed at its predicted rate (the
    plot itself is the one tested above; drawing it here would only cost seconds)."""
    import json

    from perfpredict.cli import main
    from perfpredict.web.compare import Question, compare

    plotted = []
    monkeypatch.setattr(
        "perfpredict.cli.predict._roofline_section", lambda graph, device, report: plotted.append(report) or {}
    )
    (tmp_path / "config.json").write_text(json.dumps(TINY_RESNET))
    argv = ["predict", "--config", str(tmp_path / "config.json"), "--device", "L4", "--batch", "8"]
    assert main([*argv, "--html", str(tmp_path / "r.html"), "--json", str(tmp_path / "r.json")]) == 0
    web = compare(Question(model=TINY_RESNET, devices=("L4",), batch=8)).reports[0]  # what the page plots
    assert len(plotted) == 1
    for report in (*plotted, web):
        assert len(report.per_op) == sum(k.ops for k in report.by_kind) > 25  # every op's row
    assert len(json.loads((tmp_path / "r.json").read_text())["per_op"]) == 25  # the JSON keeps its 25 rows
