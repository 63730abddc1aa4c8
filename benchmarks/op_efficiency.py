"""Per-op device time: the learned efficiency model against the fixed-fraction roofline, out of fold, on op rows.

    python benchmarks/op_efficiency.py data/v3/cpu-amd-epyc-2c/ops --device cpu \
        --out benchmarks/results/op_efficiency-cpu-amd-epyc-2c.md [--save perfpredict/predictors/artifacts/op-efficiency-cpu] \
        [--save-cpu-model perfpredict/data/host_profiles/reference.json]

Splits: random 5-fold over op rows, and leave-one-family-out (every op of the zoo family the op came from held
out together, variants included). Metric: MAPE of the per-op device time (``device_ms``; on a CPU, less the host
profile's dispatch cost), median APE and the share within 10%. Baseline: the same bound divided by the analytical
model's fixed achieved fraction. On a CPU, beside them: the CPU op model (``cpu_op_model``: one fit per op class, what
``calibrate-host`` fits on its probes), fitted on the same folds. Rows taken while the host's load average exceeded its core count are left out
(the host was shared: data/README.md). ``--save`` fits on every row and writes the artifact the two-timeline
predictor loads for the device.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

import numpy as np

from perfpredict.core import op_kinds
from perfpredict.hardware.devices import get_device
from perfpredict.learning import cpu_op_model_fit
from perfpredict.learning.op_efficiency_fit import OpEfficiencyLearner, training_arrays
from perfpredict.predictors import op_efficiency as oe
from perfpredict.predictors.analytical import ACHIEVED_FRACTION
from perfpredict.predictors.host_model import load_profile
from perfpredict.profiling.dataset import load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks import measuring_host
from benchmarks.provenance import header, write_result


def _scores(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    ape = np.abs(pred - true) / true
    return {
        "mape": 100 * float(ape.mean()),
        "median": 100 * float(np.median(ape)),
        "within10": 100 * float((ape <= 0.10).mean()),
    }


def _baseline(shapes: list[oe.OpShape], device) -> np.ndarray:
    frac = ACHIEVED_FRACTION[device.kind]
    out = []
    for s in shapes:
        b, compute, memory = oe.bound_s(s, device)
        out.append(
            max(
                compute / frac["tensor" if op_kinds.lookup(s.kind).tensor_cores else "vector"],
                memory / frac["memory"],
                1e-9,
            )
        )
    return np.array(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--device", default="cpu", help="the catalog device whose ceilings the rows ran on")
    p.add_argument("--out", default=None)
    p.add_argument("--save", default=None, help="fit on all rows and write the artifact to this folder")
    p.add_argument("--max-rows", type=int, default=None)
    p.add_argument(
        "--save-cpu-model",
        default=None,
        metavar="PROFILE",
        help="fit the CPU op model on every row and store it in this host profile (the reference's, for the "
        "host the rows were measured on)",
    )
    args = p.parse_args(argv)
    if get_device(args.device).kind == "cpu":
        print(measuring_host.pin(args.folder), file=sys.stderr)  # the rows' CPU, not this host's
    device = get_device(args.device)
    rows = [r for r in load_dataset(args.folder, join_features=False).rows if r.get("status") == "ok"]
    cores = os.cpu_count() or 1
    busy = [r for r in rows if (r.get("load_avg_1m") or 0) > cores]
    rows = [r for r in rows if (r.get("load_avg_1m") or 0) <= cores][: args.max_rows]
    profile = load_profile() if device.kind == "cpu" else None
    X, y, seconds, shapes = training_arrays(rows, device, profile.dispatch_us if profile else None)
    families = np.array([json.loads(r["source_key"])["family"] if r.get("source_key") else "?" for r in rows])
    rng = np.random.default_rng(0)
    random_fold = rng.integers(0, 5, len(y))
    fam_names = sorted(set(families))
    results = {}
    splits = (
        ("random 5-fold", random_fold),
        ("leave-one-family-out", np.array([fam_names.index(f) for f in families])),
    )
    for split, fold_of in splits:
        pred = np.zeros(len(y))
        for f in np.unique(fold_of):
            test = fold_of == f
            model = OpEfficiencyLearner().fit(X[~test], y[~test]).model
            held = [s for s, t in zip(shapes, test) if t]
            b = np.array([oe.bound_s(s, device)[0] for s in held])
            pred[test] = b / model.efficiency(X[test], np.array([oe.max_efficiency(s, device) for s in held]))
        results[split] = _scores(pred, seconds)
    if device.kind == "cpu":  # the CPU op model's classes, fitted on the same folds
        samples = cpu_op_model_fit.op_row_samples(rows, profile.dispatch_us)
        for split, fold_of in splits:
            results[f"CPU op model|{split}"] = _scores(_cpu_op_model_oof(samples, fold_of), seconds)
    results["fixed-fraction roofline (analytical)"] = _scores(_baseline(shapes, device), seconds)
    kinds = sorted({s.kind for s in shapes})
    # the artifacts first: the header's digest is then of the package this run leaves behind
    if args.save:
        save(OpEfficiencyLearner().fit(X, y).model, Path(args.save), rows, device, results)
    if args.save_cpu_model:
        save_cpu_op_model(samples, rows, Path(args.save_cpu_model))
    lines = [
        f"# Per-op device time on {rows[0]['device'] if rows else '?'}",
        "",
        f"{header(__file__, packages=(), inputs=(args.folder,))}.",
        "",
        f"{len(y)} op rows ({len(busy)} taken on a "
        f"busy host left out), {len(fam_names)} source families, ceilings of catalog device `{device.name}`"
        + (f", host profile `{profile.name}` taken off each row" if profile else "")
        + ".",
        "",
        "| model | split | MAPE | median APE | within 10% |",
        "|---|---|---:|---:|---:|",
    ]
    for name, s in results.items():
        model_name, split = ("learned efficiency", name) if "fold" in name or "out" in name else (name, "-")
        if "|" in name:
            model_name, split = name.split("|")
        lines.append(f"| {model_name} | {split} | {s['mape']:.1f}% | {s['median']:.1f}% | {s['within10']:.0f}% |")
    lines += ["", "Op rows per kind: " + ", ".join(f"{k} {sum(s.kind == k for s in shapes)}" for k in kinds) + "."]
    write_result("\n".join(lines) + "\n", args.out)
    return 0


def _cpu_op_model_oof(samples: list, fold_of: np.ndarray) -> np.ndarray:
    """Out-of-fold seconds of the CPU op model (``cpu_op_model``) fitted per fold on the other folds' rows."""
    pred = np.zeros(len(samples))
    for f in np.unique(fold_of):
        test = np.flatnonzero(fold_of == f)
        model = cpu_op_model_fit.fit([s for s, k in zip(samples, fold_of) if k != f], threads=0)
        classes = [(samples[i].cls, samples[i].prec) for i in test]
        flops = np.array([[samples[i].flops] for i in test])
        moved = np.array([[samples[i].bytes] for i in test])
        pred[test] = model.seconds(classes, flops, moved)[:, 0]
    return pred


def save_cpu_op_model(samples: list, rows: list[dict], profile_path: Path) -> None:
    """Fit the CPU op model on every row and store it in the host profile at ``profile_path`` (the reference: its
    op model is the host's that measured these rows)."""
    from dataclasses import replace

    from perfpredict.predictors.host_model import HostProfile

    threads = int(rows[0].get("env_torch_threads") or 0)
    source = f"fitted on {len(rows)} op rows of {rows[0]['device']} (benchmarks/op_efficiency.py --save-cpu-model)"
    model = cpu_op_model_fit.fit(samples, threads, source)
    profile = replace(HostProfile.from_file(profile_path), cpu_ops=model.to_dict())
    profile_path.write_text(profile.to_json())
    print(f"op_efficiency: CPU op model saved into {profile_path}", file=sys.stderr)


def save(model: oe.EfficiencyModel, folder: Path, rows: list[dict], device, results: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.booster.save_model(str(folder / "efficiency.ubj"))
    manifest = {
        "kind": "op_efficiency",
        "version": 1,
        "device": device.name,
        "device_kind": device.kind,
        "rows_device": rows[0]["device"],
        "rows": len(rows),
        "features": list(oe.FEATURE_NAMES),
        "metrics": results,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"op_efficiency: saved {folder}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
