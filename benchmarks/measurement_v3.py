"""Measurement v3's targets on one device: repeatability across collections, batch-sweep inversions, collection rate.

    # re-measure a sample of a v3 folder's model and op rows into another folder (another round, later or another day)
    python benchmarks/measurement_v3.py recheck data/v3/cpu-amd-epyc-2c --into /tmp/recheck --models 40 --ops 400
    # compare the two and write the report
    python benchmarks/measurement_v3.py report data/v3/cpu-amd-epyc-2c --recheck /tmp/recheck \
        --out benchmarks/results/measurement_v3-cpu-amd-epyc-2c.md

The targets (issue "Measurement v3"): the same rows re-measured in another collection agree within 2% on
``device_ms`` (median over rows) and 5% at the 90th percentile, op rows within 2% (median), ``eager_ms`` within 5%
(median); under 2% of batch sweeps inverted (a larger batch more than 10% faster) on ``device_ms``; at least 40 model
rows or 1,000 op rows a minute on a GPU. The relative difference of a row is ``|a - b| / min(a, b)``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path

from perfpredict.profiling import dataset as ds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result

TARGETS = {"device_ms": (0.02, 0.05), "eager_ms": (0.05, None), "op device_ms": (0.02, None)}


def _ok(folder: Path) -> list[dict]:
    return [r for r in ds.load_dataset(folder, join_features=False).rows if r.get("status") == "ok"]


def recheck(args: argparse.Namespace) -> int:
    from perfpredict.profiling.collect_engine import CollectConfig
    from perfpredict.profiling.collect_ops import collect_ops
    from perfpredict.profiling.collect_v3 import collect_rounds
    from perfpredict.profiling.op_instances import OpInstance
    from perfpredict.profiling.rounds import RoundPolicy
    from perfpredict.profiling.zoo import ModelSpec

    src, into = Path(args.folder), Path(args.into)
    settings = json.loads((src / "collector.json").read_text()) if (src / "collector.json").exists() else {}
    proto = settings.get("protocol", {})
    rng = random.Random(args.seed)
    models = _ok(src)
    models = rng.sample(models, min(args.models, len(models)))
    cfg = CollectConfig(
        out=into,
        device=args.device,
        graph_features="none",
        progress=False,
        device_label=models[0]["device"] if models else None,
        min_seconds=proto.get("min_seconds", 1.0),
        warmup_max_s=proto.get("warmup_max_s", 5.0),
    )
    if models:
        collect_rounds(cfg, RoundPolicy(), block=12, specs=[ModelSpec.from_key(r["key"]) for r in models])
    ops = _ok(src / "ops") if (src / "ops").exists() else []
    ops = rng.sample(ops, min(args.ops, len(ops)))
    if ops:
        cfg.device_label = ops[0]["device"]
        cfg.round_block = 48
        collect_ops(cfg, ops=[OpInstance.from_key(r["key"]) for r in ops])
    print(f"recheck: {len(models)} model rows and {len(ops)} op rows re-measured into {into}", file=sys.stderr)
    return 0


def _diffs(a_rows: list[dict], b_rows: list[dict], metric: str) -> list[float]:
    b = {r["key"]: r for r in b_rows}
    out = []
    for r in a_rows:
        other = b.get(r["key"])
        if other and r.get(metric) and other.get(metric):
            out.append(abs(r[metric] - other[metric]) / min(r[metric], other[metric]))
    return sorted(out)


def _pct(q: list[float], p: float) -> float:
    return q[int(p * (len(q) - 1))] if q else float("nan")


def _rate(rows: list[dict], folder: Path) -> float | None:
    """Rows per minute of collection: rows over the span of their rounds' timestamps (pauses between runs left
    out by summing only gaps under 10 minutes)."""
    recs, _, _ = ds.read_jsonl(folder / "rounds.jsonl", required=("key",))
    stamps = sorted(r["at"] for r in recs if isinstance(r.get("at"), (int, float)))
    busy = sum(b - a for a, b in zip(stamps, stamps[1:]) if b - a <= 600)
    return 60 * len(rows) / busy if busy > 0 else None


def report(args: argparse.Namespace) -> int:
    src = Path(args.folder)
    models, ops = _ok(src), _ok(src / "ops") if (src / "ops").exists() else []
    rm = _ok(Path(args.recheck)) if args.recheck else []
    ro = _ok(Path(args.recheck) / "ops") if args.recheck and (Path(args.recheck) / "ops").exists() else []
    device = (models or ops or [{}])[0].get("device", "?")
    lines = [
        f"# Measurement v3 on {device}",
        "",
        f"{header(__file__, packages=(), inputs=(args.folder,))}.",
        "",
        f"Rows from `{args.folder}` ({len(models)} model rows, {len(ops)} op rows, status ok).",
        "",
        "## Repeatability: the same rows in another collection",
        "",
        "| label | rows | median | 90th percentile | target (median / p90) | met |",
        "|---|---:|---:|---:|---|---|",
    ]
    for name, a, b, metric in (
        ("device_ms", models, rm, "device_ms"),
        ("eager_ms", models, rm, "eager_ms"),
        ("op device_ms", ops, ro, "device_ms"),
    ):
        q = _diffs(a, b, metric)
        med, p90 = TARGETS[name]
        met = bool(q) and statistics.median(q) <= med and (p90 is None or _pct(q, 0.9) <= p90)
        lines.append(
            f"| {name} | {len(q)} | {statistics.median(q):.1%} | {_pct(q, 0.9):.1%} | "
            f"{med:.0%}{f' / {p90:.0%}' if p90 else ''} | {'yes' if met else 'no'} |"
            if q
            else f"| {name} | 0 | - | - | {med:.0%} | not measured |"
        )
    lines += ["", "## Within one collection", "", "| figure | value | target |", "|---|---:|---|"]
    for metric in ("device_ms", "eager_ms"):
        inv, n = ds.batch_sweep_inversions(models, latency_key=metric)
        lines.append(
            f"| batch sweeps inverted on {metric} (larger batch > 10% faster) | {inv} of {n}"
            f"{f' ({inv / n:.1%})' if n else ''} | under 2% (device_ms) |"
        )
    spreads = sorted(r["device_ms_round_spread"] for r in models if r.get("device_ms_round_spread") is not None)
    op_spreads = sorted(r["device_ms_round_spread"] for r in ops if r.get("device_ms_round_spread") is not None)
    if spreads:
        lines.append(
            f"| model rows: round spread of device_ms, median / p90 | {statistics.median(spreads):.1%} / "
            f"{_pct(spreads, 0.9):.1%} | re-measured above 3% |"
        )
        lines.append(
            f"| model rows re-measured (more than 3 rounds) | "
            f"{sum(bool(r.get('remeasured')) for r in models)} of {len(models)} | |"
        )
    if op_spreads:
        lines.append(
            f"| op rows: round spread, median / p90 | {statistics.median(op_spreads):.1%} / "
            f"{_pct(op_spreads, 0.9):.1%} | |"
        )
    for name, rows, folder, target in (
        ("model rows", models, src, "40 / min on a GPU"),
        ("op rows", ops, src / "ops", "1,000 / min on a GPU"),
    ):
        rate = _rate(rows, folder) if rows else None
        lines.append(f"| collection rate, {name} | {f'{rate:.0f} / min' if rate else '-'} | {target} |")
    gaps = sorted(r["round_gap_s"] for r in models if r.get("round_gap_s") is not None)
    if gaps:
        lines.append(f"| seconds between a row's rounds, median | {statistics.median(gaps):.0f} s | minutes apart |")
    lines += ["", f"Host: {os.cpu_count()} cores; load average at the end of the report {os.getloadavg()[0]:.2f}."]
    text = "\n".join(lines) + "\n"
    write_result(text, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recheck", help="re-measure a sample of a v3 folder's rows into another folder")
    r.add_argument("folder")
    r.add_argument("--into", required=True)
    r.add_argument("--device", default="cpu")
    r.add_argument("--models", type=int, default=40)
    r.add_argument("--ops", type=int, default=400)
    r.add_argument("--seed", type=int, default=0)
    r.set_defaults(func=recheck)
    q = sub.add_parser("report", help="repeatability, inversions and rate, as markdown")
    q.add_argument("folder")
    q.add_argument("--recheck", default=None)
    q.add_argument("--out", default=None)
    q.set_defaults(func=report)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
