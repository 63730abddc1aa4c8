"""How fast perfpredict answers: predict_many over many configurations, and single predict calls.

BERT-base is built on the meta device (no weights are allocated) with token ids of shape (8, 128):

- first call: ``predict_many`` with one configuration; it captures the model twice (batch 8 and 9), which is
  the featurization a NAS loop pays once per architecture;
- sweep: ``predict_many`` over 1,000 configurations (batch 1..500 x H100-SXM and A100-40GB) on the cached
  graphs, median of 5 runs, reported as configurations per second (target: over 10,000/s), for each predictor
  (``--predictors``; the default model, two_timeline, and the analytical roofline), plus a CPU sweep of
  two_timeline, whose learned per-op efficiency is read at 8 anchor batches;
- single: ``perfpredict.predict`` on the cached graph for another device (L4), median of 20 calls (target: under
  50 ms).

The whole-model learned predictors have their own benchmark (speed_learned.py).

    python benchmarks/speed.py [--runs 5] [--predictors two_timeline,analytical] [--out benchmarks/results/speed.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import perfpredict
from perfpredict.core.units import GIB

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result

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
    parser.add_argument("--predictors", default="two_timeline,analytical", help="comma-separated predictor names")
    args = parser.parse_args()

    names = {d.name for d in perfpredict.list_devices()}
    missing = [d for d in (*DEVICES, SINGLE_DEVICE) if d not in names]
    if missing:
        raise SystemExit(f"devices {missing!r} are not in perfpredict.list_devices(): {sorted(names)}")

    model, ids = build()
    predictors = [p.strip() for p in args.predictors.split(",") if p.strip()]
    torch._dynamo.reset()
    t = time.perf_counter()
    first = perfpredict.predict_many(model, ids, configs=[{"device": DEVICES[0], "batch_size": 8}])
    first_s = time.perf_counter() - t

    sweeps = {}
    results = {}
    for predictor in predictors:
        for devices in (DEVICES, ("cpu",)) if predictor == "two_timeline" else (DEVICES,):
            configs = [{"device": d, "batch_size": b} for d in devices for b in BATCHES]
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                results[(predictor, devices)] = perfpredict.predict_many(
                    model, ids, configs=configs, predictor=predictor
                )
                times.append(time.perf_counter() - t)
            sweeps[(predictor, devices)] = (len(configs), times)

    singles = {}
    report = None
    for predictor in predictors:
        perfpredict.predict(model, (ids,), device=SINGLE_DEVICE, predictor=predictor)  # cache warm
        times = []
        for _ in range(20):
            t = time.perf_counter()
            report = perfpredict.predict(model, (ids,), device=SINGLE_DEVICE, predictor=predictor)
            times.append(time.perf_counter() - t)
        singles[predictor] = (statistics.median(times), report)

    lines = [
        "# perfpredict speed: predict_many and cached predict",
        "",
        f"- {header(__file__, packages=('torch', 'transformers', 'perfpredict'))} (a shared host)",
        "- model: `BertModel(BertConfig())` built under `torch.device('meta')`, input ids (8, 128) on meta; inference",
        "",
        "| what | predictor | time | rate |",
        "|---|---|---:|---:|",
        f"| first `predict_many` call, 1 config (captures batch 8 and 9: featurization) | default | {first_s:.2f} s "
        "| |",
    ]
    for (predictor, devices), (n, times) in sweeps.items():
        sweep_s = statistics.median(times)
        rate = n / sweep_s
        lines.append(
            f"| `predict_many`, {n:,} configs (batch 1..{BATCHES[-1]} x {', '.join(devices)}), cached "
            f"graphs, median of {args.runs} (runs: {', '.join(f'{s * 1e3:.1f}' for s in times)} ms) | "
            f"{predictor} | {sweep_s * 1e3:.1f} ms | **{rate:,.0f} configs/s** (target > 10,000/s: "
            f"{'met' if rate > 10000 else 'NOT met'}) |"
        )
    for predictor, (single_s, _) in singles.items():
        lines.append(
            f"| `perfpredict.predict` on the cached graph, device {SINGLE_DEVICE}, median of 20 | "
            f"{predictor} | {single_s * 1e3:.1f} ms | {1 / single_s:,.0f} calls/s (target < 50 ms: "
            f"{'met' if single_s < 0.05 else 'NOT met'}) |"
        )
    lines += [
        "",
        "Sample of the sweeps' answers:",
        "",
        "| predictor | device | batch | latency ms | throughput /s | peak memory GiB | fits |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for (predictor, _devices), got in results.items():
        for r in got.records():
            if r["batch_size"] in (1, 8, 500):
                lines.append(
                    f"| {predictor} | {r['device']} | {r['batch_size']} | {r['latency_ms']:.3f} | "
                    f"{r['throughput_per_s']:,.0f} | {r['peak_memory_bytes'] / GIB:.2f} | "
                    f"{r['fits_in_memory']} |"
                )
    lines += ["", f"First-call answer on {first['device'][0]} at batch 8: {first['latency_ms'][0]:.3f} ms.", ""]
    write_result("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
