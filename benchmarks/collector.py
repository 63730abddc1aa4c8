"""Collector throughput: rows per minute of ``perfpredict collect`` on this machine.

    python benchmarks/collector.py --device cpu --minutes 2 --out benchmarks/results/collector-cpu.md

Runs a fresh collection (all families, round-robin) into a temporary folder for ``--minutes`` with the dataset's
settings, and reports rows per minute and where a row's time goes. ``--dataset`` adds the same figures for an
existing dataset folder (from each row's ``row_seconds``). ``--pause`` pauses a running collector meanwhile.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from perfpredict.hardware.cpu_detection import cpu_model
from perfpredict.profiling.collect_engine import CollectConfig
from perfpredict.profiling.collect_v2 import collect
from perfpredict.profiling.dataset import load_dataset

sys.path.insert(0, str(Path(__file__).parent))
from repeatability import paused

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result


def describe(rows: list[dict], seconds: float | None) -> list[str]:
    status = Counter(r["status"] for r in rows)
    per_row = [r["row_seconds"] for r in rows if r.get("row_seconds") is not None]
    total = seconds if seconds is not None else sum(per_row)
    out = [
        f"- rows: {len(rows)} ({', '.join(f'{k} {v}' for k, v in sorted(status.items()))}), "
        f"families: {len({r['family'] for r in rows})}",
        f"- rows per minute: **{60 * len(rows) / total:.1f}**"
        + (" (wall clock)" if seconds else " (from the rows' own row_seconds)"),
        f"- seconds per row: median {statistics.median(per_row):.2f}, mean {statistics.fmean(per_row):.2f}, "
        f"max {max(per_row):.1f}",
    ]
    for phase in ("inference", "training"):
        sub = [r["row_seconds"] for r in rows if r["phase"] == phase]
        if sub:
            out.append(f"- {phase}: {len(sub)} rows, median {statistics.median(sub):.2f} s per row")
    return out


def _median_load(folder: str | None) -> str:
    if not folder:
        return "n/a"
    loads = [r["env_load_avg_1m_before"] for r in load_dataset(folder).rows if r.get("env_load_avg_1m_before")]
    return f"{statistics.median(loads):.1f}" if loads else "n/a"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--minutes", type=float, default=2.0)
    p.add_argument("--min-seconds", type=float, default=0.3)
    p.add_argument("--max-latency-ms", type=float, default=200.0)
    p.add_argument("--dataset", default=None)
    p.add_argument("--pause", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    name = cpu_model() if args.device == "cpu" else torch.cuda.get_device_name()
    lines = [
        f"# Collector throughput on {args.device} ({name})",
        "",
        f"{header(__file__, argv)}.",
        "",
        f"torch {torch.__version__}, {torch.get_num_threads()} threads. Settings: `--min-seconds "
        f"{args.min_seconds} --warmup-max-seconds 1 --max-latency-ms {args.max_latency_ms} --graph-features "
        "deferred` (the committed CPU dataset's settings). The 1-minute load average while the rows were "
        f"measured: median {_median_load(args.dataset)} on {os.cpu_count()} CPUs (other sessions' jobs "
        "shared the host; a row's time grows with it).",
        "",
    ]
    if args.minutes > 0:
        with tempfile.TemporaryDirectory() as tmp, paused(args.pause):
            cfg = CollectConfig(
                out=Path(tmp),
                device=args.device,
                budget_minutes=args.minutes,
                min_seconds=args.min_seconds,
                warmup_max_s=1.0,
                max_latency_ms=args.max_latency_ms,
                graph_features="deferred",
                progress=False,
            )
            t0 = time.monotonic()
            collect(cfg)
            seconds = time.monotonic() - t0
            rows = load_dataset(tmp).rows
        lines += [f"## A fresh {args.minutes:g}-minute collection", ""] + describe(rows, seconds) + [""]
    if args.dataset:
        rows = load_dataset(args.dataset).rows
        lines += [f"## The dataset in `{args.dataset}`", ""] + describe(rows, None) + [""]
    text = "\n".join(lines)
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
