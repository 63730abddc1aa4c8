"""The two-timeline model's 80% interval: a split-conformal multiplicative band, and where it is stored.

Half the architectures (a seeded draw, so reruns agree) calibrate: the band is the ``level`` quantile of their
absolute log errors, so ``[pred / band, pred * band]`` holds ``level`` of them. The other half scores it (the
held-out coverage). Splitting by architecture keeps a batch sweep's near-identical rows on one side, or coverage
would be flattered. ``save_calibration`` writes the band (and the fitted scales, where given) into the package
data the two-timeline predictor reads: ``two_timeline_calibration.json`` and the reference host profile.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

LEVEL = 0.8
SOURCE = "benchmarks/timeline_accuracy.py --save (split conformal by architecture)"


def conformal_band(
    pred: np.ndarray, true: np.ndarray, groups: Sequence[str], level: float = LEVEL, seed: int = 0
) -> tuple[float, float]:
    """(multiplicative half-width fitted on the calibration half of the groups, coverage on the other half)."""
    keys = sorted(set(groups))
    rng = np.random.default_rng(seed)
    cal = set(rng.choice(keys, len(keys) // 2, replace=False))
    mask = np.array([g in cal for g in groups])
    resid = np.abs(np.log(np.asarray(true) / np.asarray(pred)))
    width = float(np.quantile(resid[mask], level))
    return float(np.exp(width)), float((resid[~mask] <= width).mean())


def save_calibration(
    device: Any,
    band: float,
    coverage: float,
    rows: int,
    label: str,
    scales: tuple[float, ...] | None,
    calibration: Path | None = None,
    reference: Path | None = None,
) -> None:
    """The band (and, when fitted, the device-time scale) into the calibration file for the device's kind; the
    dispatch scales (``scales``: dispatch, device time, training steps' dispatch) into the reference host profile.
    ``calibration`` and ``reference`` default to the package's own files."""
    from perfpredict.predictors import host_model
    from perfpredict.predictors.two_timeline import CALIBRATION

    calibration = calibration or CALIBRATION
    reference = reference or host_model.REFERENCE
    kind = "gpu" if device.kind == "gpu" else "cpu"
    data = json.loads(calibration.read_text()) if calibration.exists() else {}
    entry = data.get(kind, {})
    entry.update(
        {
            "level": LEVEL,
            "interval_factor": round(band, 3),
            "held_out_coverage": round(coverage, 3),
            "rows": rows,
            "rows_device": label,
            "source": SOURCE,
        }
    )
    if scales is not None:
        entry["device_time_scale"] = round(scales[1], 3)
        profile = json.loads(reference.read_text())
        profile["dispatch_scale"][kind] = round(scales[0], 3)
        if kind == "cpu":  # a CPU's training steps are fitted apart (host_model.dispatch_scale)
            profile["dispatch_scale"]["cpu_training"] = round(scales[2], 3)
        reference.write_text(json.dumps(profile, indent=2, sort_keys=True) + "\n")
    data[kind] = entry
    calibration.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
