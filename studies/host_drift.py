"""Host drift: how far the same configs drift between measurement windows, and how much the sentinel takes out.

    python studies/host_drift.py --dataset data/cpu-amd-epyc-2c --rounds 30 --out studies/results/host_drift-cpu

Builds ``--configs`` models from the dataset's keys (one per family, batch 4, dataset latency 2-30 ms), then for
each of ``--rounds`` rounds times the host-speed sentinel (``perfpredict/profiling/sentinel.py``) and measures every
model with the collector's protocol. Per model it reports the spread of its median latency across rounds (the
median of |round / median round - 1|, on the scale of a MAPE) raw, and after dividing by the sentinel's speed
factor (all parts, and each part alone). A sentinel that tracks the host takes the spread down; one that does not
leaves it or adds its own noise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

from perfpredict.profiling import zoo
from perfpredict.profiling.dataset import load_dataset, quiet_host
from perfpredict.profiling.monitor import Monitor
from perfpredict.profiling.sentinel import PARTS, Sentinel, speed_factor


def pick_keys(rows: list[dict], n: int, seed: int) -> list[str]:
    """One batch-4 row per family, 2-30 ms in the dataset, families in a seeded random order."""
    by_family: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("batch_size") == 4 and 2 <= r["latency_ms"] <= 30:
            by_family.setdefault(r["family"], []).append(r)
    rng = random.Random(seed)
    families = sorted(by_family)
    rng.shuffle(families)
    return [rng.choice(sorted(by_family[f], key=lambda r: r["key"]))["key"] for f in families[:n]]


def spread(values: list[float]) -> float:
    """Median of |value / median - 1|, in percent."""
    mid = statistics.median(values)
    return 100 * statistics.median(abs(v / mid - 1) for v in values)


def corr(a: list[float], b: list[float]) -> float:
    try:
        return statistics.correlation(a, b)
    except statistics.StatisticsError:  # a constant column
        return float("nan")


def run(
    keys: list[str], rounds: int, min_seconds: float, device: str, adjacent: bool
) -> tuple[list[list[dict]], list[list[float]]]:
    """Per round, the sentinel readings (one per model when ``adjacent``, else one for the round) and latencies."""
    monitor = Monitor(device)
    steps = []
    for key in keys:
        spec = zoo.ModelSpec.from_key(key)
        model = spec.build(device)
        x, labels = spec.inputs(device)
        steps.append(zoo.make_step(model, x, labels, spec.phase))
    sentinel = Sentinel(device, every_s=0.0)
    readings, latencies = [], []
    for r in range(rounds):
        readings.append([])
        latencies.append([])
        for i, step in enumerate(steps):
            if adjacent or i == 0:
                reading = sentinel.reading()
            readings[-1].append(reading)
            latencies[-1].append(monitor.measure(step, min_seconds=min_seconds, warmup_max_s=1.0).latency_ms)
        print(f"round {r + 1}/{rounds}: sentinel {readings[-1][0]}", file=sys.stderr)
    return readings, latencies


def summarize(keys: list[str], readings: list[list[dict]], latencies: list[list[float]]) -> dict:
    flat = [r for rnd in readings for r in rnd]
    reference = {p: statistics.median(r[f"env_sentinel_{p}_ms"] for r in flat) for p in PARTS}

    def factors(i: int) -> dict[str, list[float]]:
        """Model i's speed factor in each round, from the reading taken for it."""
        out = {"all parts": [speed_factor(rnd[i], reference) for rnd in readings]}
        out.update({p: [rnd[i][f"env_sentinel_{p}_ms"] / reference[p] for rnd in readings] for p in PARTS})
        return out

    per_model = []
    for i, key in enumerate(keys):
        raw = [lat[i] for lat in latencies]
        entry = {"key": key, "raw_spread_pct": spread(raw), "median_ms": statistics.median(raw)}
        for name, f in factors(i).items():
            entry[f"spread_pct / {name}"] = spread([v / s for v, s in zip(raw, f)])
            entry[f"corr log / {name}"] = corr([math.log(v) for v in raw], [math.log(s) for s in f])
        per_model.append(entry)
    return {
        "reference_ms": reference,
        "factor_spread_pct": {n: spread(f) for n, f in factors(0).items()},
        "per_model": per_model,
    }


def report(args, s: dict, meta: dict) -> str:
    names = list(s["factor_spread_pct"])
    lines = [
        f"# Host drift on `{Path(args.dataset).name}`'s device",
        "",
        f"`python studies/host_drift.py --dataset {args.dataset} --configs {args.configs} --rounds "
        f"{args.rounds} --min-seconds {args.min_seconds:g}{' --adjacent' if args.adjacent else ''}`; sentinel timed "
        f"{'right before each model' if args.adjacent else 'once per round'}; {meta['seconds']:.0f} s; host load (1-minute "
        f"average) {meta['load_before']:.2f} before, {meta['load_after']:.2f} after, on {os.cpu_count()} cores.",
        "",
        "Spread: median over rounds of |round's median latency / the model's median over rounds - 1|. "
        "'/ X' divides each round by the sentinel's speed factor X before taking the spread.",
        "",
        "| model | median ms | raw spread | "
        + " | ".join(f"/ {n}" for n in names)
        + " | "
        + " | ".join(f"corr / {n}" for n in names)
        + " |",
        "|---|---:|---:|" + "---:|" * (2 * len(names)),
    ]
    for m in s["per_model"]:
        k = json.loads(m["key"])
        lines.append(
            f"| {k['family']} {k['phase']} {k['dtype']} b{k['batch']} | {m['median_ms']:.2f} "
            f"| {m['raw_spread_pct']:.1f}% | "
            + " | ".join(f"{m[f'spread_pct / {n}']:.1f}%" for n in names)
            + " | "
            + " | ".join(f"{m[f'corr log / {n}']:.2f}" for n in names)
            + " |"
        )
    med = {n: statistics.median(m[f"spread_pct / {n}"] for m in s["per_model"]) for n in names}
    lines += [
        f"| **median over models** | | **{statistics.median(m['raw_spread_pct'] for m in s['per_model']):.1f}%** "
        "| " + " | ".join(f"**{med[n]:.1f}%**" for n in names) + " | " + " | " * (len(names) - 1) + " |",
        "",
        "Sentinel's own spread over rounds (the first model's readings): "
        + ", ".join(f"{n} {v:.1f}%" for n, v in s["factor_spread_pct"].items())
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="data/cpu-amd-epyc-2c")
    p.add_argument("--configs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--min-seconds", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--adjacent", action="store_true", help="time the sentinel right before each model, not per round")
    p.add_argument("--out", default=None, help="path stem: writes STEM.md and STEM.json")
    args = p.parse_args(argv)
    rows = [r for r in load_dataset(args.dataset).rows if r.get("status") == "ok" and quiet_host(r)]
    keys = pick_keys(rows, args.configs, args.seed)
    device = rows[0]["torch_device"]
    meta = {"load_before": os.getloadavg()[0]}
    t0 = time.monotonic()
    readings, latencies = run(keys, args.rounds, args.min_seconds, device, args.adjacent)
    meta.update(seconds=time.monotonic() - t0, load_after=os.getloadavg()[0])
    s = summarize(keys, readings, latencies)
    text = report(args, s, meta)
    print(text)
    if args.out:
        Path(args.out + ".md").write_text(text)
        Path(args.out + ".json").write_text(
            json.dumps(
                {"meta": meta, "args": vars(args), "readings": readings, "latencies": latencies, "summary": s}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
