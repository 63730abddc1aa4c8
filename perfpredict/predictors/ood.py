"""How far a row is from the training data: the Euclidean distance to its nearest training row.

Every learned predictor reports this (scaled by the training rows' own median nearest-neighbour distance) as the
out-of-distribution score of a prediction. scipy's k-d tree answers it; a row of the reference itself is left out
with ``exclude_self`` (its second-nearest neighbour), which is what the training rows' own scale needs.
"""

from __future__ import annotations

import numpy as np


def nearest_distance(query: np.ndarray, reference: np.ndarray, exclude_self: bool = False) -> np.ndarray:
    """Distance from each row of ``query`` to its nearest row of ``reference``; with ``exclude_self`` (``query``
    is ``reference``) to its nearest other row, ``inf`` where there is none."""
    from scipy.spatial import cKDTree

    query = np.asarray(query, dtype=np.float64)
    if not len(query):
        return np.zeros(0)
    tree = cKDTree(np.asarray(reference, dtype=np.float64))
    if exclude_self:
        distance, _ = tree.query(query, k=2)
        return distance[:, 1]
    distance, _ = tree.query(query, k=1)
    return np.asarray(distance, dtype=np.float64)
