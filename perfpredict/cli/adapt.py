"""``perfpredict adapt``: few-shot adaptation of a trained predictor to a new device's measured rows."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perfpredict.cli.learning_args import add_learning_args, learning_kwargs


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "adapt",
        parents=parents or [],
        help="adapt a trained predictor to a new device from a few measured rows",
        description="Fine-tune the gnn_llm artifact (or graphsage / gae_gnn) on --shots rows measured on --device "
        "and register the result for that device; the other rows check it (MAPE before and after).",
    )
    p.add_argument("--device", required=True, help="the new device, as the catalog names it (perfpredict devices)")
    p.add_argument(
        "--data",
        required=True,
        type=Path,
        help="its measured rows: a dataset folder from `perfpredict collect`, or a rows .parquet/.jsonl",
    )
    p.add_argument("--shots", type=int, default=32, help="rows to adapt on (default 32); the rest are held out")
    p.add_argument("--predictor", default="gnn_llm", help="gnn_llm (default), graphsage or gae_gnn")
    p.add_argument(
        "--from",
        dest="from_device",
        default=None,
        help="the trained device to start from (default: a shipped artifact of the same kind)",
    )
    p.add_argument("--steps", type=int, default=100, help="optimiser steps over the shots (default 100)")
    add_learning_args(p, out_help="artifact root (default: the user folder, ~/.local/share/perfpredict/artifacts)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from perfpredict.learning.adapt import adapt

    result = adapt(
        args.device,
        args.data,
        predictor=args.predictor,
        shots=args.shots,
        steps=args.steps,
        from_device=args.from_device,
        **learning_kwargs(args),
    )
    print(f"adapted on {result.shots} rows; checked on the other {result.held_out}:")
    for target, after in result.after.items():
        print(f"  {target}: MAPE {result.before.get(target, float('nan')):.1f}% before, {after:.1f}% after")
    print(
        f"perfpredict: wrote {result.folder}; predictor={args.predictor!r} (and 'auto', when it is the best one) "
        f"now uses it for {args.device}",
        file=sys.stderr,
    )
    return 0
