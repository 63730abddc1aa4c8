"""Text, HTML and JSON rendering of a PerfReport.

The report below is a SYNTHETIC FIXTURE written by hand to exercise the renderers: its numbers are made up and
are neither predicted nor measured.
"""

from __future__ import annotations

import json

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.report import (
    GraphSummary,
    MemoryBreakdown,
    MigAdvice,
    MigOption,
    OpContribution,
    PerfReport,
    Prediction,
)
from perfpredict.core.units import GIB, MIB
from perfpredict.render.formats import fmt_bytes, fmt_carbon_g, fmt_energy_j, fmt_time_ms, fmt_usd
from perfpredict.render.html import render_html, write_report
from perfpredict.render.text import mig_rows, print_report, render_text


def _pred(value: float, unit: str, spread: float = 0.2) -> Prediction:
    return Prediction(
        value=value,
        unit=unit,
        low=value * (1 - spread),
        high=value * (1 + spread),
        predictor="analytical",
        predictor_version="1",
    )


def synthetic_report(fits: bool = True, with_mig: bool = True) -> PerfReport:
    """A hand-written report (synthetic numbers) with every section populated."""
    ops = (
        OpContribution(
            "addmm_3",
            "matmul",
            "aten.addmm.default",
            "encoder.layer.0.intermediate.dense",
            0.42,
            0.35,
            "compute",
            4_831_838_208,
            16_000_000,
            302.0,
        ),
        OpContribution(
            "softmax_1",
            "softmax",
            "aten._softmax.default",
            "encoder.layer.0.attention.self",
            0.30,
            0.25,
            "memory",
            12_582_912,
            50_331_648,
            0.25,
        ),
        OpContribution(
            "weird_0", "unknown", "aten.weird_op.default", "pooler<script>", 0.05, 0.04, "overhead", 0, 0, 0.0
        ),
    )
    options = (
        MigOption("1g.10gb", 10 * GIB, 16, False, None, None, 7, False, "needs 11.2 GiB, has 10 GiB"),
        MigOption("3g.40gb", 40 * GIB, 60, True, 2.5, 3200.0, 2, True, "fits; meets latency <= 5 ms"),
        MigOption("7g.80gb", 80 * GIB, 132, True, 1.2, 6667.0, 1, True, "fits"),
    )
    mig = MigAdvice(
        device="H100-SXM",
        options=options,
        recommended="3g.40gb",
        reason="smallest profile that fits and meets the targets",
        max_latency_ms=5.0,
    )
    memory = MemoryBreakdown(
        params_bytes=438 * MIB,
        gradients_bytes=0,
        optimizer_state_bytes=0,
        activations_peak_bytes=96 * MIB,
        runtime_overhead_bytes=512 * MIB,
    )
    return PerfReport(
        model_name="bert-base-uncased",
        device="H100-SXM",
        phase="inference",
        batch_size=8,
        seq_len=128,
        dtype="float32",
        latency_ms=_pred(1.2, "ms"),
        throughput_per_s=_pred(6667.0, "samples/s"),
        peak_memory_bytes=_pred(float(memory.total_bytes), "bytes", 0.1),
        memory=memory,
        fits_in_memory=fits,
        device_memory_bytes=80 * GIB if fits else 2**29,
        energy_j=_pred(0.6, "J"),
        energy_per_sample_j=_pred(0.075, "J"),
        avg_power_w=_pred(500.0, "W"),
        carbon_g=_pred(1250.0, "g"),
        grid_intensity_g_per_kwh=400.0,
        cost_usd=_pred(0.083, "USD"),
        price_usd_per_hour=2.5,
        workload="1,000,000 inferences",
        workload_calls=125_000,
        per_op=ops,
        coverage=0.97,  # 125,000 calls = 1e6 inferences / batch 8
        graph=GraphSummary(
            nodes=517,
            edges=640,
            subgraphs=1,
            total_flops=87_000_000_000,
            total_bytes=1_200_000_000,
            param_count=109_482_240,
            source="fx",
        ),
        mig=mig if with_mig else None,
        warnings=("3% of ops have no cost model: aten.weird_op.default",),
        notes=("float32 matmuls assumed on FP32 units (no TF32)",),
    )


@pytest.fixture
def report() -> PerfReport:
    return synthetic_report()


def test_formatters_pick_human_units() -> None:
    assert fmt_time_ms(1.234) == "1.23 ms"
    assert fmt_time_ms(0.0042) == "4.20 us"
    assert fmt_time_ms(2500.0) == "2.50 s"
    assert fmt_bytes(1.5 * GIB) == "1.50 GiB"
    assert fmt_bytes(300 * MIB) == "300 MiB"
    assert fmt_energy_j(0.075) == "75.0 mJ"
    assert fmt_carbon_g(1250.0) == "1.25 kg"
    assert fmt_usd(12.5) == "$12.50"
    assert fmt_time_ms(float("nan")) == "n/a"


def test_text_has_every_section(report: PerfReport) -> None:
    text = render_text(report, width=200)  # wide enough that no cell wraps
    for expected in (
        "bert-base-uncased",
        "H100-SXM",
        "inference",
        "batch=8",
        "seq=128",
        "float32",
        "datasheet specs",
        "analytical estimate",
        "interval [low, high]",
        "1.20 ms",
        "[960 us, 1.44 ms]",
        "6,667 samples/s",
        "[5,334, 8,000]",
        "fits in 80.0 GiB",
        "weights 438 MiB",
        "600 mJ",
        "75.0 mJ",
        "500 W",
        "1.25 kg",
        "400 g CO2e/kWh",
        "$0.08",
        "$2.50/h",
        "encoder.layer.0.intermediate.dense",
        "35.0%",
        "compute",
        "302",
        "0.25",
        "3g.40gb",
        "Recommended MIG profile on H100-SXM: 3g.40gb",
        "needs 11.2 GiB",
        "Coverage: 97.0%",
        "warning: 3% of ops",
        "note: float32 matmuls",
    ):
        assert expected in text, expected
    assert "\x1b[" not in text  # plain text, no colour codes


def test_text_top_ops_and_no_mig() -> None:
    rep = synthetic_report(fits=False, with_mig=False)
    text = render_text(rep, top_ops=1, width=140)
    assert "top 1 of 3" in text and "aten._softmax.default" not in text
    assert "DOES NOT FIT" in text and "MIG" not in text
    assert "Per-op" not in render_text(rep, top_ops=0)
    assert "all 3" in render_text(rep, top_ops=None, width=140)


def test_str_and_print_report(report: PerfReport, capsys) -> None:
    from rich.console import Console

    import perfpredict

    # str() is one line of headline numbers; the tables are the renderer's (show), so report.py imports no renderer
    line = str(report)
    assert "\n" not in line and report.device in line and f"{report.latency_ms.value:.4g} ms" in line
    perfpredict.show(report)
    assert "Predicted performance" in capsys.readouterr().out
    console = Console(record=True, width=120, file=open("/dev/null", "w"))  # noqa: SIM115
    print_report(report, console=console)
    assert "3g.40gb" in console.export_text()


def test_html_is_self_contained_and_escaped(report: PerfReport) -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="5" height="5"/></svg>'
    page = render_html(report, extra_sections={"Roofline <plot>": svg})
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<style>" in page and "<script" not in page
    assert "pooler&lt;script&gt;" in page  # user-controlled names are escaped
    assert svg in page and "Roofline &lt;plot&gt;" in page  # extra sections are embedded as given
    for external in ("<link", 'src="http', 'href="http', "@import"):
        assert external not in page
    for expected in (
        "1.20 ms",
        "analytical estimate",
        "3g.40gb",
        "Coverage: 97.0%",
        "aten.weird_op.default",
        "1.25 kg",
        "float32 matmuls",
    ):
        assert expected in page, expected


def test_json_round_trip(report: PerfReport) -> None:
    data = json.loads(report.to_json())
    assert data["latency_ms"]["value"] == 1.2 and data["mig"]["recommended"] == "3g.40gb"
    assert PerfReport.from_dict(data) == report


def test_write_report_by_suffix(tmp_path, report: PerfReport) -> None:
    assert PerfReport.from_dict(json.loads(write_report(report, tmp_path / "r.json").read_text())) == report
    assert "<!DOCTYPE html>" in write_report(report, tmp_path / "r.html").read_text()
    assert "Predicted performance" in write_report(report, tmp_path / "r.txt").read_text()
    with pytest.raises(InvalidInputError, match=r"\.json, \.html"):
        write_report(report, tmp_path / "r.pdf")


def test_explain_totals_time_by_op_kind_and_by_repeated_block(tmp_path):
    import torch
    from block_stack import Stack

    import perfpredict
    from perfpredict.render.html import render_html
    from perfpredict.render.text import explain_renderables

    report = perfpredict.predict(Stack().eval(), (torch.randn(8, 64),), device="H100-SXM", top_ops=3)
    assert len(report.per_op) == 3  # the listed ops are cut; the totals are over all of them
    assert sum(k.ops for k in report.by_kind) > 3
    # shares are of the latency: the op kinds plus the host line not hidden under device time make it up
    outside = report.outside_ops_ms / report.latency_ms.value
    assert sum(k.share for k in report.by_kind) + outside == pytest.approx(1.0)
    assert {k.name for k in report.by_kind} >= {"matmul", "norm"}
    (block,) = report.blocks
    assert block.path == "blocks.*" and block.repeats == 4 and 0 < block.share < 1
    assert {p.name for p in block.parts} >= {"mlp", "norm"}
    assert sum(p.share for p in block.parts) == pytest.approx(1.0)
    html = render_html(report)
    assert (
        "Time by op kind" in html
        and "4 x blocks.*" in html
        and f"top 3 of {sum(k.ops for k in report.by_kind)}" in html
    )
    text = "".join(str(getattr(p, "plain", "")) for p in explain_renderables(report))
    assert "4 x blocks.*" in text
    again = perfpredict.PerfReport.from_dict(json.loads(report.to_json()))
    assert again.blocks == report.blocks and again.by_kind == report.by_kind


def test_mig_meets_targets_is_shown_only_when_a_target_was_given() -> None:
    import dataclasses

    with_target = synthetic_report()
    no_target = dataclasses.replace(
        with_target, mig=dataclasses.replace(with_target.mig, max_latency_ms=None, min_throughput_per_s=None)
    )
    assert "meets targets" in render_text(with_target, width=200) and "meets targets" in render_html(with_target)
    text, page = render_text(no_target, width=200), render_html(no_target)
    assert "meets targets" not in text and "meets targets" not in page
    assert "no latency or throughput target given" in text
    assert all(len(row) == 7 and row[-1] for row in mig_rows(no_target))  # the reason stays the last cell


def test_mig_recommendation_claims_targets_only_when_given() -> None:
    from perfpredict.hardware.mig import advise_mig

    plain = advise_mig("A100-80GB", 5 * GIB, lambda d: 2.0, batch_size=1)
    aimed = advise_mig("A100-80GB", 5 * GIB, lambda d: 2.0, batch_size=1, max_latency_ms=10.0)
    assert "targets" not in plain.reason and "meets the targets" in aimed.reason


def test_show_into_a_pipe_is_not_squeezed_into_80_columns(capsys) -> None:
    import perfpredict
    from perfpredict.render.text import PIPED_WIDTH

    perfpredict.show(synthetic_report())  # capsys's stdout is not a terminal, as a pipe is not
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) > 80 and all(len(line) <= PIPED_WIDTH for line in lines)
    header = next(line for line in lines if "module path" in line)
    assert "FLOP/byte" in header  # every per-op column's name is whole
    latency = next(line for line in lines if line.startswith("│ Latency"))
    assert "per call" in latency and "…" not in "".join(lines)
