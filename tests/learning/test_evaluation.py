"""Held-out splits and metrics of the accuracy benchmark, and the dataset's batch-sweep noise check."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from perfpredict.learning.evaluation import family_folds, metrics, random_folds, random_row_folds
from perfpredict.profiling.dataset import batch_sweep_inversions, neighbour_oracle_mape, sweep_bumps


@pytest.fixture
def data():
    """Twelve architectures in three families, each swept over four batch sizes."""
    keys, groups, families = [], [], []
    for arch in range(12):
        for batch in (1, 2, 4, 8):
            keys.append(json.dumps({"arch": arch, "batch": batch}))
            groups.append(arch)
            families.append(f"family{arch % 3}")
    return SimpleNamespace(keys=keys, group_ids=np.array(groups), families=np.array(families))


def _is_partition(folds: list[np.ndarray], n: int) -> bool:
    return np.array_equal(np.sum(folds, axis=0), np.ones(n))


def test_random_folds_keep_each_architecture_in_one_fold(data):
    folds = random_folds(data, 5, seed=3)
    assert len(folds) == 5 and _is_partition(folds, len(data.keys))
    for fold in folds:
        inside = set(data.group_ids[fold].tolist())
        assert not inside & set(data.group_ids[~fold].tolist())


def test_random_row_folds_are_the_research_protocol_and_split_sweeps(data):
    folds = random_row_folds(data, 5, seed=3)
    assert len(folds) == 5 and _is_partition(folds, len(data.keys))
    assert max(f.sum() for f in folds) - min(f.sum() for f in folds) <= 1
    # Rows of one architecture land in different folds: the model may see a sweep's other batch sizes.
    assert any(set(data.group_ids[f].tolist()) & set(data.group_ids[~f].tolist()) for f in folds)
    assert [f.tolist() for f in folds] == [f.tolist() for f in random_row_folds(data, 5, seed=3)]


def test_family_folds_hold_out_one_family_each(data):
    folds = family_folds(data)
    assert [name for name, _ in folds] == ["family0", "family1", "family2"]
    for name, mask in folds:
        assert set(data.families[mask].tolist()) == {name}


def test_metrics_on_known_errors():
    y = np.array([10.0, 20.0, 40.0, 80.0])
    p = np.array([11.0, 18.0, 40.0, 120.0])  # +10%, -10%, 0%, +50%
    m = metrics(y, p)
    assert m["mape"] == pytest.approx(17.5)
    assert m["acc10"] == pytest.approx(75.0)
    assert m["kendall_tau"] == pytest.approx(1.0)
    assert m["rmse"] == pytest.approx(np.sqrt((1 + 4 + 0 + 1600) / 4))


def _row(arch: str, batch: int, latency_ms: float, phase: str = "inference") -> dict:
    return {
        "status": "ok",
        "device": "cpu",
        "arch_key": arch,
        "phase": phase,
        "seq_len": 128,
        "dtype": "float32",
        "batch_size": batch,
        "latency_ms": latency_ms,
    }


def test_batch_sweep_inversions_count_a_larger_batch_that_ran_faster():
    rows = [
        _row("a", 1, 10.0),
        _row("a", 2, 18.0),
        _row("a", 4, 35.0),  # monotone
        _row("b", 1, 10.0),
        _row("b", 2, 9.5),
        _row("b", 4, 20.0),  # flat within 10%: not counted
        _row("c", 1, 10.0),
        _row("c", 2, 20.0),
        _row("c", 4, 12.0),  # 4 is 40% faster than 2
        _row("c", 1, 99.0, phase="training"),  # a sweep of one row
        {**_row("d", 1, 1.0), "status": "oom"},
        _row("d", 2, 0.5),
    ]  # failures are not measurements
    assert batch_sweep_inversions(rows) == (1, 3)
    assert batch_sweep_inversions(rows, drop=0.01) == (2, 3)


def test_sweep_bumps_are_one_on_an_affine_sweep_and_name_the_bumped_batch():
    assert sweep_bumps({1: 3.0, 2: 5.0, 4: 9.0, 8: 17.0}) == pytest.approx({2: 1.0, 4: 1.0})  # 1 ms + 2 ms/sample
    bumps = sweep_bumps({1: 3.0, 2: 5.0, 4: 13.5, 8: 17.0})  # batch 4 measured 1.5x slow
    assert bumps[4] == pytest.approx(13.5 / 9.0)
    assert bumps[2] == pytest.approx(5.0 / (3.0 + (13.5 - 3.0) / 3))  # its neighbour's prediction moves too
    assert sweep_bumps({1: 3.0, 2: 5.0}) == {}  # no interior point


def test_neighbour_oracle_scores_only_interior_rows_of_ok_sweeps():
    rows = [
        _row("a", 1, 3.0),
        _row("a", 2, 5.0),
        _row("a", 4, 9.0),  # affine: 0% error
        _row("b", 1, 10.0),
        _row("b", 2, 22.0),
        _row("b", 4, 30.0),  # predicted 16.67 for 22: 24.2% off
        _row("c", 1, 1.0),
        _row("c", 2, 2.0),  # no interior row
        {**_row("a", 8, 1.0), "status": "oom"},
    ]  # failures are not measurements
    mape, n = neighbour_oracle_mape(rows)
    assert n == 2
    assert mape == pytest.approx(100 * (0 + abs(50 / 3 / 22 - 1)) / 2)
