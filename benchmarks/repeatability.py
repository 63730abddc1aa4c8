"""Repeatability: measure 30 zoo configs twice and report the run-to-run difference (the floor under accuracy claims).

    python benchmarks/repeatability.py --device cpu --min-seconds 0.3 --out benchmarks/results/repeatability-cpu.md

Pass 1 measures all 30 configs, then pass 2 measures them again (same process, models rebuilt), so the two
measurements of a config are minutes apart, like two collection runs. For each config the relative difference is
``|a - b| / min(a, b)`` of the median latency and of the min latency; the report gives their medians.
While it runs, a collector writing into ``--pause`` (a dataset folder) is paused between rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from perfpredict.hardware.cpu_detection import cpu_model
from perfpredict.profiling import zoo
from perfpredict.profiling.collect_engine import CollectConfig
from perfpredict.profiling.collect_v2 import measure_spec
from perfpredict.profiling.monitor import Monitor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result


def configs(n: int = 30, seed: int = 7, device: str = "cpu") -> list[zoo.ModelSpec]:
    """``n`` configs spread over every family: alternating phases, batch 4, bf16 for every third text config."""
    out = []
    families = zoo.list_families()
    i = 0
    while len(out) < n:
        family = families[i % len(families)]
        spec = next(
            iter(
                zoo.family_plan(
                    family,
                    seed=seed + i // len(families),
                    archs=1,
                    batches=(4,),
                    device=device,
                    profile="cpu" if device == "cpu" else "gpu",
                )
            )
        )
        phase = ("inference", "training")[i % 2]
        dtype = "bfloat16" if zoo.get_family(family).kind == "text" and i % 3 == 0 else "float32"
        out.append(zoo.ModelSpec(spec.family, spec.params, phase, 4, spec.seq, dtype))
        i += 1
    return out


@contextmanager
def paused(folder: str | None):
    if not folder:
        yield
        return
    flag = Path(folder) / "PAUSE"
    flag.write_text("repeatability benchmark\n")
    try:
        deadline = time.monotonic() + 600
        while not (Path(folder) / "PAUSED").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        yield
    finally:
        flag.unlink(missing_ok=True)


def rel(a: float, b: float) -> float:
    return abs(a - b) / min(a, b)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--min-seconds", type=float, default=1.0)
    p.add_argument("--warmup-max-seconds", type=float, default=5.0)
    p.add_argument("--out", default=None, help="markdown file to write")
    p.add_argument("--pause", default=None, help="a dataset folder whose collector to pause meanwhile")
    args = p.parse_args(argv)
    cfg = CollectConfig(
        out=Path("/tmp/unused"),
        device=args.device,
        min_seconds=args.min_seconds,
        warmup_max_s=args.warmup_max_seconds,
        graph_features="none",
        progress=False,
    )
    monitor = Monitor(cfg.device)
    specs = configs(args.n, device=cfg.device)
    runs: list[list[dict]] = [[], []]
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    with paused(args.pause):
        for r in range(2):
            for spec in specs:
                runs[r].append(measure_spec(spec, monitor, cfg, "bench"))
                print(
                    f"pass {r + 1}: {spec.family} {spec.phase} {spec.dtype} -> {runs[r][-1].get('latency_ms')}",
                    file=sys.stderr,
                )
    seconds = time.monotonic() - t0
    load_after = os.getloadavg()[0]
    pairs = [(a, b) for a, b in zip(*runs) if a["status"] == b["status"] == "ok"]
    d_med = [rel(a["latency_ms"], b["latency_ms"]) for a, b in pairs]
    d_min = [rel(a["latency_min_ms"], b["latency_min_ms"]) for a, b in pairs]
    cvs = [x["latency_cv"] for a, b in pairs for x in (a, b) if x["latency_cv"] is not None]
    lines = [
        f"# Repeatability on {args.device} ({cpu_model() if args.device == 'cpu' else torch.cuda.get_device_name()})",
        "",
        f"{header(__file__, seconds=seconds)}.",
        "",
        f"{len(pairs)} of {len(specs)} configs measured twice (two passes, {seconds:.0f} s in all).",
        "",
        f"Host load (1-minute load average) {load_before:.2f} before and {load_after:.2f} after; on {os.cpu_count()} "
        "cores a load near or above the core count means other jobs shared the CPU and these figures measure that "
        "contention, not the protocol.",
        "",
        "| statistic | median over configs | 90th percentile | max |",
        "|---|---|---|---|",
    ]
    for label, d in (
        ("relative difference of the **median** latency", d_med),
        ("relative difference of the **min** latency", d_min),
        ("per-run latency CV (both passes)", cvs),
    ):
        q = sorted(d)
        lines.append(f"| {label} | {statistics.median(q):.1%} | {q[int(0.9 * (len(q) - 1))]:.1%} | {q[-1]:.1%} |")
    lines += [
        "",
        "| family | phase | dtype | median ms (pass 1 / 2) | min ms (pass 1 / 2) | CV (pass 1 / 2) |",
        "|---|---|---|---|---|---|",
    ]
    for a, b in pairs:
        lines.append(
            f"| {a['family']} | {a['phase']} | {a['dtype']} | {a['latency_ms']:.2f} / {b['latency_ms']:.2f} "
            f"| {a['latency_min_ms']:.2f} / {b['latency_min_ms']:.2f} "
            f"| {a['latency_cv']:.1%} / {b['latency_cv']:.1%} |"
        )
    text = "\n".join(lines) + "\n"
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
