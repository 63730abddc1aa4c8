"""Measure FBNet candidates from HELP's set on a local GPU, for ``nas_help_fbnet.py --ours`` to score.

    python benchmarks/nas_measure_fbnet.py --out $OUT/fbnet_<gpu>.json [--count 150] [--batches 1,32,64,256]

Each candidate (``perfpredict.nas.fbnet``, CIFAR-100 variant, fp32, eval mode, ``torch.no_grad``) runs on random
32x32 inputs. Two latencies per candidate and batch, each the median of ``--rounds`` rounds that visit every
candidate in turn (so drift spreads over all of them), after 3 warm-up calls:

- ``eager_ms``: ``--calls`` back-to-back calls between two CUDA events, divided by the calls (the project's
  protocol-v3 eager latency: the host runs ahead of the GPU);
- ``synced_ms``: one call between two synchronisations, wall clock, median of ``--calls`` (a timing loop that waits
  for the GPU after every call, as many NAS papers time a candidate).

cuDNN's benchmark mode is left off (torch's default). Needs a CUDA GPU; writes one JSON file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from perfpredict.external.help import load_fbnet
from perfpredict.nas import fbnet


def eager_ms(model: torch.nn.Module, x: torch.Tensor, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        model(x)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def synced_ms(model: torch.nn.Module, x: torch.Tensor, calls: int) -> float:
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(x)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--count", type=int, default=150, help="candidates, drawn from HELP's 5,000 (seed 0)")
    p.add_argument("--batches", default="1,32,64,256")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=10)
    args = p.parse_args()
    data = load_fbnet()
    picked = np.sort(np.random.default_rng(0).choice(len(data.choices), args.count, replace=False))
    models = [fbnet.build(data.choices[i].tolist()).cuda().eval() for i in picked]
    batches = [int(b) for b in args.batches.split(",")]
    result = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "candidates": picked.tolist(),
        "batches": batches,
        "rounds": args.rounds,
        "calls": args.calls,
        "eager_ms": {},
        "synced_ms": {},
    }
    started = time.perf_counter()
    with torch.no_grad():
        for batch in batches:
            x = torch.randn(batch, 3, 32, 32, device="cuda")
            rounds = {"eager_ms": [], "synced_ms": []}
            for _ in range(args.rounds):
                eager, synced = [], []
                for model in models:
                    for _ in range(3):
                        model(x)
                    eager.append(eager_ms(model, x, args.calls))
                    synced.append(synced_ms(model, x, args.calls))
                rounds["eager_ms"].append(eager)
                rounds["synced_ms"].append(synced)
            for key, values in rounds.items():
                result[key][str(batch)] = np.median(np.array(values), axis=0).tolist()
            print(f"batch {batch}: {time.perf_counter() - started:.0f} s", flush=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
