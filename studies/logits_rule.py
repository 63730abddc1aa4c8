"""Which liveness rule for a training step's forward outputs fits a device's measured peaks: kept to the end, or
freed after their last use (an LM's logits are the big one).

    python studies/logits_rule.py --device cpu-amd-epyc-2c
    python studies/logits_rule.py --device nvidia-h100-80gb-hbm3

The measured step keeps only the loss, so the logits die before the backward; the GPU memory model frees them
(version 2), the CPU's keeps them (``memory_model.free_steps``). This scores the analytical peak (tensor bytes, as
in the physics features) under both rules against every measured row, also scaled by each rule's median ratio to
the measured peak, so that a label that sits above the tensors by a steady factor (the CPU's resident set) does
not decide the comparison. Writes studies/results/logits_rule_<device>.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from perfpredict.learning.train import dataset_folder
from perfpredict.learning.training_data import device_for_rows, load_training_set
from perfpredict.predictors.analytical import AnalyticalPredictor
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.memory_model import peak_tensor_bytes
from perfpredict.profiling import zoo

RESULTS = Path(__file__).parent / "results"
LM_FAMILIES = ("gpt2", "llama", "mistral", "qwen2")  # causal LMs: a [batch, seq, vocab] logits output
RULES = {"kept": True, "freed": False}


def predicted_peaks(data, device) -> dict[str, np.ndarray]:
    """The analytical peak tensor bytes of every row under each rule."""
    out: dict[str, list[float]] = {rule: [] for rule in RULES}
    for arrays, row in zip(data.arrays, data.rows):
        spec = zoo.ModelSpec.from_key(row["key"])
        config, batch = RunConfig(phase=spec.phase), np.array([float(spec.batch)])
        for rule, kept in RULES.items():
            ev = AnalyticalPredictor().evaluate(arrays, device, config, batch, forward_outputs_kept=kept)
            out[rule].append(float(peak_tensor_bytes(arrays.graph, config, ev.activations_bytes)[0]))
    return {rule: np.array(v) for rule, v in out.items()}


def score(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """MAPE, the median predicted/measured ratio, and the MAPE once scaled by that ratio."""
    ratio = float(np.median(predicted / measured))
    return {
        "mape_pct": 100 * float(np.mean(np.abs(predicted - measured) / measured)),
        "median_ratio": ratio,
        "scaled_mape_pct": 100 * float(np.mean(np.abs(predicted / ratio - measured) / measured)),
    }


def groups(data) -> dict[str, np.ndarray]:
    phase = np.array([zoo.ModelSpec.from_key(k).phase for k in data.keys])
    training = phase == "training"
    return {
        "all rows": np.ones(len(phase), dtype=bool),
        "inference": ~training,
        "training": training,
        "LM training": training & np.isin(data.families, LM_FAMILIES),
    }


def report(slug: str, data, peaks: dict[str, np.ndarray]) -> list[str]:
    measured = data.y["peak_memory_bytes"]
    lines = [
        f"# Forward outputs kept or freed in a training step: {slug}",
        "",
        f"`python studies/logits_rule.py --device {slug}`; {len(measured)} rows. Analytical peak tensor "
        "bytes (the physics feature) against the measured peak. Ratio: median predicted/measured; scaled: "
        "the MAPE after dividing by that ratio. LM: " + ", ".join(LM_FAMILIES) + ".",
        "",
        "| rows | n | MAPE kept % | MAPE freed % | ratio kept | ratio freed | scaled kept % | scaled freed % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, mask in groups(data).items():
        if not mask.any():
            continue
        kept, freed = (score(peaks[r][mask], measured[mask]) for r in RULES)
        lines.append(
            f"| {name} | {int(mask.sum())} | {kept['mape_pct']:.1f} | {freed['mape_pct']:.1f} | "
            f"{kept['median_ratio']:.2f} | {freed['median_ratio']:.2f} | {kept['scaled_mape_pct']:.1f} | "
            f"{freed['scaled_mape_pct']:.1f} |"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", required=True, help="a dataset folder or its slug under data/")
    args = ap.parse_args()
    folder = dataset_folder(args.device)
    data = load_training_set([folder])
    lines = report(folder.name, data, predicted_peaks(data, device_for_rows(data.rows)))
    (RESULTS / f"logits_rule_{folder.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
