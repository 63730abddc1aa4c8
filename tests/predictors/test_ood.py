import numpy as np
import pytest

from perfpredict.predictors.ood import nearest_distance


def _brute(query, reference, exclude_self=False):
    d = np.linalg.norm(query[:, None, :] - reference[None, :, :], axis=2)
    if exclude_self:
        np.fill_diagonal(d, np.inf)
    return d.min(axis=1)


@pytest.mark.parametrize("exclude_self", [False, True])
def test_matches_brute_force(exclude_self):
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(60, 7))
    query = reference if exclude_self else rng.normal(size=(25, 7))
    np.testing.assert_allclose(nearest_distance(query, reference, exclude_self), _brute(query, reference, exclude_self))


def test_a_duplicate_row_is_its_own_neighbour_at_zero():
    reference = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 4.0]])
    np.testing.assert_allclose(nearest_distance(reference, reference, exclude_self=True), [0.0, 0.0, 5.0])


def test_a_lone_row_has_no_other_neighbour():
    assert nearest_distance(np.ones((1, 3)), np.ones((1, 3)), exclude_self=True)[0] == np.inf


@pytest.mark.parametrize("artifact", ["xgboost-cpu", "xgboost-h100-sxm"])
def test_the_shipped_ood_references_are_standardised_rows(artifact):
    """Each reference row is a training row scaled by the artifact's mean and std, so every feature column that
    varies has mean 0 and std 1 (but for a
    few near-constant ones). (Both files were once written from a Fortran-ordered buffer and read back
    scrambled: columns of about 0.9 std, and every training row far from its own reference.)"""
    from pathlib import Path

    from safetensors.numpy import load

    folder = Path(__file__).resolve().parents[2] / "perfpredict" / "predictors" / "artifacts" / artifact
    reference = load((folder / "ood.safetensors").read_bytes())["reference"]
    std = reference.std(axis=0)
    varying = std > 1e-6
    assert varying.sum() > 20
    # a few near-constant columns keep the std floor's scale; the scrambled files had none at 1
    assert np.mean(np.abs(std[varying] - 1.0) < 1e-3) > 0.9
    assert np.mean(np.abs(reference.mean(axis=0)[varying]) < 1e-3) > 0.9
