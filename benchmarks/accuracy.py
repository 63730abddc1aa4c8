"""Accuracy of every predictor and baseline on a measured dataset, on held-out splits.

    python benchmarks/accuracy.py --device cpu-amd-epyc-2c [--predictors xgboost,graphsage] [--max-rows N]

Splits: random 5-fold over architectures (all rows of one architecture share a fold) and leave-one-family-out.
Metrics: MAPE, RMSE, Kendall's tau and Acc(10%), overall and per family, for each target. The dataset's own
run-to-run noise (median coefficient of variation of the timed runs) is printed beside them: no predictor can be
more accurate than the measurement it learns from. Writes benchmarks/results/accuracy_<device>.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from pathlib import Path

import numpy as np

from perfpredict.predictors.evaluation import (AnalyticalBaseline, FlopsLinearBaseline, cross_validate,
                                               family_folds, random_folds, report)
from perfpredict.predictors.train import dataset_folder, learner_class
from perfpredict.predictors.training_data import TARGETS, load_training_set

BASELINES = {"analytical": AnalyticalBaseline, "flops_linear": FlopsLinearBaseline}
DEFAULT = ("analytical", "flops_linear", "xgboost_static", "xgboost", "graphsage", "gae_gnn")


def make(name: str):
    return BASELINES[name] if name in BASELINES else learner_class(name)


def evaluate(names, data, seed: int, wanted=("random_5fold", "leave_one_family_out")):
    results, timings = {}, {}
    splits = {"random_5fold": random_folds(data, 5, seed), "leave_one_family_out": [m for _, m in family_folds(data)]}
    splits = {k: v for k, v in splits.items() if k in wanted}
    for name in names:
        try:
            cls = make(name)
        except (ImportError, AttributeError) as err:
            print(f"skip {name}: {err}", file=sys.stderr)
            continue
        for split, folds in splits.items():
            t0 = time.perf_counter()
            oof = cross_validate(cls, data, TARGETS, folds, seed)
            results[(name, split)] = report(data, oof, TARGETS)
            timings[(name, split)] = time.perf_counter() - t0
            lat = results[(name, split)].get("latency_ms", {}).get("overall", {})
            print(f"{name:15s} {split:22s} latency MAPE {lat.get('mape', float('nan')):8.2f}%  "
                  f"({timings[(name, split)]:.0f} s)", file=sys.stderr)
    return results, timings


def noise_floor(data) -> float:
    cvs = [r.get("latency_cv") for r in data.rows if isinstance(r.get("latency_cv"), (int, float))]
    return float(np.median(cvs) * 100) if cvs else float("nan")


def fmt(v, digits=2):
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.{digits}f}"


def write(path: Path, args, data, results, timings) -> None:
    names = sorted({n for n, _ in results}, key=lambda n: list(DEFAULT).index(n) if n in DEFAULT else 99)
    lines = [f"# Accuracy on `{args.device}` ({data.devices[0]})", "",
             f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; python {platform.python_version()}",
             f"- command: `python benchmarks/accuracy.py --device {args.device}"
             + (f" --max-rows {args.max_rows}" if args.max_rows else "")
             + (f" --latency-stat {args.latency_stat}" if args.latency_stat != "median" else "")
             + (f" --predictors {args.predictors} --splits {args.splits}") + "`",
             f"- latency target: the {args.latency_stat} of each row's timed runs",
             f"- rows: {len(data.keys)} measured rows (status ok), {len(set(data.families.tolist()))} families, "
             f"{len(np.unique(data.group_ids))} architectures; data hash {data.data_hash}",
             f"- measurement noise floor: median coefficient of variation of the timed runs "
             f"{fmt(noise_floor(data))}%", "",
             "Out-of-fold predictions only: every number is on rows the model did not train on. Random 5-fold "
             "keeps all rows of one architecture in one fold; leave-one-family-out trains on every other family.", ""]
    for target in TARGETS:
        if not any(target in r for r in results.values()):
            lines += [f"## {target}", "", "not measured on this device (no rows carry it)", ""]
            continue
        lines += [f"## {target}", "", "| predictor | split | MAPE % | RMSE | Kendall tau | Acc(10%) % | n | time s |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for name in names:
            for split in ("random_5fold", "leave_one_family_out"):
                m = results.get((name, split), {}).get(target, {}).get("overall")
                if m:
                    lines.append(f"| {name} | {split} | {fmt(m.get('mape'))} | {m.get('rmse', 0):.4g} | "
                                 f"{fmt(m.get('kendall_tau'), 3)} | {fmt(m.get('acc10'), 1)} | {m.get('n')} | "
                                 f"{timings[(name, split)]:.0f} |")
        lines.append("")
    fams = sorted(set(data.families.tolist()))
    lines += ["## latency_ms MAPE % per family", "", "| predictor | split | " + " | ".join(fams) + " |",
              "|---|---|" + "---:|" * len(fams)]
    for name in names:
        for split in ("random_5fold", "leave_one_family_out"):
            per = results.get((name, split), {}).get("latency_ms", {}).get("families", {})
            if per:
                lines.append(f"| {name} | {split} | " + " | ".join(fmt(per.get(f, {}).get("mape"), 1) for f in fams)
                             + " |")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", required=True)
    ap.add_argument("--predictors", default=",".join(DEFAULT))
    ap.add_argument("--max-rows", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--latency-stat", choices=("median", "min"), default="median")
    ap.add_argument("--splits", default="random_5fold,leave_one_family_out")
    args = ap.parse_args()
    data = load_training_set([dataset_folder(args.device)], max_rows=args.max_rows, progress=True,
                             latency_stat=args.latency_stat)
    results, timings = evaluate([n.strip() for n in args.predictors.split(",") if n.strip()], data, args.seed,
                                tuple(args.splits.split(",")))
    suffix = "" if args.latency_stat == "median" else f"_{args.latency_stat}"
    out = args.out or Path(__file__).parent / "results" / f"accuracy_{args.device}{suffix}.md"
    write(out, args, data, results, timings)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
