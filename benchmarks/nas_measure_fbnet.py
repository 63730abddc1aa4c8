"""Measure random FBNet-space candidates on a local GPU, for ``nas_help_fbnet.py`` to score beside HELP's set.

    python benchmarks/nas_measure_fbnet.py --out fbnet_<gpu>.json [--count 150] [--batches 1,32,64,256]

The candidates are ``numpy.random.default_rng(--seed).integers(0, 9, (--count, 22))``: uniform choices, as HELP
sampled its own; anyone can rebuild them from the seed. Each one (``perfpredict.nas.fbnet``, CIFAR-100 variant,
fp32, eval mode, ``torch.no_grad``, cuDNN's benchmark mode off as by default) runs on random 32x32 inputs. Per
candidate and batch, the median over ``--rounds`` rounds that visit every candidate in turn (drift spreads over
all of them), each after 3 warm-up calls:

- ``eager_ms``: ``--calls`` back-to-back calls between two CUDA events, divided by the calls (the host runs ahead
  of the GPU: the project's protocol-v3 eager latency);
- ``synced_ms``: the median of ``--calls`` single calls, each between two synchronisations, wall clock (a loop that
  waits for the GPU after every call, as NAS papers often time a candidate).

The two disagree by the measurement's noise: their rank agreement bounds any predictor's. The committed
``results/nas_fbnet/measured_h100-sxm.json`` was taken on an H100 SXM (torch 2.11, CUDA 13) with an equivalent
one-file copy of this loop and of the builder (the device tool ships another checkout), whose candidates trace to
the same graphs as ``perfpredict.nas.fbnet`` op for op.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

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


def candidates(count: int, seed: int) -> np.ndarray:
    """The measured candidates: ``count`` x 22 uniform choices (``nas_help_fbnet.py`` rebuilds them so)."""
    return np.random.default_rng(seed).integers(0, len(fbnet.OPS), (count, fbnet.LAYERS))


def measure(models: list, batch: int, rounds: int, calls: int) -> tuple[list[float], list[float]]:
    x = torch.randn(batch, 3, 32, 32, device="cuda")
    eager, synced = [], []
    for _ in range(rounds):
        eager.append([]), synced.append([])
        for model in models:
            for _ in range(3):
                model(x)
            eager[-1].append(eager_ms(model, x, calls))
            synced[-1].append(synced_ms(model, x, calls))
    return np.median(eager, axis=0).tolist(), np.median(synced, axis=0).tolist()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--count", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batches", default="1,32,64,256")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=10)
    args = p.parse_args()
    models = [fbnet.build(c.tolist()).cuda().eval() for c in candidates(args.count, args.seed)]
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "seed": args.seed}
    result |= {"count": args.count, "rounds": args.rounds, "calls": args.calls, "eager_ms": {}, "synced_ms": {}}
    with torch.no_grad():
        for batch in (int(b) for b in args.batches.split(",")):
            result["eager_ms"][batch], result["synced_ms"][batch] = measure(models, batch, args.rounds, args.calls)
            print(batch, flush=True)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
