"""Accuracy of every predictor and baseline on a measured dataset, on held-out splits.

    python benchmarks/accuracy.py --device cpu-amd-epyc-2c [--predictors xgboost,graphsage] [--splits ...]
    python benchmarks/accuracy.py --device cpu-amd-epyc-2c --report-only

Splits: random 5-fold over architectures (all rows of one architecture share a fold), random 5-fold over rows (the
research's protocol, where a model's other batch sizes, phases and dtypes can be in training), and
leave-one-family-out.
Metrics: MAPE, RMSE, Kendall's tau and Acc(10%), overall and per family, for each target. The dataset's own
run-to-run noise (median coefficient of variation of the timed runs) is printed beside them: no predictor can be
more accurate than the measurement it learns from, so latency is also scored on the trusted rows alone (quiet host,
CV of the timed runs under 10%); every loaded row still trains.

Each (predictor, split) run stores its out-of-fold predictions under
benchmarks/results/accuracy_oof/<device>/, so runs of different predictors, made at different times, add up
to one report, benchmarks/results/accuracy_<device>.md, built from every stored run on the same data hash.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from perfpredict.hardware.devices import get_device
from perfpredict.learning.evaluation import (
    AnalyticalBaseline,
    FlopsLinearBaseline,
    cross_validate,
    family_folds,
    metrics,
    random_folds,
    random_row_folds,
    report,
)
from perfpredict.learning.train import dataset_folder, learner_class
from perfpredict.learning.training_data import load_training_set
from perfpredict.learning.two_timeline_fit import TwoTimelineLearner
from perfpredict.predictors.feature_rows import TARGETS
from perfpredict.predictors.features import TABULAR_FEATURES, schema_hash
from perfpredict.predictors.memory_model import physics_versions
from perfpredict.profiling.dataset import batch_sweep_inversions, neighbour_oracle_mape, trusted_label

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks import inputs_digest, measuring_host, provenance
from benchmarks.provenance import header

BASELINES = {"analytical": AnalyticalBaseline, "flops_linear": FlopsLinearBaseline, "two_timeline": TwoTimelineLearner}
DEFAULT = ("two_timeline", "analytical", "flops_linear", "xgboost_static", "xgboost", "graphsage", "gae_gnn")
SPLITS = ("random_5fold", "random_rows_5fold", "leave_one_family_out")
RESULTS = Path(__file__).parent / "results"


def make(name: str):
    return BASELINES[name] if name in BASELINES else learner_class(name)


def slug(device: str) -> str:
    """A device slug, or a dataset folder's path made one (``data/v3/cpu-amd-epyc-2c`` -> ``v3-cpu-amd-epyc-2c``)."""
    parts = [p for p in Path(device).parts if p not in ("data", ".", "/")]
    return "-".join(parts)


def oof_dir(device: str, latency_stat: str) -> Path:
    return RESULTS / "accuracy_oof" / (slug(device) if latency_stat == "median" else f"{slug(device)}_{latency_stat}")


def evaluate(
    names, data, seed: int, store: Path, wanted=SPLITS, shard: tuple[int, int] | None = None, inputs=()
) -> None:
    """Cross-validate each predictor on each split and store its out-of-fold predictions in ``store``, each run
    with the digest of ``inputs`` (the dataset folder; perfpredict and this script always) it ran with.

    ``shard`` = (k, n) runs only the folds whose index is k modulo n, so one split's folds can run in n processes
    (gae_gnn's leave-one-family-out is hours on one core); the report merges the n stored shards once all are in.
    """
    splits = {
        "random_5fold": random_folds(data, 5, seed),
        "random_rows_5fold": random_row_folds(data, 5, seed),
        "leave_one_family_out": [m for _, m in family_folds(data)],
    }
    for name in names:
        try:
            cls = make(name)
        except (ImportError, AttributeError) as err:
            print(f"skip {name}: {err}", file=sys.stderr)
            continue
        for split in (s for s in SPLITS if s in wanted):
            folds = splits[split] if shard is None else splits[split][shard[0] :: shard[1]]
            t0 = time.perf_counter()
            oof = cross_validate(cls, data, TARGETS, folds, seed)
            seconds = time.perf_counter() - t0
            digest = inputs_digest.digest(provenance.inputs_of(__file__, inputs), provenance.ROOT)
            save_oof(store / f"{name}__{split}{shard_suffix(shard)}.npz", data, oof, seconds, seed, digest)
            mape = report(data, oof, ("latency_ms",)).get("latency_ms", {}).get("overall", {}).get("mape")
            print(
                f"{name:15s} {split:22s}{shard_suffix(shard)} latency MAPE {fmt(mape):>8s}%  ({seconds:.0f} s)",
                file=sys.stderr,
            )


def shard_suffix(shard: tuple[int, int] | None) -> str:
    return "" if shard is None else f"@{shard[0]}of{shard[1]}"


def parse_shard(text: str) -> tuple[int, int]:
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise argparse.ArgumentTypeError(f"--shard takes K/N with 0 <= K < N (for example 0/2), not {text!r}")
    return int(k), int(n)


# The training-graph capture the stored runs were made on (attention traced fused, cross-entropy's backward on meta
# tensors). The graph cache keys itself by the capture code's digest; this names that capture for the stored
# runs, which stay valid until the capture's meaning changes (then rename it, and rerun them).
TRAINING_CAPTURE = "training-capture-2"


def features_id(data=None) -> str:
    """What every predictor's inputs depend on: the feature schema, the training-graph capture and, for a GPU's
    rows (``data``), the GPU memory model behind their physics features. A stored run made with other features or
    graphs is stale, and the report leaves it out."""
    base = f"{schema_hash(TABULAR_FEATURES)}/{TRAINING_CAPTURE}"
    device = get_device(data.devices[0]) if data is not None else None
    physics = physics_versions(device.kind) if device is not None else {}
    # "gpu_memory_model" -> "/gpu-memory-2": the spelling of the runs stored before the manifests recorded physics
    base += "".join(f"/{name.removesuffix('_model').replace('_', '-')}-{v}" for name, v in physics.items())
    # a CPU's features read its peaks, which are the measuring host's only where measuring_host.pin ran: a run
    # stored with another CPU's peaks predicted for another machine
    return base + (f"/cpu-{_peaks_id(device)}" if device is not None and device.kind == "cpu" else "")


def _peaks_id(device) -> str:
    peaks = json.dumps(sorted(device.peak_flops_per_s.items()))
    return hashlib.sha256(peaks.encode()).hexdigest()[:8]


def save_oof(path: Path, data, oof: dict[str, np.ndarray], seconds: float, seed: int, digest: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "inputs_digest": digest,
        "data_hash": data.data_hash,
        "features": features_id(data),
        "rows": len(data.keys),
        "seconds": round(seconds, 1),
        "seed": seed,
        "created": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
    }
    kept = {t: v.astype(np.float32) for t, v in oof.items() if np.isfinite(v).any()}
    np.savez_compressed(path, meta=json.dumps(meta), keys=np.array(data.keys), **kept)


def load_oof(store: Path, data) -> tuple[dict, dict, list[str]]:
    """Every stored run on this data: (name, split) -> report, (name, split) -> meta, and what was skipped."""
    results, metas, skipped = {}, {}, []
    trusted = trusted_rows(data)
    runs: dict[tuple[str, str], list[tuple[Path, dict, dict]]] = {}
    for path in sorted(store.glob("*__*.npz")):
        name, split = path.stem.split("__", 1)
        meta, oof = _read_oof(path, data)
        if meta["data_hash"] != data.data_hash:
            skipped.append(f"{path.name} (data hash {meta['data_hash']})")
        elif meta.get("features") != features_id(data):
            skipped.append(f"{path.name} (features {meta.get('features', 'before feature schema 2')})")
        else:
            runs.setdefault((name, split.partition("@")[0]), []).append((path, meta, oof))
    for key, parts in runs.items():
        merged = _merge_shards(parts, skipped)
        if merged is None:
            continue
        meta, oof = merged
        results[key] = {
            "all": {**report(data, oof, TARGETS), THROUGHPUT: throughput(data, oof)},
            "trusted": report(data.subset(trusted), {t: v[trusted] for t, v in oof.items()}, TARGETS),
        }
        metas[key] = meta
    return results, metas, skipped


def _read_oof(path: Path, data) -> tuple[dict, dict[str, np.ndarray]]:
    index = {k: i for i, k in enumerate(data.keys)}
    with np.load(path) as f:
        meta = json.loads(str(f["meta"]))
        oof = {t: np.full(len(data.keys), np.nan) for t in TARGETS}
        if meta["data_hash"] == data.data_hash:
            rows = np.array([index[k] for k in f["keys"].tolist()])
            for t in TARGETS:
                if t in f.files:
                    oof[t][rows] = f[t]
    return meta, oof


def _merge_shards(parts: list[tuple[Path, dict, dict]], skipped: list[str]) -> tuple[dict, dict] | None:
    """One run from a whole run, or from a complete set of K-of-N shards; None (noted in ``skipped``) otherwise.

    A whole run wins over shards of the same split. Shards are merged only when all N are stored and came from the
    same seed: their folds then partition the rows exactly as one whole run's would.
    """
    whole = [p for p in parts if "@" not in p[0].stem]
    if whole:
        return whole[0][1], whole[0][2]
    by_n: dict[int, dict[int, tuple[Path, dict, dict]]] = {}
    for part in parts:
        k, n = parse_shard(part[0].stem.rpartition("@")[2].replace("of", "/"))
        by_n.setdefault(n, {})[k] = part
    for n, shards in sorted(by_n.items()):
        if len(shards) == n and len({s[1]["seed"] for s in shards.values()}) == 1:
            oof = {t: np.full(len(next(iter(shards.values()))[2][t]), np.nan) for t in TARGETS}
            for _, _, part in shards.values():
                for t in TARGETS:
                    oof[t] = np.where(np.isfinite(part[t]), part[t], oof[t])
            meta = {
                **shards[0][1],
                "inputs_digest": runs_digest([s[1] for s in shards.values()]),
                "seconds": round(sum(s[1]["seconds"] for s in shards.values()), 1),
                "created": max(s[1]["created"] for s in shards.values()),
                "shards": n,
            }
            return meta, oof
    skipped += [f"{p[0].name} (shard of an incomplete set)" for p in parts]
    return None


THROUGHPUT = "throughput_per_s"


def throughput(data, oof: dict[str, np.ndarray]) -> dict:
    """Samples per second (batch / latency), the figure the research reports: its errors are not latency's
    (an over-prediction of latency by x% is an under-prediction of throughput by x/(1+x))."""
    batch = data.X[:, TABULAR_FEATURES.index("batch")]
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"overall": metrics(batch * 1e3 / data.y["latency_ms"], batch * 1e3 / oof["latency_ms"])}


def trusted_rows(data) -> np.ndarray:
    return np.flatnonzero([trusted_label(r) for r in data.rows])


def noise_floor(data) -> float:
    cvs = [r.get("latency_cv") for r in data.rows if isinstance(r.get("latency_cv"), (int, float))]
    return float(np.median(cvs) * 100) if cvs else float("nan")


def fmt(v, digits=2):
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.{digits}f}"


def _table(lines: list[str], names, results, metas, target: str, which: str) -> None:
    lines += [
        "| predictor | split | MAPE % | RMSE | Kendall tau | Acc(10%) % | n | time s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        for split in SPLITS:
            m = results.get((name, split), {}).get(which, {}).get(target, {}).get("overall")
            if m:
                lines.append(
                    f"| {name} | {split} | {fmt(m.get('mape'))} | {m.get('rmse', 0):.4g} | "
                    f"{fmt(m.get('kendall_tau'), 3)} | {fmt(m.get('acc10'), 1)} | {m.get('n')} | "
                    f"{metas[(name, split)]['seconds']:.0f} |"
                )
    lines.append("")


def runs_digest(metas) -> str:
    """The inputs' digest the stored runs share, or ``mixed`` where they differ (or one predates digests)."""
    found = {m.get("inputs_digest") for m in metas}
    return found.pop() if len(found) == 1 and None not in found else provenance.MIXED


def write(path: Path, args, data, store: Path, results, metas, skipped) -> None:
    names = sorted({n for n, _ in results}, key=lambda n: (DEFAULT.index(n) if n in DEFAULT else 99, n))
    runs = sorted({f"{m['created']}" for m in metas.values()})
    trusted = trusted_rows(data)
    lines = [
        f"# Accuracy on `{args.device}` ({data.devices[0]})",
        "",
        f"- {header(__file__, packages=(), inputs=args.inputs, digest=runs_digest(metas.values()))}; built from "
        f"{len(results)} stored runs "
        f"({runs[0] if runs else '-'} to {runs[-1] if runs else '-'})",
        f"- commands: `python benchmarks/accuracy.py --device {args.device} --predictors <names> --splits "
        f"<splits>` stores each run under `{store.relative_to(RESULTS.parent.parent)}`; "
        f"`--report-only` rebuilds this file from them",
        *([f"- {args.host_line}"] if data.devices[0] == "cpu" else []),
        f"- latency target: the {args.latency_stat} of each row's timed runs",
        f"- rows: {len(data.keys)} measured rows (status ok), {len(set(data.families.tolist()))} families, "
        f"{len(np.unique(data.group_ids))} architectures; data hash {data.data_hash}",
        f"- measurement noise floor: median coefficient of variation of the timed runs "
        f"{fmt(noise_floor(data))}%; {len(trusted)} trusted rows (quiet host, CV < 10%); "
        "{} of {} batch sweeps have a larger batch measured over 10% faster than a smaller one (label "
        "noise: see data/README.md)".format(*batch_sweep_inversions(data.rows)),
        "- neighbour oracle: each interior row of a batch sweep predicted from the same sweep's measured rows "
        "either side (linear in the batch) is {:.1f}% off (MAPE, {} rows). It knows more than any split "
        "below allows; its error is the labels' roughness along the batch, plus the curvature a straight line "
        "misses "
        "(`studies/results/sweep_recheck-cpu.md` re-measures the CPU's roughest sweeps: their bumps did not "
        "come back; data/README.md, 'Noise between timed windows')".format(*neighbour_oracle_mape(data.rows)),
        "",
    ]
    lines += (
        [f"- skipped stored runs (other data or features, or shards of an incomplete set): {', '.join(skipped)}", ""]
        if skipped
        else []
    )
    lines += [
        "Out-of-fold predictions only: every number is on rows the model did not train on. `random_5fold` "
        "keeps all rows of one architecture in one fold (our headline: the architecture is new). "
        "`random_rows_5fold` is the research's protocol: rows are shuffled, so the model may have seen the "
        "same architecture at other batch sizes, phases or dtypes; compare the papers' figures with it. "
        "`leave_one_family_out` trains on every other family.",
        "",
    ]
    for target in TARGETS:
        if not any(target in r["all"] for r in results.values()):
            lines += [f"## {target}", "", "not measured on this device (no rows carry it)", ""]
            continue
        lines += [f"## {target}", ""]
        _table(lines, names, results, metas, target, "all")
    lines += [f"## {THROUGHPUT} (batch / latency_ms)", ""]
    _table(lines, names, results, metas, THROUGHPUT, "all")
    lines += [
        "## latency_ms on trusted rows",
        "",
        f"The same out-of-fold predictions, scored on the {len(trusted)} rows whose label is trustworthy "
        "(measured on a quiet host, timed runs within 10% CV). The gap to the table above is what label "
        "noise costs.",
        "",
    ]
    _table(lines, names, results, metas, "latency_ms", "trusted")
    fams = sorted(set(data.families.tolist()))
    lines += [
        "## latency_ms MAPE % per family",
        "",
        "| predictor | split | " + " | ".join(fams) + " |",
        "|---|---|" + "---:|" * len(fams),
    ]
    for name in names:
        for split in SPLITS:
            per = results.get((name, split), {}).get("all", {}).get("latency_ms", {}).get("families", {})
            if per:
                lines.append(
                    f"| {name} | {split} | " + " | ".join(fmt(per.get(f, {}).get("mape"), 1) for f in fams) + " |"
                )
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", required=True)
    ap.add_argument("--predictors", default=",".join(DEFAULT), help="the predictors to run and to report")
    ap.add_argument("--max-rows", type=int, default=None, help="a slice, for a quick check (stored apart)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--latency-stat", choices=("median", "min"), default="median")
    ap.add_argument("--splits", default=",".join(SPLITS))
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from the stored runs")
    ap.add_argument(
        "--shard",
        type=parse_shard,
        default=None,
        metavar="K/N",
        help="run only folds K, K+N, K+2N, ... of each split (N processes share a split; the report "
        "merges the shards once all N are stored)",
    )
    args = ap.parse_args()
    args.host_line = measuring_host.pin(dataset_folder(args.device))
    data = load_training_set(
        [dataset_folder(args.device)], max_rows=args.max_rows, progress=True, latency_stat=args.latency_stat
    )
    args.folder = dataset_folder(args.device)
    args.inputs = (args.folder, Path(measuring_host.__file__))
    store = oof_dir(args.device, args.latency_stat)
    if args.max_rows:
        store = store.with_name(f"{store.name}_max{args.max_rows}")
    names = [n.strip() for n in args.predictors.split(",") if n.strip()]
    if not args.report_only:
        evaluate(
            names,
            data,
            args.seed,
            store,
            tuple(args.splits.split(",")),
            args.shard,
            args.inputs,
        )
    results, metas, skipped = load_oof(store, data)
    # the report holds the predictors named (default: every one): a run re-made on today's code is not reported
    # beside older runs of the others, whose code it no longer shares
    results = {k: v for k, v in results.items() if k[0] in names}
    metas = {k: v for k, v in metas.items() if k[0] in names}
    suffix = ("" if args.latency_stat == "median" else f"_{args.latency_stat}") + (
        f"_max{args.max_rows}" if args.max_rows else ""
    )
    out = args.out or RESULTS / f"accuracy_{slug(args.device)}{suffix}.md"
    write(out, args, data, store, results, metas, skipped)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
