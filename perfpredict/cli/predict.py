"""``perfpredict predict`` and ``perfpredict explain``: one model on one device, as tables, JSON or HTML."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from perfpredict.cli.args import (
    EXIT_OK,
    PROG,
    Parser,
    console,
    shown,
    write_text,
)
from perfpredict.cli.model_args import add_model_args, request_from_args
from perfpredict.cli.parallel import add_parallel_args, show_parallel
from perfpredict.core.errors import InvalidInputError
from perfpredict.request import EVERY_OP

JSON_OPS = 25  # per-op rows a --json report keeps

EXPLAIN_TOP = 25  # explain's per-op rows by default; the rest is one total line (--top all lists every op)


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    """Add ``predict`` and ``explain``."""
    p = subparsers.add_parser("predict", parents=parents or [], help="predict one model on one device")
    add_model_args(p, top_default=10)
    p.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-': stdout, nothing else)")
    p.add_argument("--html", metavar="PATH", help="write a self-contained HTML report to PATH")
    p.add_argument(
        "--devices",
        metavar="NAMES",
        help="ask on several devices: a comma list or 'all' (every catalog GPU); one row each: peak memory, fits, step",
    )
    add_parallel_args(p)
    p.set_defaults(func=cmd_predict)

    p = subparsers.add_parser(
        "explain", parents=parents or [], help="the per-op breakdown (--top all: every op), coverage and unknown ops"
    )
    add_model_args(p, top_default=EXPLAIN_TOP)
    p.set_defaults(func=cmd_explain)


def parse_predict(argv: list[str]) -> argparse.Namespace:
    """``perfpredict predict`` arguments parsed alone (the demo asks its questions as a user would type them)."""
    parser = Parser(prog=f"{PROG} predict")
    add_model_args(parser, top_default=10)
    return parser.parse_args(argv)


def predict_from_args(args: argparse.Namespace, keep_ops: int = 25) -> tuple[Any, Any]:
    """(PerfReport or ParallelReport, OpGraph) for the model and device the arguments name."""
    from perfpredict.pipeline import predict_with_graph

    return predict_with_graph(request_from_args(args, top_ops=keep_ops))


def _roofline_section(graph: Any, device_name: str, report: Any = None) -> dict[str, str]:
    """The model's ops on the device's roofline, as inline SVG for the HTML report (a line saying why, if the plot
    cannot be drawn: never a section that silently disappears)."""
    from perfpredict.core.errors import MissingDependencyError
    from perfpredict.hardware.devices import get_device
    from perfpredict.kernels.plot import roofline_svg

    try:
        return {"Roofline": roofline_svg(graph, get_device(device_name), report=report)}
    except (ImportError, MissingDependencyError) as err:
        return {"Roofline": f"<p>The roofline plot could not be drawn: {err}</p>"}


def cmd_predict(args: argparse.Namespace) -> int:
    from perfpredict.render.html import render_html
    from perfpredict.render.text import print_report

    # the HTML page's roofline draws every op at its predicted rate: it needs every op's row; the JSON keeps 25
    request = request_from_args(args, top_ops=EVERY_OP if args.html else _kept(args.top))
    if args.devices:
        from perfpredict.cli.fits import show_fits

        if args.html:
            raise InvalidInputError("--html shows one device; drop it with --devices (or use --json -)")
        return show_fits(args, request)
    if request.parallel is not None and args.html:
        raise InvalidInputError("--html is not available for multi-GPU plans yet; use --json PATH")
    from perfpredict.pipeline import predict_with_graph

    report, graph = predict_with_graph(request)
    if request.parallel is not None:
        return show_parallel(args, report)
    kept = dataclasses.replace(report, per_op=report.per_op[:JSON_OPS])
    if args.json == "-":
        sys.stdout.write(kept.to_json() + "\n")
    else:
        print_report(report, console=console(), top_ops=args.top)
        shown(args, report.warnings)
    if args.json and args.json != "-":
        write_text(args.json, kept.to_json() + "\n")
    if args.html:
        write_text(args.html, render_html(report, extra_sections=_roofline_section(graph, report.device, report)))
    written = [p for p in (args.json, args.html) if p and p != "-"]
    if written:
        print(f"{PROG}: wrote {', '.join(written)}", file=sys.stderr)
    return EXIT_OK


def _kept(top: int | None) -> int:
    """Per-op rows the report keeps: the JSON's 25, or as many as --top shows."""
    return EVERY_OP if top is None else max(top, JSON_OPS)


def cmd_explain(args: argparse.Namespace) -> int:
    from perfpredict.render.text import explain_renderables

    report, _ = predict_from_args(args, keep_ops=EVERY_OP)  # the total line sums the ops it does not list
    out = console()
    for part in explain_renderables(report, top_ops=args.top):
        out.print(part)
    shown(args, report.warnings)
    return EXIT_OK
