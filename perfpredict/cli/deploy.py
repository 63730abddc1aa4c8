"""``perfpredict deploy``: the cheapest (GPU, TP, PP, max batch, engine) that carries a load within an SLO."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from perfpredict.core.errors import InvalidInputError

SEARCH_REQUESTS = 300  # requests each replica's simulation runs unless --num-requests says otherwise


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    from perfpredict.cli.serve_sim import outputs, source
    from perfpredict.cli.serving_args import add_fields
    from perfpredict.llm.deploy_search import DEFAULT_MAX_REPLICAS
    from perfpredict.llm.serving_options import PrefixCache, RequestStream, Serving, Slo, Speculative

    p = subparsers.add_parser(
        "deploy",
        parents=parents or [],
        help="the cheapest GPU, tp, max batch and replicas that serve a load within an SLO (TTFT, TPOT)",
    )
    source(p)
    grid = p.add_argument_group("the grid (comma-separated values; every combination is tried)")
    grid.add_argument("--devices", type=_names, default=None, help="catalog GPUs (default: H100-SXM,A100-80GB,L40S,L4)")
    grid.add_argument("--tps", type=_counts, default=(1, 2, 4, 8), help="tensor-parallel sizes (default 1,2,4,8)")
    grid.add_argument("--pps", type=_counts, default=(1,), help="pipeline stages, each of tp GPUs (default 1)")
    grid.add_argument("--max-num-seqs", dest="max_num_seqs_grid", type=_counts, default=(256,),
                      help="vLLM's max_num_seqs values, e.g. 64,128,256 (default 256)")  # fmt: skip
    grid.add_argument("--engines", type=_names, default=("vllm",),
                      help="serving engines, each with or without its version: vllm, vllm-0.6, sglang, trtllm, mii, "
                      "llamacpp (default vllm, its current version)")  # fmt: skip
    grid.add_argument("--max-replicas", type=int, default=DEFAULT_MAX_REPLICAS,
                      help=f"the most replicas a configuration may use (default {DEFAULT_MAX_REPLICAS})")  # fmt: skip
    add_fields(p, Serving, skip=frozenset({"device", "tp", "pp", "engine", "engine_version"}))
    add_fields(p.add_argument_group("the load"), RequestStream)
    add_fields(p.add_argument_group("the SLO"), Slo)
    add_fields(p.add_argument_group("prefix caching, on every candidate"), PrefixCache)
    add_fields(p.add_argument_group("speculative decoding, on every candidate"), Speculative)
    outputs(p, "a page with the ranked table and the cost/TPOT frontier")
    p.set_defaults(func=run_deploy)


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"give at least one name, comma-separated, got {text!r}")
    return names


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in _names(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"give whole numbers, comma-separated, got {text!r}") from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"every value must be at least 1, got {text!r}")
    return values


def run_deploy(args: argparse.Namespace) -> int:
    from perfpredict.cli.serve_sim import write
    from perfpredict.cli.serving_args import given
    from perfpredict.llm.deploy import cached_search, default_devices
    from perfpredict.llm.deploy_search import Grid
    from perfpredict.llm.render_deploy import print_deploy, render_deploy_html
    from perfpredict.llm.serving_options import PrefixCache, RequestStream, Serving, Slo, Speculative
    from perfpredict.render.text import terminal_console

    flat = given(args, Serving, RequestStream, Slo, PrefixCache, Speculative)
    flat.setdefault("num_requests", SEARCH_REQUESTS)
    if args.max_replicas < 1:
        raise InvalidInputError(f"--max-replicas {args.max_replicas!r} must be at least 1")
    grid = Grid(args.devices or default_devices(), args.tps, args.pps, args.max_num_seqs_grid, args.engines)
    serving = Serving.of(**flat)
    report = cached_search(args.hf or args.config, grid, serving, max_replicas=args.max_replicas,
                           use_cache=not args.no_cache)  # fmt: skip
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    else:
        print_deploy(report, terminal_console())
    write(args, report, lambda r: render_deploy_html(r, serving.slo.tpot_ms))
    return 0
