"""How fast a NAS loop scores candidates, as milliseconds and as a ratio to one dynamo trace of the same model.

    python benchmarks/nas_speed.py [--candidates 30] [--loop 1000] [--out benchmarks/results/nas_speed.md]

Three families of fresh candidates (a new model object each time, so no cache helps), all with real CPU weights
and real inputs, all predicted for an A100 (two-timeline, eager):

- FBNet: random candidates of HELP's FBNet space at batch 32 (22 blocks, 180-230 ops);
- CNN-50: 50 conv-BatchNorm-ReLU layers of random widths, batch 32 (153 ops);
- transformer-12: 12 ``nn.TransformerEncoderLayer`` blocks of random width, batch 8 x 128 tokens.

Per family: the median over ``--candidates`` of ``perfpredict.featurize`` (the capture alone) and of
``perfpredict.predict`` (capture and report), after a first call that warms imports; and one dynamo capture of
the same kind of model (``capture="dynamo"``, what ``predict`` did before issue 38), median of 3. Then
``perfpredict.predict_models`` over ``--loop`` FBNet candidates on one GPU at their own batch, with block reuse and
(on a fifth of them) without; candidates are built before the clock starts. Last, the capture of one model with
real weights at batch 1 and at batch 65,536. On a shared machine the CPU times and the ratios to dynamo are the
robust figures; the load average is recorded.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import perfpredict
from perfpredict.nas import fbnet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result

DEVICE = "A100-40GB"
TARGETS = {"per-candidate ms": 50.0, "goal ms": 20.0, "loop s": 30.0}


def fbnet_candidate(rng: np.random.Generator) -> tuple[nn.Module, tuple]:
    return fbnet.build(rng.integers(0, 9, 22).tolist()), (torch.randn(32, 3, 32, 32),)


def cnn50(rng: np.random.Generator) -> tuple[nn.Module, tuple]:
    widths = rng.choice([16, 24, 32, 48, 64], 51)
    layers = []
    for c_in, c_out in zip(widths[:-1], widths[1:]):
        layers += [nn.Conv2d(int(c_in), int(c_out), 3, padding=1), nn.BatchNorm2d(int(c_out)), nn.ReLU()]
    net = nn.Sequential(nn.Conv2d(3, int(widths[0]), 3, padding=1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return net.eval(), (torch.randn(32, 3, 32, 32),)


def transformer12(rng: np.random.Generator) -> tuple[nn.Module, tuple]:
    width = int(rng.choice([128, 192, 256, 320]))
    layer = nn.TransformerEncoderLayer(width, width // 64, 4 * width, batch_first=True)
    return nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).eval(), (torch.randn(8, 128, width),)


FAMILIES = {"FBNet (22 blocks)": fbnet_candidate, "CNN-50": cnn50, "transformer-12": transformer12}


def timed(fn, *args, **kwargs) -> float:
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    return (time.perf_counter() - t0) * 1e3


def cpu_timed(fn, *args, **kwargs) -> tuple[float, float]:
    """(wall ms, this process's CPU ms): on a shared host the CPU time is what the work costs, the wall time what
    the load made of it."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*args, **kwargs)
    return (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3


def family_row(name: str, build, n: int, rng: np.random.Generator) -> dict:
    model, inputs = build(rng)
    perfpredict.predict(model, inputs, device=DEVICE)  # imports and first-call work, not a candidate's cost
    capture = [timed(perfpredict.featurize, *build(rng)) for _ in range(n)]
    predict = []
    for _ in range(n):
        model, inputs = build(rng)
        predict.append(cpu_timed(perfpredict.predict, model, inputs, device=DEVICE))
    dynamo = []
    for _ in range(3):
        model, inputs = build(rng)
        torch._dynamo.reset()
        dynamo.append(cpu_timed(perfpredict.featurize, model, inputs, capture="dynamo"))
    ops = len(perfpredict.featurize(*build(rng)).nodes)
    return {
        "family": name,
        "ops": ops,
        "capture": statistics.median(capture),
        "predict": statistics.median(w for w, _ in predict),
        "predict_cpu": statistics.median(c for _, c in predict),
        "dynamo": statistics.median(w for w, _ in dynamo),
        "dynamo_cpu": statistics.median(c for _, c in dynamo),
    }


def loop_row(count: int, reuse: bool, rng: np.random.Generator) -> dict:
    models = [fbnet.build(rng.integers(0, 9, 22).tolist()) for _ in range(count)]
    x = (fbnet.example_input(32),)
    t0, c0 = time.perf_counter(), time.process_time()
    cols = perfpredict.predict_models(models, x, device=DEVICE, reuse=reuse)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(cols["latency_ms"]) == count and np.isfinite(cols["latency_ms"]).all()
    return {"count": count, "reuse": reuse, "seconds": seconds, "cpu": cpu, "per": cpu / count * 1e3}


def batch_row() -> dict:
    net = fbnet.build([3] * 22)  # real CPU weights
    times = {}
    for batch in (1, 65536):
        x = torch.empty(batch, 3, 32, 32, device="meta")
        perfpredict.featurize(net, (x,), name=f"b{batch}")
        times[batch] = statistics.median(
            timed(perfpredict.featurize, fbnet.build([3] * 22), (x,), name=f"b{batch}") for _ in range(5)
        )
    return times


def report(families: list[dict], loops: list[dict], batches: dict, seconds: float) -> str:
    lines = [
        "# NAS speed: milliseconds per candidate, and as a ratio to one dynamo trace",
        "",
        f"- {header(__file__, seconds=seconds)} (shared host: wall times stretch with the load; the ratios hold)",
        f"- predicted device: {DEVICE}; each figure a median over fresh candidates (new model objects)",
        "",
        "| family | ops | capture ms (wall) | predict ms (wall) | predict ms (CPU) | one dynamo trace ms (wall, CPU) "
        "| predict / dynamo (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in families:
        lines.append(
            f"| {r['family']} | {r['ops']} | {r['capture']:.1f} | {r['predict']:.1f} | {r['predict_cpu']:.1f} | "
            f"{r['dynamo']:.0f}, {r['dynamo_cpu']:.0f} | {r['predict_cpu'] / r['dynamo_cpu']:.3f} |"
        )
    lines += [
        "",
        f"`perfpredict.predict_models` on FBNet candidates, one GPU ({DEVICE}), their own batch (32), built before "
        "the clock starts:",
        "",
        "| candidates | block reuse | seconds (wall) | seconds (CPU) | CPU ms per candidate |",
        "|---:|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r['count']} | {'on' if r['reuse'] else 'off'} | {r['seconds']:.1f} | {r['cpu']:.1f} | {r['per']:.1f} |"
        for r in loops
    ]
    lines += [
        "",
        f"Capture of FBNet (all k3_e6) with real CPU weights: batch 1 {batches[1]:.1f} ms, batch 65,536 "
        f"{batches[65536]:.1f} ms (ratio {batches[65536] / batches[1]:.2f}: no arithmetic runs, no activation is "
        "allocated).",
        "",
        f"Targets (issue 38): a fresh candidate of up to ~50 layers in <= {TARGETS['per-candidate ms']:.0f} ms "
        f"(goal {TARGETS['goal ms']:.0f}); 1,000 candidates in <= {TARGETS['loop s']:.0f} s.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--candidates", type=int, default=30)
    p.add_argument("--loop", type=int, default=1000)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "nas_speed.md")
    args = p.parse_args()
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    families = [family_row(name, build, args.candidates, rng) for name, build in FAMILIES.items()]
    loops = [loop_row(args.loop, True, rng), loop_row(max(1, args.loop // 5), False, rng)]
    text = report(families, loops, batch_row(), time.perf_counter() - start)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
