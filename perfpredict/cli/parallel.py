"""``perfpredict predict --dp/--tp/--pp/--fsdp/--sp``: one training or inference step spread over several GPUs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from perfpredict.cli.args import EXIT_OK, PROG, non_negative_int, positive_int, write_text
from perfpredict.parallel.plan import FSDP_STRATEGIES


def add_parallel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("multi-GPU (docs: multi-GPU); --batch is then one rank's micro-batch")
    g.add_argument("--dp", type=positive_int("--dp"), default=None, help="data-parallel replicas")
    g.add_argument("--tp", type=positive_int("--tp"), default=None, help="tensor-parallel ranks (Megatron-style)")
    g.add_argument("--pp", type=positive_int("--pp"), default=None, help="pipeline stages (1F1B schedule)")
    g.add_argument(
        "--microbatches",
        type=positive_int("--microbatches"),
        default=None,
        help="micro-batches per step (pipeline and gradient accumulation; default 1; with --pp use at least --pp)",
    )
    g.add_argument("--fsdp", action="store_true", help="shard parameters, gradients and optimizer state (FSDP2)")
    g.add_argument("--zero-stage", type=non_negative_int, default=None, help="DeepSpeed ZeRO stage 0-3 instead")
    g.add_argument("--sp", action="store_true", help="sequence parallelism with --tp (reduce-scatter/all-gather)")
    g.add_argument(
        "--fsdp-strategy",
        choices=FSDP_STRATEGIES,
        default=None,
        help="FSDP's ShardingStrategy with --fsdp: full_shard (default), shard_grad_op, hybrid_shard",
    )
    g.add_argument(
        "--shard-group",
        type=positive_int("--shard-group"),
        default=None,
        help="hybrid_shard: ranks that shard (default: the dp ranks of one node)",
    )
    g.add_argument("--float8-all-gather", action="store_true", help="FSDP gathers float8 weights (--float8 tensorwise)")
    g.add_argument(
        "--gpus-per-node",
        type=positive_int("--gpus-per-node"),
        default=None,
        help="GPUs per node on NVLink; larger groups cross the network (default 8)",
    )


def plan_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The plan the flags ask for, or None when none was given (one GPU)."""
    keys = ("dp", "tp", "pp", "microbatches", "zero_stage", "gpus_per_node", "fsdp_strategy", "shard_group")
    plan = {k: getattr(args, k, None) for k in keys if getattr(args, k, None) is not None}
    plan.update({k: True for k in ("fsdp", "sp", "float8_all_gather") if getattr(args, k, False)})
    return plan or None


def show_parallel(args: argparse.Namespace, report: Any) -> int:
    """Print the multi-GPU ``report`` (or write its JSON)."""
    from perfpredict.parallel import render_parallel_text

    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
        return EXIT_OK
    print(render_parallel_text(report))
    if args.json:
        write_text(args.json, report.to_json() + "\n")
        print(f"{PROG}: wrote {args.json}", file=sys.stderr)
    return EXIT_OK
