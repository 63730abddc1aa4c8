"""Where the run-to-run spread of small eager models on a GPU comes from: an A/B of the measurement's own parts.

    python studies/timing_noise.py --rows data/nvidia-h100-80gb-hbm3 --out noise.json     # on a GPU host

The first H100 rows had a median latency CV of 25%, with single runs up to 10x the median on launch-bound
models. Suspects inside the measurement itself: the NVML power-sampling thread (a read takes milliseconds and may
hold a driver lock that kernel launches need) and Python's garbage collector (now frozen during timed runs). For
the ``--n`` inference rows with the highest CV in ``--rows``, it measures each spec under each setting,
interleaved and repeated, with the collector's protocol, and prints the median CV and max/median ratio per setting.
The last line is a verdict the campaign script reads: ``sampler_off_helps=1`` when turning the sampler off cuts
the median CV by over 30%.

Result on the H100 (benchmarks/results/gpu_campaign/timing_noise.json): neither suspect explains the spread. Median
CV 0.36 with the old protocol, 0.35 with GC frozen, 0.45 with the sampler off; the same setting repeated moved
by more than that (convnext: 0.49 then 0.26). The likeliest source left is the host: eager dispatch on a VM.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

SETTINGS = {
    "sampler_50ms_gc_on": {"power_sample_interval_s": 0.05, "freeze_gc": False},  # the first H100 rows
    "sampler_50ms": {"power_sample_interval_s": 0.05, "freeze_gc": True},
    "sampler_off": {"power_sample_interval_s": None, "freeze_gc": True},
}


def pick_specs(folder: str, n: int) -> list:
    from perfpredict.profiling import zoo
    from perfpredict.profiling.dataset import load_dataset

    rows = [
        r
        for r in load_dataset(folder).rows
        if r.get("status") == "ok" and r["phase"] == "inference" and r.get("latency_cv") is not None
    ]
    rows.sort(key=lambda r: -r["latency_cv"])
    return [zoo.ModelSpec.from_key(r["key"]) for r in rows[:n]]


def measure(spec, setting: dict) -> dict:
    import torch

    from perfpredict.profiling import zoo
    from perfpredict.profiling.monitor import Monitor

    monitor = Monitor("cuda:0", power_sample_interval_s=setting["power_sample_interval_s"])
    model = spec.build("cuda:0")
    x, labels = spec.inputs("cuda:0")
    step = zoo.make_step(model, x, labels, spec.phase)
    try:
        m = monitor.measure(step, batch_size=spec.batch, freeze_gc=setting["freeze_gc"])
    finally:
        del model, x, labels, step
        torch.cuda.empty_cache()
    return {
        "latency_ms": m.latency_ms,
        "cv": m.latency_cv,
        "max_over_median": m.latency_max_ms / m.latency_ms,
        "runs": m.runs,
        "energy_method": m.energy_method,
        "energy_j": m.energy_j,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", required=True)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    results = []
    for spec in pick_specs(args.rows, args.n):
        for rep in range(args.repeats):
            for name, setting in SETTINGS.items():
                r = {
                    "key": spec.to_key(),
                    "family": spec.family,
                    "setting": name,
                    "repeat": rep,
                    **measure(spec, setting),
                }
                results.append(r)
                print(
                    f"{spec.family:12} {spec.dtype:9} b{spec.batch:<4} {name:20} {r['latency_ms']:8.3f} ms  "
                    f"cv {r['cv']:.3f}  max/median {r['max_over_median']:.1f}  {r['energy_method']}",
                    flush=True,
                )
    summary = {
        name: {
            "median_cv": statistics.median(r["cv"] for r in results if r["setting"] == name),
            "median_max_over_median": statistics.median(r["max_over_median"] for r in results if r["setting"] == name),
        }
        for name in SETTINGS
    }
    if args.out:
        Path(args.out).write_text(json.dumps({"results": results, "summary": summary}, indent=1) + "\n")
    for name, s in summary.items():
        print(f"{name:20} median cv {s['median_cv']:.3f}  median max/median {s['median_max_over_median']:.2f}")
    helps = summary["sampler_off"]["median_cv"] < 0.7 * summary["sampler_50ms"]["median_cv"]
    print(f"sampler_off_helps={int(helps)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
