"""``perfpredict demo``: BERT-base and ResNet-50 on H100 and A100, asked as a user would ask them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from perfpredict.cli.args import EXIT_OK, console
from perfpredict.cli.predict import parse_predict, predict_from_args

DEMO_MODELS = (("bert-base-uncased", 8, 128), ("microsoft/resnet-50", 32, None))
DEMO_DEVICES = ("H100-SXM", "A100-40GB-SXM")


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    p = subparsers.add_parser("demo", parents=parents or [], help="BERT-base and ResNet-50 on H100 and A100")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from rich.rule import Rule

    from perfpredict.hardware.devices import get_device
    from perfpredict.render.text import print_report

    out = console()
    devices = [get_device(name).name for name in DEMO_DEVICES]
    summary = []
    for model_id, batch, seq in DEMO_MODELS:
        for device in devices:
            # Parsed like a user's `predict` line, so the demo can never drift from the real options.
            argv = ["predict", "--hf", model_id, "--device", device, "--batch", str(batch), "--predictor", "auto"]
            ns = parse_predict(argv[1:] + (["--seq", str(seq)] if seq else []))
            out.print(Rule(f"{model_id}, batch {batch}, on {device}"))
            report, _ = predict_from_args(ns)
            print_report(report, console=out, top_ops=5)
            summary.append(report)
    out.print(_demo_summary(summary))
    return EXIT_OK


def _demo_summary(reports: Sequence[Any]):
    from rich.table import Table

    from perfpredict.render.formats import fmt_bytes, fmt_energy_j, fmt_rate, fmt_time_ms

    # "auto" is the two-timeline model on every device, so the rows compare like with like
    table = Table(
        title="Demo summary (predictor: two_timeline, the same model on every device; latency is eager "
        "wall time, host included)",
        title_justify="left",
    )
    # names are never cut ("bert-base-un…"): the name columns keep their width, the numbers wrap if they must
    table.add_column("model", no_wrap=True, min_width=max((len(r.model_name) for r in reports), default=5))
    table.add_column("device", no_wrap=True, min_width=max((len(r.device) for r in reports), default=6))
    for name in (  # no predictor column: the title names it, and it is the same on every row
        "batch",
        "latency",
        "throughput",
        "peak memory",
        "energy/sample",
        "MIG pick",
    ):
        table.add_column(name)
    for r in reports:
        pick = (r.mig.recommended or "none") if r.mig else "-"
        table.add_row(
            r.model_name,
            r.device,
            str(r.batch_size),
            fmt_time_ms(r.latency_ms.value),
            fmt_rate(r.throughput_per_s.value),
            fmt_bytes(r.peak_memory_bytes.value),
            fmt_energy_j(r.energy_per_sample_j.value),
            pick,
        )
    return table
