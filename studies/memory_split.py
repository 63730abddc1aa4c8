"""The analytical memory model against the measured peak split at the end of the build (measurement schema 2).

    python studies/memory_split.py --device nvidia-h100-80gb-hbm3

The collector records two peaks per row: ``build_peak_memory_bytes`` (building the model in float32, casting it to
the run dtype, moving it and making the inputs) and ``step_peak_memory_bytes`` (the timed steps, after a reset of
the peak statistics). The analytical model predicts both halves apart:

- step: the weights (plus gradients and optimizer state in training) and the activation peak, i.e.
  ``peak_tensor_bytes`` with ``weights_built_in=None``, the figure a user loading weights in the run dtype sees;
- build: the weights' float32 load and cast (``load_peak_bytes``), or, once cast, the run-dtype weights and the
  inputs the collector makes next, whichever is higher.

Scoring each half on its own measurement says which half of the model is wrong, which the combined peak hides.
Writes studies/results/memory_split_<device>.md and .json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from perfpredict.learning.train import dataset_folder
from perfpredict.learning.training_data import device_for_rows, load_training_set
from perfpredict.predictors.analytical import AnalyticalPredictor
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.memory_model import fixed_tensor_bytes, load_peak_bytes
from perfpredict.profiling import zoo

RESULTS = Path(__file__).parent / "results"
HALVES = ("step", "build", "peak")


def predicted_halves(arrays, device, spec) -> dict[str, float]:
    """The analytical step, build and combined peaks of one measured row (tensor bytes, no runtime overhead)."""
    config = RunConfig(phase=spec.phase)
    graph, batch = arrays.graph, np.array([float(spec.batch)])
    activations = (
        AnalyticalPredictor()
        .evaluate(arrays, device, replace(config, weights_built_in=None), batch)
        .activations_bytes[0]
    )
    step = fixed_tensor_bytes(graph, config) + float(activations)
    inputs = float(spec_input_bytes(spec))  # made after the cast, so they never add to the load's peak
    build = max(float(load_peak_bytes(graph, config)), graph.param_bytes + inputs)
    return {"step": step, "build": build, "peak": max(step, build)}


def spec_input_bytes(spec) -> int:
    """Bytes of the inputs (and training labels) the collector makes for ``spec``, from meta tensors. Not the
    graph's input bytes: an AOT training graph takes the parameters as inputs too."""
    x, labels = spec.inputs("meta")
    return sum(t.numel() * t.element_size() for t in (x, labels) if t is not None)


def measured_halves(row) -> dict[str, float] | None:
    step, build = row.get("step_peak_memory_bytes"), row.get("build_peak_memory_bytes")
    if not step or not build:
        return None  # rows from before the split
    return {"step": float(step), "build": float(build), "peak": float(row["peak_memory_bytes"])}


def score(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """MAPE and the median predicted/measured ratio (under 1: the model predicts too little)."""
    ape = [abs(p - m) / m for p, m in pairs]
    return {
        "n": len(pairs),
        "mape_pct": 100 * statistics.fmean(ape),
        "median_ratio": statistics.median(p / m for p, m in pairs),
        "within_10pct": sum(a <= 0.10 for a in ape) / len(ape),
    }


def collect_pairs(data, device) -> list[dict]:
    out = []
    for row, arrays in zip(data.rows, data.arrays):
        measured = measured_halves(row)
        if measured is None:
            continue
        spec = zoo.ModelSpec.from_key(row["key"])
        out.append(
            {
                "key": row["key"],
                "family": row["family"],
                "phase": row["phase"],
                "dtype": row["dtype"],
                "batch": row["batch_size"],
                "measured": measured,
                "predicted": predicted_halves(arrays, device, spec),
            }
        )
    return out


def table(pairs: list[dict], by: str | None) -> list[str]:
    groups: dict[str, list[dict]] = {}
    for p in pairs:
        groups.setdefault("all" if by is None else " / ".join(str(p[k]) for k in by.split(",")), []).append(p)
    lines = [
        f"| {by or 'rows'} | n | " + " | ".join(f"{h} MAPE | {h} ratio" for h in HALVES) + " |",
        "| --- | ---: | " + " | ".join("---: | ---:" for _ in HALVES) + " |",
    ]
    for name in sorted(groups):
        cells = []
        for h in HALVES:
            s = score([(p["predicted"][h], p["measured"][h]) for p in groups[name]])
            cells.append(f"{s['mape_pct']:.1f}% | {s['median_ratio']:.2f}")
        lines.append(f"| {name} | {len(groups[name])} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", required=True, help="a dataset folder or its slug under data/")
    args = ap.parse_args()
    folder = dataset_folder(args.device)
    data = load_training_set([folder])
    device = device_for_rows(data.rows)
    pairs = collect_pairs(data, device)
    if not pairs:
        print(
            f"no rows in {folder} carry the build/step split (measurement schema 2); collect new rows", file=sys.stderr
        )
        return 1
    summary = {h: score([(p["predicted"][h], p["measured"][h]) for p in pairs]) for h in HALVES}
    slug = folder.name
    (RESULTS / f"memory_split_{slug}.json").write_text(
        json.dumps({"device": slug, "summary": summary, "rows": pairs}, indent=1) + "\n"
    )
    lines = [
        f"# Analytical memory against the measured build/step split: {slug}",
        "",
        f"`python studies/memory_split.py --device {slug}`; {len(pairs)} rows with the split "
        f"(of {len(data.rows)}). Tensor bytes, no runtime overhead. Ratio: median predicted/measured.",
        "",
    ]
    for by in (None, "phase,dtype", "family"):
        lines += table(pairs, by) + [""]
    (RESULTS / f"memory_split_{slug}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
