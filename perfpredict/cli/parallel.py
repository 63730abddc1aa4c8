"""``perfpredict predict --dp/--tp/--pp/--cp/--fsdp/--sp``: one training or inference step spread over several GPUs,
with the pipeline schedule, FSDP's strategy, the cluster's network and the recipe's global batch (issue 46)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from perfpredict.cli.args import EXIT_OK, PROG, non_negative_int, positive_float, positive_int, shown, write_text


def add_parallel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("multi-GPU (docs: multi-GPU); --batch is then one rank's micro-batch")
    g.add_argument("--dp", type=positive_int("--dp"), default=None, help="data-parallel replicas")
    g.add_argument("--tp", type=positive_int("--tp"), default=None, help="tensor-parallel ranks (Megatron-style)")
    g.add_argument(
        "--pp", type=positive_int("--pp"), default=None, help="pipeline stages (--schedule picks the schedule)"
    )
    g.add_argument(
        "--microbatches",
        type=positive_int("--microbatches"),
        default=None,
        help="micro-batches per step (pipeline and gradient accumulation; default 1; with --pp use at least --pp)",
    )
    g.add_argument(
        "--fsdp",
        nargs="?",
        const="full_shard",
        default=None,
        metavar="STRATEGY",
        help="shard parameters, gradients and optimizer state (FSDP2); STRATEGY full_shard (default), "
        "shard_grad_op or hybrid_shard",
    )
    g.add_argument("--zero-stage", type=non_negative_int, default=None, help="DeepSpeed ZeRO stage 0-3 instead")
    g.add_argument("--sp", action="store_true", help="sequence parallelism with --tp (reduce-scatter/all-gather)")
    g.add_argument("--float8-all-gather", action="store_true", help="FSDP gathers float8 weights (--float8 tensorwise)")
    g.add_argument(
        "--gpus-per-node",
        type=positive_int("--gpus-per-node"),
        default=None,
        help="GPUs per node on NVLink; larger groups cross the network (default 8)",
    )
    _scale_args(g)


def _scale_args(g: Any) -> None:
    """Issue 46's flags (training at scale): schedule, FSDP details, network, context parallelism, async TP."""
    g.add_argument("--cp", type=positive_int("--cp"), default=None, help="context-parallel ranks (ring attention)")
    g.add_argument(
        "--schedule",
        choices=("gpipe", "1f1b", "interleaved", "zb1p"),
        default=None,
        help="pipeline schedule with --pp (default 1f1b)",
    )
    g.add_argument(
        "--virtual-stages",
        type=positive_int("--virtual-stages"),
        default=None,
        help="model chunks per pipeline rank for --schedule interleaved",
    )
    g.add_argument(
        "--global-batch",
        type=positive_int("--global-batch"),
        default=None,
        help="samples per optimizer step; sets --microbatches = global / (--batch x --dp)",
    )
    g.add_argument(
        "--shard-group",
        type=positive_int("--shard-group"),
        default=None,
        help="--fsdp hybrid_shard: ranks that shard (default: the dp ranks of one node)",
    )
    g.add_argument(
        "--fsdp-dtype",
        default=None,
        metavar="DTYPE",
        help="FSDP MixedPrecisionPolicy param_dtype: what the all-gathers move (e.g. bfloat16; default the stored)",
    )
    g.add_argument("--fsdp-reduce-dtype", default=None, metavar="DTYPE", help="its reduce_dtype (e.g. float32)")
    g.add_argument(
        "--nvlink-domain",
        type=positive_int("--nvlink-domain"),
        default=None,
        help="GPUs joined by NVLink (default a node; 72 for a GB200 NVL72 rack)",
    )
    g.add_argument(
        "--inter-node-gbps",
        type=positive_float,
        default=None,
        help="network line rate per GPU in Gb/s between nodes (default the catalog's; 400: one NDR NIC per GPU)",
    )
    g.add_argument("--async-tp", action="store_true", help="overlap --sp's collectives with their matmuls")


def plan_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The plan the flags ask for, or None when none was given (one GPU)."""
    keys = (
        *("dp", "tp", "pp", "cp", "microbatches", "zero_stage", "gpus_per_node", "schedule", "virtual_stages"),
        *("global_batch", "shard_group", "nvlink_domain", "inter_node_gbps"),
    )
    plan = {k: getattr(args, k, None) for k in keys if getattr(args, k, None) is not None}
    plan.update({k: True for k in ("sp", "async_tp", "float8_all_gather") if getattr(args, k, False)})
    strategy = getattr(args, "fsdp", None)
    if strategy:
        plan["fsdp"] = True
        if strategy != "full_shard":
            plan["fsdp_strategy"] = strategy
    for flag, key in (("fsdp_dtype", "fsdp_param_dtype"), ("fsdp_reduce_dtype", "fsdp_reduce_dtype")):
        if getattr(args, flag, None):
            plan[key] = args.__dict__[flag]
    return plan or None


def show_parallel(args: argparse.Namespace, report: Any) -> int:
    """Print the multi-GPU ``report`` (or write its JSON)."""
    from perfpredict.parallel import render_parallel_text

    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
        return EXIT_OK
    print(render_parallel_text(report))
    shown(args, report.warnings)
    if args.json:
        write_text(args.json, report.to_json() + "\n")
        print(f"{PROG}: wrote {args.json}", file=sys.stderr)
    return EXIT_OK
