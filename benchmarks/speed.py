"""How fast perfpredict answers: predict_many over many configurations, and single predict calls.

BERT-base is built on the meta device (no weights are allocated) with token ids of shape (8, 128):

- first call: ``predict_many`` with one configuration; it captures the model twice (batch 8 and 9), which is
  the featurization a NAS loop pays once per architecture;
- sweep: ``predict_many`` over 1,000 configurations (batch 1..500 x H100-SXM and A100-40GB) on the cached
  graphs, median of 5 runs, reported as configurations per second (target: over 2,000/s);
- single: ``perfpredict.predict`` on the cached graph for another device (L4), median of 20 calls.

The learned-predictor part of this benchmark comes later.

    python benchmarks/speed.py [--runs 5] [--out benchmarks/results/speed.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import perfpredict
from perfpredict.profiling.cpu import host_summary

DEVICES = ("H100-SXM", "A100-40GB")  # names as perfpredict.list_devices() gives them (A100-40GB = SXM4 part)
SINGLE_DEVICE = "L4"
BATCHES = range(1, 501)


def build() -> tuple[torch.nn.Module, torch.Tensor]:
    from transformers import BertConfig, BertModel

    with torch.device("meta"):
        model = BertModel(BertConfig())
    ids = torch.randint(0, 1000, (8, 128), device="meta")
    return model.eval(), ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed sweeps (median)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "speed.md"))
    args = parser.parse_args()

    names = {d.name for d in perfpredict.list_devices()}
    missing = [d for d in (*DEVICES, SINGLE_DEVICE) if d not in names]
    if missing:
        raise SystemExit(f"devices {missing!r} are not in perfpredict.list_devices(): {sorted(names)}")

    model, ids = build()
    torch._dynamo.reset()
    t = time.perf_counter()
    first = perfpredict.predict_many(model, ids, configs=[{"device": DEVICES[0], "batch_size": 8}])
    first_s = time.perf_counter() - t

    configs = [{"device": d, "batch_size": b} for d in DEVICES for b in BATCHES]
    sweeps = []
    results = []
    for _ in range(args.runs):
        t = time.perf_counter()
        results = perfpredict.predict_many(model, ids, configs=configs)
        sweeps.append(time.perf_counter() - t)
    sweep_s = statistics.median(sweeps)
    rate = len(configs) / sweep_s

    perfpredict.predict(model, (ids,), device=SINGLE_DEVICE)  # cache warm (graph shared with predict_many)
    singles = []
    report = None
    for _ in range(20):
        t = time.perf_counter()
        report = perfpredict.predict(model, (ids,), device=SINGLE_DEVICE)
        singles.append(time.perf_counter() - t)
    single_s = statistics.median(singles)

    by_key = {(r.device, r.batch_size): r for r in results}
    sample = [by_key[(d, b)] for d in DEVICES for b in (1, 8, 500)]
    print(f"first predict_many call (featurize): {first_s:.2f} s; sweep of {len(configs)} configs: "
          f"{sweep_s*1e3:.1f} ms median of {args.runs} -> {rate:,.0f} configs/s; single predict on cached graph "
          f"({SINGLE_DEVICE}): {single_s*1e3:.1f} ms")

    command = "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    lines = [
        "# perfpredict speed: predict_many and cached predict",
        "",
        f"- date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- machine: {host_summary()}; load average at the end {os.getloadavg()[0]:.1f} (a shared host)",
        f"- python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {__import__('transformers').__version__}, perfpredict {perfpredict.__version__}",
        f"- command: `{command}`",
        "- model: `BertModel(BertConfig())` built under `torch.device('meta')`, input ids (8, 128) on meta; "
        "analytical predictor, inference",
        "",
        "| what | time | rate |",
        "|---|---:|---:|",
        f"| first `predict_many` call, 1 config (captures batch 8 and 9: featurization) | {first_s:.2f} s | |",
        f"| `predict_many`, {len(configs):,} configs (batch 1..{BATCHES[-1]} x {', '.join(DEVICES)}), cached "
        f"graphs, median of {args.runs} (runs: {', '.join(f'{s*1e3:.1f}' for s in sweeps)} ms) "
        f"| {sweep_s*1e3:.1f} ms | **{rate:,.0f} configs/s** (target > 2,000/s: "
        f"{'met' if rate > 2000 else 'NOT met'}) |",
        f"| `perfpredict.predict` on the cached graph, device {SINGLE_DEVICE}, median of 20 | {single_s*1e3:.1f} ms "
        f"| {1 / single_s:,.0f} calls/s |",
        "",
        "Sample of the sweep's answers (analytical predictor):",
        "",
        "| device | batch | latency ms | throughput /s | peak memory GiB | fits |",
        "|---|---:|---:|---:|---:|---|",
        *(f"| {r.device} | {r.batch_size} | {r.latency_ms:.3f} | {r.throughput_per_s:,.0f} | "
          f"{r.peak_memory_bytes / 2**30:.2f} | {r.fits_in_memory} |" for r in sample),
        "",
        f"Single predict on {SINGLE_DEVICE} at batch 8: {report.latency_ms.value:.3f} ms; first-call answer on "
        f"{first[0].device} at batch 8: {first[0].latency_ms:.3f} ms.",
        "",
        "Learned predictors: not yet measured here (that part of the benchmark comes with them).",
        "",
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
