"""``perfpredict serve-sim``: a vLLM-class engine serving a stream of requests, simulated over time."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    from perfpredict.cli.generate import _engine_arguments
    from perfpredict.cli.serving_args import add_fields
    from perfpredict.llm.serving_options import PrefixCache, RequestStream, Serving, Slo, Speculative

    p = subparsers.add_parser(
        "serve-sim",
        parents=parents or [],
        help="a server under a request stream: TTFT/TPOT/E2E percentiles, throughput, goodput (vLLM-class)",
    )
    source(p)
    add_fields(p, Serving)
    add_fields(p.add_argument_group("the load"), RequestStream)
    add_fields(p.add_argument_group("the SLO (goodput counts the requests meeting every target)"), Slo)
    add_fields(p.add_argument_group("prefix caching (vLLM's --enable-prefix-caching)"), PrefixCache)
    add_fields(p.add_argument_group("speculative decoding"), Speculative)
    _engine_arguments(p)
    outputs(p, "a page with the latency tables")
    p.set_defaults(func=run_serve_sim)


def source(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", metavar="ID", help="a shipped HuggingFace id or alias (see `perfpredict models`)")
    src.add_argument("--config", metavar="PATH", help="a HuggingFace config.json (or a folder holding one)")


def outputs(p: argparse.ArgumentParser, html: str) -> None:
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="answer again instead of reading the on-disk answer cache (and refresh it)",
    )
    p.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-': stdout, nothing else)")
    p.add_argument("--html", metavar="PATH", help=f"write {html} to PATH")


def serving_from_args(args: argparse.Namespace):
    """The ``Serving`` the flags ask for."""
    from perfpredict.cli.generate import engine_config
    from perfpredict.cli.serving_args import given
    from perfpredict.llm.serving_options import PrefixCache, RequestStream, Serving, Slo, Speculative

    flat = given(args, Serving, RequestStream, Slo, PrefixCache, Speculative)
    return Serving.of(**flat, engine_config=engine_config(args))


def write(args: argparse.Namespace, report: Any, html: Any) -> None:
    """``--json`` and ``--html``, as ``generate`` writes them."""
    for path, text in ((args.json, None), (args.html, html)):
        if path and path != "-":
            try:
                Path(path).write_text(report.to_json() + "\n" if text is None else text(report), encoding="utf-8")
            except OSError as err:
                raise InvalidInputError(f"cannot write {path!r}: {err.strerror or err}") from err


def run_serve_sim(args: argparse.Namespace) -> int:
    from perfpredict.llm.render_serving import print_serving, render_serving_html
    from perfpredict.llm.serving import cached_serving
    from perfpredict.render.text import terminal_console

    report = cached_serving(args.hf or args.config, serving_from_args(args), use_cache=not args.no_cache)
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    else:
        print_serving(report, terminal_console())
    write(args, report, render_serving_html)
    args.shown_warnings = report.warnings
    return 0
