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
