"""How fast ``serve-sim`` answers, how far its step-time surface sits from exact step costs, and a deploy search.

    python benchmarks/serving_sim.py [--runs 3] [--out benchmarks/results/serving_sim.md]

1. **Speed** (issue 47: "a 1,000-request simulation answers in <= 2 s on this 2-core machine"): Llama-2-7B on one
   H100 under 1,000 ShareGPT-like requests (Poisson at 5, 10 and 20 requests/s, and all at t = 0), in this process:
   the engine's setup and tables once (cold), then the simulation alone (median of ``--runs``, wall and CPU
   seconds), and ``perfpredict serve-sim`` end to end as a fresh process (what a user waits for).
2. **The surface's error**: decode steps answered by ``step_time.StepTimeSurface`` against the engine's exact
   ``StepCosts.decode_s`` at 2,000 random (batch, mean context) points, and whole runs with the exact step costs
   in place of the surface (the change in the reported percentiles and throughput), for Llama-2-7B on one H100
   and Llama-2-70B on four.
3. **A deployment search**: ``perfpredict deploy`` for Llama-2-7B at 10 requests/s over the default grid.

Wall times on a shared host stretch with its load (the header gives it); CPU seconds stretch less.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result

RATES = (5.0, 10.0, 20.0, None)  # None: all at t = 0
SERVE_SIM = ["serve-sim", "--hf", "llama-2-7b", "--device", "H100", "--request-rate", "10", "--lengths", "sharegpt"]
DEPLOY = ["deploy", "--hf", "llama-2-7b", "--request-rate", "10", "--lengths", "sharegpt", "--ttft-ms", "2000",
          "--tpot-ms", "50"]  # fmt: skip
ERROR_CASES = (("llama-2-7b", "H100-SXM", 1), ("llama-2-70b", "H100-SXM", 4))


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def subprocess_s(argv: list[str], cache: str) -> tuple[float, float]:
    """(wall, CPU of the child) seconds of ``python -m perfpredict ARGV`` in a fresh process, with its answer
    cache in ``cache``."""
    before = os.times()
    t0 = time.perf_counter()
    env = {**os.environ, "PERFPREDICT_CACHE_DIR": cache}
    env.pop("PERFPREDICT_NO_GRAPH_CACHE", None)
    subprocess.run([sys.executable, "-m", "perfpredict", *argv], check=True, stdout=subprocess.DEVNULL, env=env)
    after = os.times()
    return time.perf_counter() - t0, (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )


def speed(runs: int) -> list[str]:
    from perfpredict.llm import serving
    from perfpredict.llm.serving_options import RequestStream, Serving

    lines = ["## Speed: Llama-2-7B on one H100, 1,000 ShareGPT-like requests", ""]
    base = Serving.of(device="H100-SXM", lengths="sharegpt", num_requests=1000)
    engine, wall, cpu = timed(lambda: serving.build("llama-2-7b", base))
    (_, w2, c2) = timed(lambda: serving.simulate(engine, RequestStream(num_requests=1)))
    lines += [
        f"- the engine's setup: {wall:.2f} s wall, {cpu:.2f} s CPU; its step tables (built on first use, with a "
        f"one-request run): {w2:.2f} s wall, {c2:.2f} s CPU",
        "",
        "| load | simulation, wall (median) | simulation, CPU (median) | steps | exact decode answers so far | mean batch |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for rate in RATES:
        stream = base.but(rate_per_s=rate).stream if rate else base.stream
        results = [timed(lambda s=stream: serving.simulate(engine, s)) for _ in range(runs)]
        trace = results[-1][0][0]
        label = f"Poisson {rate:g}/s" if rate else "all at t = 0"
        lines.append(
            f"| {label} | {statistics.median(r[1] for r in results):.3f} s | "
            f"{statistics.median(r[2] for r in results):.3f} s | {trace.stats.steps:,} | "
            f"{engine.sim.step.exact_decodes:,} | {trace.stats.seq_s / trace.stats.busy_s:.1f} |"
        )
    with tempfile.TemporaryDirectory() as cache:
        wall, child_cpu = subprocess_s(SERVE_SIM, cache)
        again, again_cpu = subprocess_s(SERVE_SIM, cache)
    lines += [
        "",
        f"- `perfpredict {' '.join(SERVE_SIM)}` in a fresh process, an empty answer cache (imports, setup, tables, "
        f"the 1,000-request simulation, the report): {wall:.2f} s wall, {child_cpu:.2f} s CPU; asked again (read "
        f"from the answer cache): {again:.2f} s wall, {again_cpu:.2f} s CPU",
        "",
    ]
    return lines


def surface_error() -> list[str]:
    from perfpredict.llm import serving
    from perfpredict.llm.serving_options import Serving
    from perfpredict.llm.serving_sim import Simulator

    lines = [
        "## The step-time surface against exact step costs",
        "",
        "| model | GPUs | decode points | max error | p99 | mean abs | TTFT p90 | TPOT p90 | E2E p99 | requests/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rng = np.random.default_rng(0)
    for model, device, tp in ERROR_CASES:
        s = Serving.of(device=device, tp=tp, lengths="sharegpt", num_requests=1000, rate_per_s=10)
        engine = serving.build(model, s)
        surface, exact = engine.sim.step, engine.sim.step.exact
        seqs = rng.integers(1, engine.sim.max_num_seqs + 1, 2000)
        means = np.exp(rng.uniform(np.log(16), np.log(engine.max_model_len - 1), 2000))
        errors = np.array([surface.decode_s(int(n), n * m, int(m)) / exact.decode_s(int(n), n * m, int(m)) - 1
                           for n, m in zip(seqs, means)])  # fmt: skip
        with_surface, requests, _ = serving.simulate(engine)
        with_exact = Simulator(dataclasses.replace(engine.sim, step=exact), requests).run()
        a, b = (serving.report(engine, t, requests) for t in (with_surface, with_exact))
        delta = lambda x, y: f"{(x / y - 1) * 100:+.2f}%"
        lines.append(
            f"| {model} | {tp} x {device} | {len(errors):,} | {np.abs(errors).max() * 100:.2f}% | "
            f"{np.percentile(np.abs(errors), 99) * 100:.2f}% | {np.abs(errors).mean() * 100:.3f}% | "
            f"{delta(a.ttft.p90_ms, b.ttft.p90_ms)} | {delta(a.tpot.p90_ms, b.tpot.p90_ms)} | "
            f"{delta(a.e2e.p99_ms, b.e2e.p99_ms)} | {delta(a.requests_per_s, b.requests_per_s)} |"
        )
        print(lines[-1], file=sys.stderr)
    lines += [
        "",
        "Decode points: batch uniform in 1 to max_num_seqs, mean context log-uniform in 16 to max_model_len. The "
        "last four columns: a 1,000-request run at 10 requests/s through the surface against the same run through "
        "the exact step costs (the surface's effect on what serve-sim reports).",
        "",
    ]
    return lines


def deploy() -> list[str]:
    with tempfile.TemporaryDirectory() as cache:
        wall, child_cpu = subprocess_s(DEPLOY, cache)
    return [
        "## A deployment search",
        "",
        f"- `perfpredict {' '.join(DEPLOY)}` (the default grid: H100-SXM, A100-80GB, L40S, L4 at tp 1, 2, 4, 8, "
        f"max_num_seqs 256; 300 requests a replica): {wall:.1f} s wall, {child_cpu:.1f} s CPU",
        "",
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="repeats of each simulation (the median is reported)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "serving_sim.md")
    args = p.parse_args()
    t0 = time.perf_counter()
    body = speed(args.runs) + surface_error() + deploy()
    text = "\n".join(
        ["# serve-sim: speed and the step-time surface's error", "",
         f"{header(__file__, seconds=time.perf_counter() - t0, packages=('numpy',))}.", "", *body]
    )  # fmt: skip
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
