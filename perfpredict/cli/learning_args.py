"""The arguments ``perfpredict train`` and ``perfpredict adapt`` share: where the artifact goes, the seed, and which
measured rows to learn."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_learning_args(p: argparse.ArgumentParser, out_help: str) -> None:
    """``--out``, ``--seed``, ``--latency-stat`` and ``--include-busy-host`` (the keywords of learning.train and
    adapt); ``out_help`` says where each command writes without ``--out`` (the two defaults differ)."""
    p.add_argument("--out", type=Path, default=None, help=out_help)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--latency-stat",
        choices=("median", "min"),
        default="median",
        help="learn the median of the timed runs (default) or the fastest run (for a busy host)",
    )
    p.add_argument(
        "--include-busy-host",
        action="store_true",
        help="keep rows measured while other work loaded the host (left out by default: see data/README.md)",
    )


def learning_kwargs(args: argparse.Namespace) -> dict[str, object]:
    """The keywords those arguments give ``learning.train.train`` and ``learning.adapt.adapt``; a command always
    shows its progress (the library's default is quiet)."""
    return {
        "out_root": args.out,
        "seed": args.seed,
        "latency_stat": args.latency_stat,
        "include_busy_host": args.include_busy_host,
        "progress": True,
    }
