import json
from types import SimpleNamespace

import numpy as np
import pytest

from perfpredict.learning.conformal import SOURCE, conformal_band, save_calibration


def _rows(n_groups=200, per_group=5, sigma=0.3, seed=0):
    rng = np.random.default_rng(seed)
    groups = [f"arch{g}" for g in range(n_groups) for _ in range(per_group)]
    true = np.exp(rng.normal(0.0, 1.0, len(groups)))
    pred = true * np.exp(rng.normal(0.0, sigma, len(groups)))
    return pred, true, groups


def test_band_holds_its_level_on_the_held_out_half():
    pred, true, groups = _rows()
    band, coverage = conformal_band(pred, true, groups, level=0.8)
    # |N(0, 0.3)| has its 80% quantile at 1.2816 * 0.3
    assert band == pytest.approx(np.exp(1.2816 * 0.3), rel=0.05)
    assert coverage == pytest.approx(0.8, abs=0.04)


def test_a_wider_level_gives_a_wider_band_and_the_split_is_seeded():
    pred, true, groups = _rows()
    assert conformal_band(pred, true, groups, 0.9)[0] > conformal_band(pred, true, groups, 0.8)[0]
    assert conformal_band(pred, true, groups) == conformal_band(pred, true, groups)


def test_save_writes_the_kind_entry_and_the_dispatch_scales(tmp_path):
    calibration, reference = tmp_path / "calibration.json", tmp_path / "reference.json"
    calibration.write_text(json.dumps({"gpu": {"interval_factor": 9.0, "kept": 1}}))
    reference.write_text(json.dumps({"dispatch_scale": {"gpu": 11.0, "cpu": 6.0}}))
    cpu = SimpleNamespace(kind="cpu")
    save_calibration(cpu, 1.7654, 0.81234, 120, "cpu-x", (5.5, 1.25, 7.0), calibration, reference)
    saved = json.loads(calibration.read_text())
    assert saved["gpu"] == {"interval_factor": 9.0, "kept": 1}  # the other kind is left as it was
    assert saved["cpu"] == {
        "level": 0.8,
        "interval_factor": 1.765,
        "held_out_coverage": 0.812,
        "rows": 120,
        "rows_device": "cpu-x",
        "source": SOURCE,
        "device_time_scale": 1.25,
    }
    assert json.loads(reference.read_text())["dispatch_scale"] == {"gpu": 11.0, "cpu": 5.5, "cpu_training": 7.0}
    # without fitted scales only the band changes
    save_calibration(SimpleNamespace(kind="gpu"), 2.0, 0.75, 10, "h100", None, calibration, reference)
    assert json.loads(calibration.read_text())["gpu"]["interval_factor"] == 2.0
    assert json.loads(reference.read_text())["dispatch_scale"]["gpu"] == 11.0
