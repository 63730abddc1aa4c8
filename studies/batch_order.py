"""Batch order: is a batch-1 row slower than batch 8 because it ran first, or because it runs other kernels?

    python studies/batch_order.py --dataset data/nvidia-h100-80gb-hbm3 --pairs 8 --controls 4 \\
        --out $OUT/batch_order.json

In the H100's fifth lease, 60 of 174 batch-1/batch-8 pairs had batch 1 more than 10% slower than batch 8 (median
1.28x), at the same SM clock. Within an ``--arch-block`` every batch-1 row is measured before any batch-8 row, so
two causes fit: the order (a cold process, allocator or library state that the first rows of a model pay for), or
the libraries' kernel choice at tiny batches (more or slower kernels at batch 1, in a launch-bound step).

For the ``--pairs`` most inverted pairs and ``--controls`` pairs that were not inverted, this measures batch 1 and
batch 8 with the collector's protocol in both orders (1 then 8, then 8 then 1, each model rebuilt) and profiles one
step of each with torch.profiler: the number of device kernels (CPU: aten ops) and their summed device time. The
verdict per pair: "order" when batch 1 is slower only when measured first; "kernels" when it is slower in both
orders and runs more kernels or more device time than batch 8; "host" when it is slower in both orders with no more
kernels and no more device time (the host's time per step); "none" when the inversion did not come back.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

INVERTED = 1.10  # batch-1 latency over batch-8 latency above which a pair counts as inverted


def pick_pairs(rows: list[dict[str, Any]], pairs: int, controls: int) -> list[dict[str, Any]]:
    """Batch-1/batch-8 pairs of one (architecture, phase, seq, dtype): the most inverted, then controls (closest
    to the median ratio among the not inverted). Each: the two keys, the dataset's ratio, and 'inverted'."""
    by: dict[tuple, dict[int, dict]] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("batch_size") in (1, 8):
            by.setdefault((r["arch_key"], r["phase"], r.get("seq_len"), r["dtype"]), {})[r["batch_size"]] = r
    found = [
        {
            "family": s[1]["family"],
            "phase": s[1]["phase"],
            "dtype": s[1]["dtype"],
            "keys": {1: s[1]["key"], 8: s[8]["key"]},
            "dataset_ratio": s[1]["latency_ms"] / s[8]["latency_ms"],
        }
        for s in by.values()
        if 1 in s and 8 in s
    ]
    inverted = sorted((p for p in found if p["dataset_ratio"] > INVERTED), key=lambda p: -p["dataset_ratio"])
    rest = [p for p in found if p["dataset_ratio"] <= INVERTED]
    if rest:
        mid = statistics.median(p["dataset_ratio"] for p in rest)
        rest.sort(key=lambda p: abs(p["dataset_ratio"] - mid))
    return [{**p, "inverted": True} for p in inverted[:pairs]] + [{**p, "inverted": False} for p in rest[:controls]]


def verdict(
    first: dict[int, float], second: dict[int, float], kernels: dict[int, int], device_ms: dict[int, float]
) -> str:
    """first/second: {batch: latency} in the order 1-then-8 and 8-then-1; kernels, device_ms: per batch."""
    slow_first = first[1] > INVERTED * first[8]
    slow_second = second[1] > INVERTED * second[8]
    if not slow_first and not slow_second:
        return "none"
    if slow_first and not slow_second:
        return "order"
    if slow_first and slow_second:
        return "kernels" if kernels[1] > kernels[8] or device_ms[1] > device_ms[8] else "host"
    return "mixed"  # slower only when measured second: neither cause predicts it


def profile_step(step, device: str) -> tuple[int, float]:
    """(device kernels, or aten ops on a CPU, in one step; their summed self time in ms)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device != "cpu" else [])
    step()
    with profile(activities=activities) as prof:
        step()
        if device != "cpu":
            torch.cuda.synchronize()
    count, total_us = 0, 0.0
    for e in prof.key_averages():
        if device != "cpu":
            t = getattr(e, "self_device_time_total", None)
            if t is None:
                t = getattr(e, "self_cuda_time_total", 0.0)
            if str(getattr(e, "device_type", "")).endswith("CUDA") and t > 0:
                count, total_us = count + e.count, total_us + t
        elif e.key.startswith("aten::"):
            count, total_us = count + e.count, total_us + e.self_cpu_time_total
    return count, total_us / 1e3


def run_pair(pair: dict[str, Any], monitor, cfg) -> dict[str, Any]:
    from perfpredict.profiling import zoo
    from perfpredict.profiling.collect_v2 import measure_spec

    out: dict[str, Any] = {"first": {}, "second": {}, "kernels": {}, "device_ms": {}}
    for label, order in (("first", (1, 8)), ("second", (8, 1))):
        for batch in order:
            row = measure_spec(zoo.ModelSpec.from_key(pair["keys"][batch]), monitor, cfg, "batch_order")
            out[label][batch] = row.get("latency_ms") if row["status"] == "ok" else None
    for batch in (1, 8):
        spec = zoo.ModelSpec.from_key(pair["keys"][batch])
        model = spec.build(cfg.device)
        x, labels = spec.inputs(cfg.device)
        out["kernels"][batch], out["device_ms"][batch] = profile_step(
            zoo.make_step(model, x, labels, spec.phase), cfg.device
        )
        del model, x, labels
    ok = all(out[k].get(b) for k in ("first", "second") for b in (1, 8))
    out["verdict"] = verdict(out["first"], out["second"], out["kernels"], out["device_ms"]) if ok else "failed"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="data/nvidia-h100-80gb-hbm3")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--controls", type=int, default=4)
    p.add_argument("--device", default=None, help="default: the dataset rows' torch device")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    from perfpredict.profiling.collect_engine import CollectConfig
    from perfpredict.profiling.dataset import load_dataset
    from perfpredict.profiling.monitor import Monitor

    rows = load_dataset(args.dataset).rows
    device = args.device or next(r["torch_device"] for r in rows if r.get("torch_device"))
    cfg = CollectConfig(out=Path("/tmp/unused"), device=device, graph_features="none", progress=False)
    monitor = Monitor(cfg.device)
    results = []
    for pair in pick_pairs(rows, args.pairs, args.controls):
        results.append({**pair, **run_pair(pair, monitor, cfg)})
        r = results[-1]
        print(
            f"{r['family']} {r['phase']} {r['dtype']} dataset {r['dataset_ratio']:.2f}: {r['first']} / "
            f"{r['second']} kernels {r['kernels']} device ms {r['device_ms']} -> {r['verdict']}",
            file=sys.stderr,
        )
        Path(args.out).write_text(json.dumps({"args": vars(args), "device": device, "pairs": results}, indent=1))
    counts = Counter(f"{'inverted' if r['inverted'] else 'control'}: {r['verdict']}" for r in results)
    print(json.dumps(counts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
