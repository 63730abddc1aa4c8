"""The GPU device-time model on public op rows: leave-one-GPU-out, NeuSight's own split, Vidur leave-one-model-out.

    python benchmarks/gpu_op_efficiency.py                       # every split; writes the result below
    python benchmarks/gpu_op_efficiency.py --save                # also fit on every row and ship the artifact

Rows: ``data/external/neusight`` (fp32, eight GPUs), ``data/external/vidur`` (fp16, three GPUs) and the project's
own GPU op rows (``data/<gpu>/ops``), with NeuSight's per-call timing floor and overhead taken off
(:mod:`perfpredict.learning.gpu_training_rows`). Metric: the absolute percentage error of predicted device time
per op (MAPE, and the median), per op kind and GPU. Splits:

- **leave-one-GPU-out**: every row of one GPU held out; its level in each GEMM class comes from its nearest covered
  neighbours (board power, then compute capability), as for any GPU without rows;
- **NeuSight's split**: trained on NeuSight's training rows of P4, P100, T4, V100 and A100-40GB (PCIe) only, scored on
  its test rows (the out-of-distribution shapes) of the three unseen GPUs (H100, L4, A100-80GB PCIe) and of the five
  seen ones. NeuSight's published per-op errors on out-of-distribution rows (``scripts/asplos/summary/perop.csv``) stand
  beside it;
- **Vidur leave-one-model-out**: every Vidur row of one model held out (on all three GPUs), its fp16 GEMMs scored;
- **public rows predicting our own**: trained on NeuSight's and Vidur's rows only, scored on the project's own GPU
  op rows (the lease script's bf16/fp16 rows under CUDA graphs).

Training rows per (GPU, op, source split) are capped (``--cap``, random, seeded) to keep the splits to minutes on two
cores; ``--save`` fits on every row.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

from perfpredict.learning import gpu_training_rows as tr
from perfpredict.learning.gpu_efficiency_fit import GpuEfficiencyLearner
from perfpredict.predictors import gpu_efficiency as ge

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks import provenance

RESULT = Path(__file__).resolve().parent / "results" / "gpu_op_efficiency.md"
NEUSIGHT_TRAIN = ("P4", "P100-PCIe-16GB", "T4", "V100-PCIe-32GB", "A100-40GB-PCIe")
NEUSIGHT_UNSEEN = ("H100-SXM", "L4", "A100-80GB-PCIe")
#: NeuSight's per-op MAPE (%) on out-of-distribution rows, scripts/asplos/summary/perop.csv
NEUSIGHT_OOD = {"bmm": 13.8, "linear": 13.9, "elementwise": 19.3, "softmax": 13.9, "layernorm": 56.7}
KIND_GROUPS = {"matmul": "gemm", "conv": "conv", "elementwise": "elementwise", "softmax": "softmax", "norm": "norm"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--splits", default="own,logo,neusight,vidur", help="comma-separated: own, logo, neusight, vidur")
    p.add_argument("--cap", type=int, default=2000, help="training rows per (GPU, op, split) group in the splits")
    p.add_argument("--trees", type=int, default=400, help="trees in the splits' models (the shipped model: PARAMS)")
    p.add_argument("--save", action="store_true", help="fit on every row and write the shipped artifact")
    p.add_argument("--out", type=Path, default=RESULT)
    args = p.parse_args(argv)
    started = time.time()
    frame = tr.load_frame()
    labelled = frame[frame["device_s"].notna()].reset_index(drop=True)
    a = tr.arrays(frame)
    cols = Columns(labelled)
    sections = []
    for split in args.splits.split(","):
        sections.append(SPLITS[split.strip()](a, cols, args))
        print(sections[-1], flush=True)
    if args.save:
        sections.append(save(a, cols))
    text = header(args, labelled, started) + "\n\n".join(sections) + "\n"
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


class Columns:
    """The row attributes the splits group by, as arrays aligned with ``tr.arrays``."""

    def __init__(self, labelled) -> None:
        self.device = labelled["device"].to_numpy(str)
        self.source = labelled["source"].to_numpy(str)
        self.split = labelled["source_split"].fillna("-").to_numpy(str)
        self.op = labelled["source_op"].fillna("-").to_numpy(str)
        self.kind = np.array([KIND_GROUPS.get(k, k) for k in labelled["kind"]])
        self.model = labelled["model"].fillna("-").to_numpy(str)
        self.group = np.char.add(np.char.add(self.device, "|"), np.char.add(self.op, self.split))


def capped(cols: Columns, rows: np.ndarray, cap: int, seed: int = 0) -> np.ndarray:
    """``rows`` with at most ``cap`` of each (GPU, op, split) group, chosen at random."""
    rng = np.random.default_rng(seed)
    keep = []
    for g in np.unique(cols.group[rows]):
        members = rows[cols.group[rows] == g]
        keep.append(members if len(members) <= cap else rng.choice(members, cap, replace=False))
    return np.sort(np.concatenate(keep)) if keep else rows


def fit(a: tr.Arrays, cols: Columns, rows: np.ndarray, trees: int) -> ge.GpuEfficiencyModel:
    params = {**ge.PARAMS, "n_estimators": trees, "learning_rate": 0.08}
    weight = balanced_weights(cols, rows)
    classes, devices = np.asarray(a.classes), np.asarray(a.devices)
    learner = GpuEfficiencyLearner(params=params)
    return learner.fit(a.X[rows], a.log_eff[rows], classes[rows], devices[rows], a.bound_s[rows], weight).model


def balanced_weights(cols: Columns, rows: np.ndarray) -> np.ndarray:
    """1/sqrt(rows of the same GPU and kind): a kind's weight grows with its rows, but slowly."""
    keys = np.char.add(cols.device[rows], cols.kind[rows])
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    w = 1.0 / np.sqrt(counts[inverse])
    return w / w.mean()


def predict_s(model: ge.GpuEfficiencyModel, a: tr.Arrays, rows: np.ndarray, device_name: str) -> np.ndarray:
    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors import gpu_op_features as gf

    device = gf.datasheet_basis(get_device(device_name))
    return a.bound_s[rows] / model.efficiency([a.shapes[i] for i in rows], device, [a.units[i] for i in rows])


def ape(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    return np.abs(pred - true) / true


def table(title: str, results: dict[tuple[str, str], np.ndarray], note: str = "") -> str:
    """A Markdown table of MAPE / median APE / rows per (row label, kind) and an overall row per label."""
    kinds = sorted({k for _, k in results})
    labels = sorted({r for r, _ in results}, key=lambda r: (r == "all", r))
    lines = [f"### {title}", "", note] if note else [f"### {title}", ""]
    lines += ["| | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
    for label in labels:
        cells = []
        for k in kinds:
            e = results.get((label, k))
            cells.append(
                "-" if e is None or not len(e) else f"{100 * e.mean():.1f}% / {100 * np.median(e):.1f}% ({len(e)})"
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def logo(a: tr.Arrays, cols: Columns, args) -> str:
    results: dict[tuple[str, str], np.ndarray] = {}
    for held, train, test in tr.leave_one_out(cols.device):
        model = fit(a, cols, capped(cols, train, args.cap), args.trees)
        errors = ape(predict_s(model, a, test, held), a.device_s[test])
        for kind in np.unique(cols.kind[test]):
            for source in np.unique(cols.source[test]):
                mask = (cols.kind[test] == kind) & (cols.source[test] == source)
                if mask.any():
                    results[(f"{held} ({source})", kind)] = errors[mask]
                    results.setdefault(("all", kind), np.array([]))
                    results[("all", kind)] = np.concatenate([results[("all", kind)], errors[mask]])
        print(f"  logo {held}: {100 * errors.mean():.1f}%", flush=True)
    note = (
        "Every row of one GPU held out; MAPE / median APE (rows) of device time per op. Targets: GEMM kinds <= 10%, "
        "elementwise and softmax <= 12%, norms <= 20%."
    )
    return table("Leave one GPU out", results, note)


def neusight_split(a: tr.Arrays, cols: Columns, args) -> str:
    everyone = np.arange(len(a.log_eff))
    train = everyone[(cols.source == "neusight") & (cols.split == "train") & np.isin(cols.device, NEUSIGHT_TRAIN)]
    model = fit(a, cols, capped(cols, train, args.cap), args.trees)
    results: dict[tuple[str, str], np.ndarray] = {}
    test = everyone[(cols.source == "neusight") & (cols.split == "test")]
    for name in np.unique(cols.device[test]):
        rows = test[cols.device[test] == name]
        errors = ape(predict_s(model, a, rows, name), a.device_s[rows])
        label = f"{name} ({'unseen' if name in NEUSIGHT_UNSEEN else 'seen'})"
        for op in np.unique(cols.op[rows]):
            group = op if op in ("bmm", "linear", "softmax") else "layernorm" if op == "ln" else "elementwise"
            mask = cols.op[rows] == op
            for key in ((label, group), ("unseen GPUs" if name in NEUSIGHT_UNSEEN else "seen GPUs", group)):
                results[key] = np.concatenate([results.get(key, np.array([])), errors[mask]])
    anchors = ", ".join(f"{k} {v}%" for k, v in NEUSIGHT_OOD.items())
    note = (
        "Trained on NeuSight's training rows of P4, P100, T4, V100 and A100-40GB (PCIe) only; scored on its test rows "
        f"(out-of-distribution shapes). NeuSight's own per-op MAPE on out-of-distribution rows: {anchors}."
    )
    return table("NeuSight's split", results, note)


def vidur_models(a: tr.Arrays, cols: Columns, args) -> str:
    everyone = np.arange(len(a.log_eff))
    results: dict[tuple[str, str], np.ndarray] = {}
    for held in sorted(set(cols.model[cols.source == "vidur"])):
        out = (cols.source == "vidur") & (cols.model == held)
        model = fit(a, cols, capped(cols, everyone[~out], args.cap), args.trees)
        test = everyone[out & (cols.kind == "gemm")]
        for name in np.unique(cols.device[test]):
            rows = test[cols.device[test] == name]
            errors = ape(predict_s(model, a, rows, name), a.device_s[rows])
            results[(held, name)] = errors
            results[("all", name)] = np.concatenate([results.get(("all", name), np.array([])), errors])
        print(f"  vidur {held} done", flush=True)
    note = (
        "Every Vidur row of one model held out (all GPUs); its fp16 GEMMs (projections) scored per GPU. Target <= 8%."
    )
    return table("Vidur fp16 GEMMs, leave one model out", results, note)


def own_split(a: tr.Arrays, cols: Columns, args) -> str:
    """Trained on the public rows only, scored on the project's own GPU op rows: other people's measurements
    predicting ours, per GPU, kind and dtype."""
    everyone = np.arange(len(a.log_eff))
    own = cols.source == "perfpredict"
    if not own.any():
        return "### Public rows predicting our own\n\nNo own GPU op rows (data/v3/<gpu>/ops) yet."
    model = fit(a, cols, capped(cols, everyone[~own], args.cap), args.trees)
    dtypes = np.array([s.dtype for s in a.shapes])
    results: dict[tuple[str, str], np.ndarray] = {}
    for name in np.unique(cols.device[own]):
        rows = everyone[own & (cols.device == name)]
        errors = ape(predict_s(model, a, rows, name), a.device_s[rows])
        for kind in np.unique(cols.kind[rows]):
            for dtype in np.unique(dtypes[rows]):
                mask = (cols.kind[rows] == kind) & (dtypes[rows] == dtype)
                if mask.any():
                    results[(f"{name} {dtype}", kind)] = errors[mask]
            results[(f"{name} all", kind)] = errors[cols.kind[rows] == kind]
        print(f"  own {name}: {100 * errors.mean():.1f}%", flush=True)
    note = (
        "Trained on NeuSight's and Vidur's rows only (no row of ours); scored on the project's own GPU op rows, "
        "measured under CUDA graphs by the lease script (`benchmarks/gpu_lease.sh`)."
    )
    return table("Public rows predicting our own", results, note)


SPLITS = {"logo": logo, "neusight": neusight_split, "vidur": vidur_models, "own": own_split}


def subset(a: tr.Arrays, rows: np.ndarray) -> tr.Arrays:
    """The labelled rows ``rows`` of ``a``."""
    pick = [int(i) for i in rows]
    return tr.Arrays(
        a.X[rows],
        a.log_eff[rows],
        a.device_s[rows],
        a.bound_s[rows],
        *([values[i] for i in pick] for values in (a.shapes, a.units, a.classes, a.devices)),
    )


def fit_shipped(a: tr.Arrays, cols: Columns, rows: np.ndarray) -> ge.GpuEfficiencyModel:
    """The shipped model's fit (PARAMS, every (GPU, kind) group weighted alike) on the labelled rows ``rows``:
    ``save`` fits it on every row; ``benchmarks/unseen_gpu.py`` on every row but one GPU's."""
    sub = subset(a, rows)
    weight = balanced_weights(cols, rows)
    model = GpuEfficiencyLearner().fit(sub.X, sub.log_eff, sub.classes, sub.devices, sub.bound_s, weight).model
    model.dtypes = tr.dtypes_seen(sub)
    return model


def save(a: tr.Arrays, cols: Columns) -> str:
    model = fit_shipped(a, cols, np.arange(len(a.log_eff)))
    rows = {
        f"{s}:{d}": int(((cols.source == s) & (cols.device == d)).sum())
        for s, d in sorted(set(zip(cols.source, cols.device)))
    }
    manifest = {
        "kind": "gpu_op_efficiency",
        "version": 1,
        "trained": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        "command": "python benchmarks/gpu_op_efficiency.py --save",
        "rows": rows,
        "sources": sorted(set(cols.source)),
    }
    model.save(ge.ARTIFACT, manifest)
    levels = "; ".join(
        f"{c}: " + ", ".join(f"{d} {np.exp(v):.2f}" for d, v in sorted(lv.items())) for c, lv in model.levels.items()
    )
    return f"### Shipped model\n\nFitted on all {len(a.log_eff)} labelled rows; levels (efficiency): {levels}."


def training_inputs() -> tuple[str, ...]:
    """The data the device-time model trains on (``gpu_training_rows.load_frame``): the public sets and every
    folder of op rows it reads."""
    own = sorted(tr.DATA_DIR.glob("*/ops")) + sorted(tr.DATA_DIR.glob("v3/*/ops"))
    return ("data/external/neusight", "data/external/vidur", *(str(p) for p in own))


def header(args, labelled, started: float) -> str:
    counts = labelled.groupby(["source", "device"]).size()
    rows = ", ".join(f"{d} {n}" for (s, d), n in counts.items())
    return (
        "# GPU per-op device time on public measurements\n\n"
        f"{provenance.header(__file__, seconds=time.time() - started, packages=(), inputs=training_inputs())}.\n\n"
        f"Training rows per group capped at {args.cap}, {args.trees} trees.\n\n"
        f"Labelled rows (NeuSight's floor-dominated rows left out): {len(labelled)}: {rows}.\n\n"
    )


if __name__ == "__main__":
    sys.exit(main())
