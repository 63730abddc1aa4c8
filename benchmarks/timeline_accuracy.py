"""The two-timeline model against measured model rows, beside the analytical roofline: MAPE, tau, interval coverage.

    python benchmarks/timeline_accuracy.py data/v3/cpu-amd-epyc-2c --device cpu --fit --save \
        --out benchmarks/results/timeline_accuracy-cpu-amd-epyc-2c.md
    python benchmarks/timeline_accuracy.py data/nvidia-h100-80gb-hbm3 --device H100-SXM --fit --save \
        --out benchmarks/results/timeline_accuracy-nvidia-h100-80gb-hbm3.md

Without ``--fit`` nothing is trained on these rows: the two-timeline model's parts come from elsewhere (the host
profile, the op rows' efficiency model, the device's ceilings, the shipped calibration), so every row is held out.
``--fit`` fits the two scales of the device's kind (the host's dispatch scale and the device-time scale,
``two_timeline_fit``) on all rows, and scores each family with the scales fitted on the other families
(``two_timeline_lofo``, a held-out figure). ``--save`` stores them (``perfpredict.learning.conformal``): the dispatch scale in the reference host
profile, the device-time scale and the conformal interval in ``two_timeline_calibration.json``. The label is ``eager_ms`` for protocol-v3 rows
(``device_ms`` is scored too where it differs) and ``latency_ms`` (synced after every step) for v2 rows, which the
eager simulation plus one sync approximates. Interval coverage: the share of rows inside the reported [low, high],
and a split-conformal band (half the sweeps calibrate a multiplicative band at 80%, the other half are scored).
Rows on a busy host (load average above the core count) are left out.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from perfpredict.hardware.devices import get_device
from perfpredict.learning.conformal import conformal_band, save_calibration
from perfpredict.learning.training_data import GraphCache, arrays_for
from perfpredict.predictors.analytical import AnalyticalPredictor
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.two_timeline import TwoTimelinePredictor, interval_factor
from perfpredict.profiling import zoo
from perfpredict.profiling.dataset import load_dataset, quiet_host

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks import measuring_host
from benchmarks.provenance import header, write_result


def _tau(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic)


def sweeps_of(rows: list[dict], device, cache: GraphCache) -> list[tuple[list[int], object, np.ndarray, RunConfig]]:
    """(row indices, cost arrays, batches, config) per batch sweep: one trace serves all its batches."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[zoo.ModelSpec.from_key(r["key"]).group_key()].append(i)
    out = []
    for idx in groups.values():
        spec = zoo.ModelSpec.from_key(rows[idx[0]]["key"])
        try:
            arrays = arrays_for(spec, cache)
        except Exception as err:  # noqa: BLE001 - an untraceable spec is skipped and counted
            print(f"skip {spec.family}: {type(err).__name__}", file=sys.stderr)
            continue
        out.append((idx, arrays, np.array([rows[i]["batch_size"] for i in idx]), RunConfig(phase=spec.phase)))
    return out


def predict_rows(rows: list[dict], device, sweeps: list, profile=None) -> dict[str, np.ndarray]:
    """Predicted seconds per row for each model."""
    learned = TwoTimelinePredictor(profile)
    fixed, analytical = TwoTimelinePredictor(profile, learned=False), AnalyticalPredictor()
    out = {k: np.full(len(rows), np.nan) for k in ("two_timeline", "two_timeline_fixed", "device_s", "analytical")}
    for idx, arrays, batches, config in sweeps:
        ev = analytical.evaluate(arrays, device, config, batches)
        tl, _ = learned.timelines(arrays, device, config, batches, ev)
        out["two_timeline"][idx] = tl.wall_s
        out["device_s"][idx] = tl.device_s
        out["two_timeline_fixed"][idx] = fixed.timelines(arrays, device, config, batches, ev)[0].wall_s
        out["analytical"][idx] = ev.latency_s
    return out


def fit_scales(folder: str, device, families: np.ndarray, keys: list[str]) -> tuple[float, float, float, np.ndarray]:
    """(dispatch scale, device-time scale, training steps' dispatch scale) fitted on every row, and each row's wall
    time with the scales fitted on the other families (leave-one-family-out), aligned to ``keys``."""
    from perfpredict.learning.training_data import load_training_set
    from perfpredict.learning.two_timeline_fit import TwoTimelineLearner

    data = load_training_set([folder], device=device)
    learner = TwoTimelineLearner()
    learner.fit(data)
    lofo = np.full(len(data.keys), np.nan)
    for fam in sorted(set(data.families.tolist())):
        held = data.families == fam
        fold = TwoTimelineLearner()
        fold.fit(data.subset(np.flatnonzero(~held)))
        lofo[held] = fold.predict(data.subset(np.flatnonzero(held)))["latency_ms"].value * 1e-3
    by_key = dict(zip(data.keys, lofo))
    return learner.scale, learner.device_scale, learner.training_scale, np.array([by_key.get(k, np.nan) for k in keys])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--device", default="cpu", help="catalog device the rows ran on")
    p.add_argument("--out", default=None)
    p.add_argument("--max-rows", type=int, default=None)
    p.add_argument(
        "--save",
        action="store_true",
        help="store the conformal band (and with --fit the two scales) for this kind of device",
    )
    p.add_argument(
        "--fit",
        action="store_true",
        help="fit the dispatch and device-time scales for the device's kind (all rows, and leave-one-family-out)",
    )
    args = p.parse_args(argv)
    if get_device(args.device).kind == "cpu":
        print(measuring_host.pin(args.folder), file=sys.stderr)  # the rows' CPU, not this host's
    device = get_device(args.device)
    rows = [r for r in load_dataset(args.folder).rows if r.get("status") == "ok" and quiet_host(r)]
    rows = rows[: args.max_rows]
    v3 = all(r.get("protocol_version") == 3 for r in rows)
    label_key = "eager_ms" if v3 else "latency_ms"
    sweeps = sweeps_of(rows, device, GraphCache())
    preds = predict_rows(rows, device, sweeps)
    true = np.array([r[label_key] for r in rows]) * 1e-3
    fitted = None
    if args.fit:
        *fitted, preds["two_timeline_lofo"] = fit_scales(
            args.folder, device, np.array([r["family"] for r in rows]), [r["key"] for r in rows]
        )
    ok = np.isfinite(preds["two_timeline"])
    lines = [
        f"# Two-timeline latency on {rows[0]['device']}",
        "",
        f"{header(__file__, argv, packages=(), inputs=(args.folder,))}.",
        "",
        f"{int(ok.sum())} of {len(rows)} rows scored "
        f"(protocol {'v3' if v3 else 'v2'}, label `{label_key}`), ceilings of `{device.name}`; "
        f"host profile `{TwoTimelinePredictor().profile_for(device).name}`.",
        "",
        "| model | MAPE | median APE | within 10% | Kendall tau |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in [k for k in ("two_timeline", "two_timeline_lofo", "two_timeline_fixed", "analytical") if k in preds]:
        ape = np.abs(preds[name][ok] - true[ok]) / true[ok]
        lines.append(
            f"| {name} | {100 * ape.mean():.1f}% | {100 * np.median(ape):.1f}% | "
            f"{100 * (ape <= 0.1).mean():.0f}% | {_tau(preds[name][ok], true[ok]):.2f} |"
        )
    if v3 and any(r.get("device_method") != "wall" for r in rows):
        dev_true = np.array([r["device_ms"] for r in rows])[ok] * 1e-3
        ape = np.abs(preds["device_s"][ok] - dev_true) / dev_true
        lines.append(
            f"| two_timeline device time vs `device_ms` | {100 * ape.mean():.1f}% | "
            f"{100 * np.median(ape):.1f}% | {100 * (ape <= 0.1).mean():.0f}% | - |"
        )
    if fitted is not None:
        lines += [
            "",
            f"Fitted on every row: dispatch scale {fitted[0]:.2f} (the reference profile's "
            f'`dispatch_scale["{"gpu" if device.kind == "gpu" else "cpu"}"]`)'
            + (f", {fitted[2]:.2f} for training steps" if fitted[2] != fitted[0] else "")
            + f", device-time scale {fitted[1]:.2f} (`two_timeline_calibration.json`); `two_timeline` above uses the "
            "shipped "
            "values, `two_timeline_lofo` predicts each family with the scales fitted on the other families, "
            "so its figure is held out.",
        ]
        ok &= np.isfinite(preds["two_timeline_lofo"])
    pred = preds["two_timeline_lofo" if fitted is not None else "two_timeline"][ok]
    factor = interval_factor(device)
    inside = float(((true[ok] >= pred / factor) & (true[ok] <= pred * factor)).mean())
    groups = [zoo.ModelSpec.from_key(r["key"]).arch_key() for r, k in zip(rows, ok) if k]
    band, coverage = conformal_band(pred, true[ok], groups)
    lines += [
        "",
        "## Intervals (80%)",
        "",
        f"- the interval the predictor reports (x/÷ {factor:.2f}): {100 * inside:.0f}% of rows inside.",
        f"- split conformal (half the architectures calibrate): x/÷ {band:.2f}, coverage "
        f"{100 * coverage:.0f}% on the other half.",
        "",
        "## Per family (two_timeline)",
        "",
        "| family | rows | MAPE | median signed error |",
        "|---|---:|---:|---:|",
    ]
    fam = defaultdict(list)
    for r, pr, t in zip([r for r, k in zip(rows, ok) if k], pred, true[ok]):
        fam[(r["family"], r["phase"])].append((pr - t) / t)
    for (f, ph), errs in sorted(fam.items()):
        lines.append(
            f"| {f} {ph} | {len(errs)} | {100 * statistics.fmean(map(abs, errs)):.0f}% | "
            f"{100 * statistics.median(errs):+.0f}% |"
        )
    text = "\n".join(lines) + "\n"
    write_result(text, args.out)
    if args.save:
        save_calibration(
            device, band, coverage, len(pred), rows[0]["device"], tuple(fitted) if fitted is not None else None
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
