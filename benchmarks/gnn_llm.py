"""gnn_llm experiments: ablations, few-shot adaptation to a held-out platform, and to a held-out family.

    python benchmarks/gnn_llm.py ablation --device cpu-amd-epyc-2c [--only gae_gnn]
    python benchmarks/gnn_llm.py adapt-platform --device cpu-amd-epyc-2c --source-dtype float32 --target-dtype bfloat16
    python benchmarks/gnn_llm.py adapt-family --device cpu-amd-epyc-2c --family swin
    python benchmarks/gnn_llm.py report --device cpu-amd-epyc-2c

Each experiment writes a JSON under benchmarks/results/gnn_llm/; ``report`` turns them, the shipped artifact's
random 5-fold metrics and the accuracy benchmark's tables into benchmarks/results/gnn_llm.md.

- ``ablation``: fold 0 of the random 5-fold split (the same folds as benchmarks/accuracy.py) for gnn_llm with all
  three stages, without stage 1, without stage 2, and for graphsage, gae_gnn and xgboost on the same fold.
- ``adapt-platform``: a held-out platform. Base models train on the source rows only; the target rows are the
  new platform. Shots 8..128 are drawn round-robin over families (nested: the 8 shots are among the 16), and every
  model is scored on the same target rows, those outside the largest shot set. gnn_llm and graphsage fine-tune
  from their base model; xgboost retrains on the source rows plus the shots (its hardware and dtype features tell
  them apart). On the CPU dataset the platforms are fp32 and bf16 (different kernels on this CPU); a new device's
  dataset drops in with ``--target-device <dataset folder> --target-dtype any``.
- ``adapt-family``: a held-out architecture family, then 32 of its rows as shots.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from perfpredict.learning.adapt import pick_shots
from perfpredict.learning.evaluation import metrics, random_folds
from perfpredict.learning.train import dataset_folder, learner_class
from perfpredict.learning.training_data import load_training_set
from perfpredict.predictors.feature_rows import TARGETS

sys.path.insert(0, str(Path(__file__).parent))  # the sibling benchmark modules, however this file is run
from accuracy import features_id

OUT = Path(__file__).parent / "results" / "gnn_llm"
SCORED = ("latency_ms", "peak_memory_bytes")


def score(learner, data) -> dict[str, dict[str, float]]:
    pred = learner.predict(data)
    return {t: metrics(data.y[t], pred[t].value) for t in SCORED if t in pred}


def fit(name: str, data, seed: int = 0, **hyper):
    t0 = time.monotonic()
    learner = learner_class(name)(**hyper)
    learner.fit(data, TARGETS, seed)
    return learner, time.monotonic() - t0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def save(name: str, payload: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(payload, indent=1, sort_keys=True, default=float) + "\n")
    log(f"wrote {OUT / (name + '.json')}")


def ablation(args) -> None:
    data = load_training_set([dataset_folder(args.device)], progress=True)
    test = random_folds(data, 5, args.seed)[0]
    train, held = data.subset(np.flatnonzero(~test)), data.subset(np.flatnonzero(test))
    # The cheap baselines first, so a run cut short still has the comparison.
    variants = {
        "xgboost": ("xgboost", {}),
        "graphsage": ("graphsage", {}),
        "gae_gnn": ("gae_gnn", {}),
        "gnn_llm (all three stages)": ("gnn_llm", {}),
        "gnn_llm without stage 2 (no graph-text alignment)": ("gnn_llm", {"stage2": False}),
        "gnn_llm without stage 1 (GIN from scratch)": ("gnn_llm", {"stage1": False}),
    }
    if args.only:  # add variants to an earlier run's table (same fold, same rows)
        variants = {k: v for k, v in variants.items() if k in args.only.split(",") or v[0] in args.only.split(",")}
    head = {
        "device": args.device,
        "fold": 0,
        "train_rows": len(train.keys),
        "test_rows": len(held.keys),
        **_data_info(data),
    }
    earlier = _earlier_results(head) if args.only else {}
    rows = {}
    for i, (label, (name, hyper)) in enumerate(variants.items()):
        learner, seconds = fit(name, train, args.seed, **hyper)
        rows[label] = {
            "scores": score(learner, held),
            "train_seconds": seconds,
            "stages": learner.fit_info.get("stages") if hasattr(learner, "fit_info") else None,
        }
        log(f"{label}: latency MAPE {rows[label]['scores']['latency_ms']['mape']:.1f}% ({seconds:.0f} s)")
        # Saved after every variant, so a run cut short keeps what it finished.
        save("ablation", {**head, "results": {**earlier, **rows}, "partial": i + 1 < len(variants)})


def _earlier_results(head: dict) -> dict:
    """The stored ablation's rows, when they stand on the same rows and features as this run; otherwise none, so
    one table never mixes runs on different inputs (the dropped rows are named in the log)."""
    path = OUT / "ablation.json"
    if not path.exists():
        return {}
    stored = json.loads(path.read_text())
    if all(stored.get(k) == head[k] for k in ("data_hash", "features", "busy_host_rows")):
        return stored["results"]
    log(f"not merging {', '.join(stored['results'])}: they ran on other rows or features; rerun them")
    return {}


def _data_info(data) -> dict:
    """Which rows and features a result stands on: runs that predate the busy-host filter lack ``busy_host_rows``,
    and runs that predate feature schema 5 lack ``features``."""
    return {"data_hash": data.data_hash, "busy_host_rows": "left out", "features": features_id()}


def _select(data, dtype: str):
    if dtype == "any":
        return data
    return data.subset(np.flatnonzero(np.array([r.get("dtype") == dtype for r in data.rows])))


def _adapt_curve(base_models: dict, source, target, shots_list: list[int], seed: int, checkpoint=None) -> dict:
    """Zero-shot and k-shot scores on the target rows outside the largest shot set; ``checkpoint(partial)`` saves
    what is done after every point, so a long run cut short still leaves its finished cells."""
    import copy

    largest, _ = pick_shots(target, max(shots_list), seed)
    test = target.subset(np.setdiff1d(np.arange(len(target.keys)), largest))
    out: dict = {"test_rows": len(test.keys), "curves": {}}
    for name, learner in base_models.items():
        curve = {"0": score(learner, test)}
        for k in shots_list:
            shots, _ = pick_shots(target, k, seed)
            tuned = copy.deepcopy(learner)
            t0 = time.monotonic()
            tuned.fine_tune(target.subset(shots), seed=seed)
            curve[str(k)] = {**score(tuned, test), "seconds": time.monotonic() - t0}
            log(f"{name} {k} shots: latency MAPE {curve[str(k)]['latency_ms']['mape']:.1f}%")
            out["curves"][f"{name} (fine-tuned)"] = curve
            if checkpoint:
                checkpoint(out)
    curve = {}
    xgb, _ = fit("xgboost", source, seed)
    curve["0"] = score(xgb, test)
    for k in shots_list:
        shots, _ = pick_shots(target, k, seed)
        both = _concat(source, target.subset(shots))
        xgb, seconds = fit("xgboost", both, seed)
        curve[str(k)] = {**score(xgb, test), "seconds": seconds}
        log(f"xgboost {k} shots: latency MAPE {curve[str(k)]['latency_ms']['mape']:.1f}%")
        out["curves"]["xgboost (retrained on source + shots)"] = curve
        if checkpoint:
            checkpoint(out)
    return out


def _concat(a, b):
    from perfpredict.predictors.feature_rows import TrainingSet

    return TrainingSet(
        np.concatenate([a.X, b.X]),
        {t: np.concatenate([a.y[t], b.y[t]]) for t in a.y},
        np.concatenate([a.families, b.families]),
        a.keys + b.keys,
        np.concatenate([a.group_ids, b.group_ids]),
        a.devices,
        a.rows + b.rows,
        a.arrays + b.arrays,
        a.data_hash,
        a.problems,
    )


def adapt_platform(args) -> None:
    data = load_training_set([dataset_folder(args.device)], progress=True)
    source = _select(data, args.source_dtype)
    other = load_training_set([dataset_folder(args.target_device)], progress=True) if args.target_device else data
    target = _select(other, args.target_dtype)
    shots_list = [int(s) for s in args.shots.split(",")]
    models = {}
    for name in ("gnn_llm", "graphsage"):
        models[name], seconds = fit(name, source, args.seed)
        log(f"{name} trained on {len(source.keys)} source rows in {seconds:.0f} s")
    head = {
        "device": args.device,
        "source": f"{args.device} {args.source_dtype}",
        **_data_info(data),
        "target": f"{args.target_device or args.device} {args.target_dtype}",
        "source_rows": len(source.keys),
        "target_rows": len(target.keys),
    }
    result = _adapt_curve(
        models,
        source,
        target,
        shots_list,
        args.seed,
        lambda part: save("adapt_platform", {**head, **part, "partial": True}),
    )
    save("adapt_platform", {**head, **result})


def adapt_family(args) -> None:
    data = load_training_set([dataset_folder(args.device)], progress=True)
    held = data.families == args.family
    source, target = data.subset(np.flatnonzero(~held)), data.subset(np.flatnonzero(held))
    models = {}
    for name in ("gnn_llm", "graphsage"):
        models[name], seconds = fit(name, source, args.seed)
        log(f"{name} trained without {args.family} in {seconds:.0f} s")
    head = {
        "device": args.device,
        "family": args.family,
        "source_rows": len(source.keys),
        **_data_info(data),
        "target_rows": len(target.keys),
    }
    result = _adapt_curve(
        models,
        source,
        target,
        [int(s) for s in args.shots.split(",")],
        args.seed,
        lambda part: save("adapt_family", {**head, **part, "partial": True}),
    )
    save("adapt_family", {**head, **result})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("experiment", choices=("ablation", "adapt-platform", "adapt-family", "report"))
    ap.add_argument("--device", required=True, help="dataset folder under data/")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--source-dtype", default="float32")
    ap.add_argument("--target-dtype", default="bfloat16")
    ap.add_argument("--target-device", default=None, help="another dataset folder as the new platform")
    ap.add_argument("--family", default="swin")
    ap.add_argument("--shots", default=None, help="comma-separated shot counts")
    ap.add_argument(
        "--only", default=None, help="ablation: run only these variants or predictors, merged into the existing results"
    )
    args = ap.parse_args()
    if args.experiment == "report":
        from gnn_llm_report import write_report

        write_report(args.device, OUT)
        return 0
    if args.shots is None:
        args.shots = "8,16,32,64,128" if args.experiment == "adapt-platform" else "8,32"
    {"ablation": ablation, "adapt-platform": adapt_platform, "adapt-family": adapt_family}[args.experiment](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
