"""The measurement commands: ``perfpredict collect`` and ``perfpredict zoo {families,graphs,features}``.

Bad input raises :class:`perfpredict.core.errors.InvalidInputError` (one line and exit code 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError


def _csv(kind: type, what: str):
    def parse(text: str) -> list:
        try:
            values = [kind(v.strip()) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values:
            raise argparse.ArgumentTypeError(f"{what}: expected a comma-separated list, got {text!r}")
        return values

    return parse


def _positive(kind: type):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = -1
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    return parse


def add_collect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument(
        "--families",
        type=_csv(str, "--families"),
        default=None,
        help="comma-separated zoo families (default: all; see `perfpredict zoo families`)",
    )
    p.add_argument("--budget-minutes", type=_positive(float), default=None, help="stop starting configs after this")
    p.add_argument(
        "--out",
        default=None,
        help="dataset folder (default data/v3/<device-slug>/; data/<device-slug>/ with --protocol 2)",
    )
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.add_argument("--max-rows", type=_positive(int), default=None, help="stop when the folder holds this many rows")
    p.add_argument(
        "--profile",
        choices=("tiny", "cpu", "gpu"),
        default=None,
        help="model sizes: tiny (small shared hosts), cpu, gpu (default: cpu on CPU, gpu on CUDA)",
    )
    p.add_argument("--archs-per-family", type=_positive(int), default=50, help="sampled architectures per family")
    p.add_argument(
        "--arch-block",
        type=_positive(int),
        default=5,
        help="architectures whose batch sweeps are interleaved (default 5); 1-2 on a short GPU lease "
        "gives whole batch sweeps for fewer architectures instead of batch 1 for many",
    )
    p.add_argument("--phases", type=_csv(str, "--phases"), default=None, help="inference,training (default both)")
    p.add_argument(
        "--dtypes",
        type=_csv(str, "--dtypes"),
        default=None,
        help="default float32,bfloat16 on CPU; float32,float16,bfloat16 on CUDA",
    )
    p.add_argument("--batches", type=_csv(int, "--batches"), default=None, help="batch sweep (default by profile)")
    p.add_argument("--warmup-min", type=int, default=5, help="warm-up runs at least (default 5)")
    p.add_argument("--min-runs", type=int, default=30, help="timed runs, unless --min-seconds pass first (30)")
    p.add_argument("--min-seconds", type=float, default=1.0, help="timed seconds, unless --min-runs come first (1)")
    p.add_argument("--floor-runs", type=int, default=5, help="never fewer timed runs than this (5)")
    p.add_argument(
        "--warmup-max-seconds",
        dest="warmup_max_s",
        type=_positive(float),
        default=5.0,
        help="stop warming up after this many seconds even if not yet stable (default 5)",
    )
    p.add_argument(
        "--max-latency-ms",
        type=_positive(float),
        default=None,
        help="skip larger batches after a row slower than this (a time cap for small hosts)",
    )
    p.add_argument(
        "--too-slow-factor",
        type=_positive(float),
        default=10.0,
        help="a config whose warm first call exceeds this x --max-latency-ms is a too_slow row (10)",
    )
    p.add_argument(
        "--power-sample-interval-s",
        type=float,
        default=0.1,
        help="GPU power-sampling thread period, the energy counter's cross-check (default 0.1; 0 = off)",
    )
    p.add_argument(
        "--graph-features",
        choices=("inline", "deferred", "none"),
        default="inline",
        help="OpGraph features per row now, later (`perfpredict zoo features`), or never",
    )
    p.add_argument(
        "--sentinel",
        action="store_true",
        help="time a fixed reference workload right before each row (env_sentinel_* fields), so labels "
        "can be checked against the host's speed; about 0.3 s per row",
    )
    p.add_argument(
        "--protocol",
        dest="protocol_version",
        type=int,
        choices=(2, 3),
        default=3,
        help="3 (default): rounds interleaved across rows, device_ms/eager_ms/host_dispatch_ms apart; "
        "2: one window per row, synced after every step (the older rows)",
    )
    p.add_argument("--min-rounds", type=_positive(int), default=3, help="rounds per row at least (protocol 3; 3)")
    p.add_argument(
        "--max-rounds",
        type=_positive(int),
        default=5,
        help="rounds per row at most, while the round spread exceeds --max-spread (5)",
    )
    p.add_argument(
        "--max-spread",
        type=_positive(float),
        default=0.03,
        help="re-measure a row whose round medians spread more than this fraction (0.03)",
    )
    p.add_argument(
        "--round-block",
        type=_positive(int),
        default=12,
        help="rows whose rounds are interleaved (default 12): larger puts rounds further apart",
    )
    p.add_argument(
        "--ops",
        action="store_true",
        help="collect single-op rows instead of model rows (into OUT/ops; see data/README.md)",
    )
    p.add_argument(
        "--ops-variants", type=int, default=2, help="with --ops: sampled shape variants around each zoo op (default 2)"
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="collect on a Ray cluster, one worker per GPU (per node on CPU); ADDRESS 'auto' or "
        "ray://host:10001 joins a running cluster, none starts a local one "
        '(pip install "perfpredict[cluster]")',
    )
    p.add_argument(
        "--workers",
        type=_positive(int),
        default=None,
        help="with --ray: worker count (default one per GPU; one per node with --device cpu)",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        default=None,
        help="measure shard I of N (0 <= I < N) into OUT/parts/; SLURM: --shard $SLURM_ARRAY_TASK_ID/8 "
        "(docs: cluster collection)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--no-compact", action="store_true", help="leave rows in rows.jsonl (no Parquet)")


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    """Add ``collect`` and ``zoo`` to the ``perfpredict`` subparsers; each sets ``func`` to a handler."""
    parents = parents or []
    p = subparsers.add_parser("collect", parents=parents, help="measure zoo models on this machine into a dataset")
    add_collect_args(p)
    p.add_argument(
        "--fill-graph-features",
        action="store_true",
        help="after collecting, trace graph features for the folder's rows",
    )
    p.set_defaults(func=run_collect)

    z = subparsers.add_parser("zoo", parents=parents, help="the model zoo: families, graph corpus, graph features")
    zsub = z.add_subparsers(dest="zoo_command", metavar="ZOO_COMMAND")
    zsub.required = True
    f = zsub.add_parser("families", parents=parents, help="list the zoo families")
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=run_families)
    g = zsub.add_parser(
        "graphs", parents=parents, help="write the unlabelled graph corpus (a spec list), or trace a slice of it"
    )
    g.add_argument("--n", type=_positive(int), default=10_000, help="specs in the corpus (default 10000)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--profile", choices=("cpu", "gpu"), default="gpu")
    g.add_argument("--out", default="data/graph_corpus", help="corpus folder (default data/graph_corpus)")
    g.add_argument(
        "--trace",
        metavar="START:STOP",
        default=None,
        help="regenerate graphs [START, STOP) of the corpus and print one summary line per graph",
    )
    g.set_defaults(func=run_graphs)
    h = zsub.add_parser("features", parents=parents, help="fill graph_features.jsonl for a dataset folder")
    h.add_argument("folder")
    h.add_argument("--budget-minutes", type=_positive(float), default=None)
    h.set_defaults(func=run_features)


def run_collect(args: argparse.Namespace) -> int:
    from dataclasses import fields

    from perfpredict.profiling.collect_engine import CollectConfig, device_slug
    from perfpredict.profiling.graph_features import fill_graph_features
    from perfpredict.profiling.shards import parse_shard

    device = "cuda:0" if args.device == "cuda" else args.device
    _check_cluster_args(args, device)
    default_root = Path("data") / "v3" if args.protocol_version == 3 else Path("data")  # v3 labels kept apart
    out = Path(args.out) if args.out else default_root / device_slug(device)
    # every flag named for a config field, but the device and folder, which are settled above
    kwargs = {f.name: getattr(args, f.name) for f in fields(CollectConfig) if hasattr(args, f.name)}
    kwargs.update(out=out, device=device)
    if args.phases:
        bad = [p for p in args.phases if p not in ("inference", "training")]
        if bad:
            raise InvalidInputError(f"phase(s) {bad!r} are not inference or training")
    index, count = parse_shard(args.shard) if args.shard is not None else (0, 1)
    cfg = CollectConfig(
        progress=not args.no_progress,
        compact=not args.no_compact,
        shard_index=index,
        shard_count=count,
        **{k: v for k, v in kwargs.items() if v is not None},
    )
    summary = _collect(args, cfg)
    print(
        f"collect: {summary.measured} rows measured ({summary.oom} oom, {summary.errors} failed) in "
        f"{summary.seconds:.0f} s ({summary.rows_per_minute:.1f} rows/min); {summary.rows_total} rows in {out}; "
        f"stopped by {summary.stopped_by}",
        file=sys.stderr,
    )
    if getattr(args, "fill_graph_features", False):
        fill_graph_features(out, progress=not args.no_progress)
    return 0


def _check_cluster_args(args: argparse.Namespace, device: str) -> None:
    """--ray, --workers, --shard and --ops: the combinations that would lose rows or measure nothing."""
    if args.workers is not None and args.ray is None:
        raise InvalidInputError("--workers needs --ray")
    if args.ray is not None and args.shard is not None:
        raise InvalidInputError("--ray shards the plan itself: drop --shard")
    if args.ops and (args.ray is not None or args.shard is not None):
        raise InvalidInputError("--ops does not shard yet: collect single-op rows without --ray or --shard")
    if args.ray is not None and device != "cpu" and not args.out:
        raise InvalidInputError("--ray --device cuda needs --out: a folder every node shares")


def _collect(args: argparse.Namespace, cfg: Any) -> Any:
    """Single-op rows, a Ray cluster, or this machine (one shard of the plan, or all of it)."""
    if args.ops:
        from perfpredict.profiling.collect_ops import collect_ops

        return collect_ops(cfg, variants=args.ops_variants)
    if args.ray is not None:
        from perfpredict.profiling.cluster import run_cluster

        return run_cluster(cfg, address=args.ray or None, workers=args.workers)
    from perfpredict.profiling.shard_run import run_shard

    return run_shard(cfg)  # without --shard: the plain protocol-2/3 collection


def run_families(args: argparse.Namespace) -> int:
    from perfpredict.profiling import zoo

    rows = [
        {
            "family": n,
            "kind": zoo.get_family(n).kind,
            "source": zoo.get_family(n).source,
            "params": list(zoo.get_family(n).params),
        }
        for n in zoo.list_families()
    ]
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        for r in rows:
            print(f"{r['family']:<14} {r['kind']:<7} {r['source']:<13} {', '.join(r['params'])}")
    return 0


def run_graphs(args: argparse.Namespace) -> int:
    from perfpredict.profiling import corpus

    folder = Path(args.out)
    path = folder / corpus.SPECS_FILE
    if args.trace is None:
        path = corpus.write_corpus(folder, n=args.n, seed=args.seed, profile=args.profile)
        print(
            f"zoo graphs: wrote {args.n} specs to {path} (graphs regenerate with --trace START:STOP)", file=sys.stderr
        )
        return 0
    try:
        start, stop = (int(v) for v in args.trace.split(":"))
    except ValueError as err:
        raise InvalidInputError(f"--trace {args.trace!r} is not START:STOP") from err
    specs = corpus.load_corpus_specs(path)
    for key, graph in corpus.corpus_graphs(specs, start, stop):
        print(
            json.dumps(
                {
                    "key": key,
                    "nodes": len(graph.nodes),
                    "edges": len(graph.edges),
                    "flops": graph.total_flops,
                    "params": graph.param_count,
                }
            )
        )
    return 0


def run_features(args: argparse.Namespace) -> int:
    from perfpredict.profiling.graph_features import fill_graph_features

    added = fill_graph_features(args.folder, budget_minutes=args.budget_minutes)
    print(f"zoo features: {added} graph feature rows added to {args.folder}", file=sys.stderr)
    return 0
