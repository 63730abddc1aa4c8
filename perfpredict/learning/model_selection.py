"""Choosing among candidate models scored on the same inner folds: the simplest within one standard error of the best.

Why not simply the lowest score: on three inner folds two formulations often differ by less than the folds' own
noise. The CPU's peak-memory model flipped from residual (inner MAPE 17.30%) to direct (17.33%) from one feature
schema to the next, and the held-out MAPE moved by 1.5 points with it. A difference smaller than its standard
error is a coin toss, so the tie goes to the simpler, physics-anchored candidate, which extrapolates better to
families it never saw.

The standard error is clustered by architecture: the rows of one architecture (a batch sweep) share most of their
error, so treating them as independent would make every difference look significant. It counts the spread over
rows only, not the variance of fitting one model per fold; with three folds that is the part one can estimate.
A candidate whose mean error is not finite (NaN predictions) is never chosen.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def clustered_standard_error(diff: np.ndarray, groups: np.ndarray) -> float:
    """Standard error of ``diff.mean()`` when rows of one group are correlated (the cluster-robust sandwich form)."""
    diff = np.asarray(diff, dtype=float)
    _, inverse = np.unique(groups, return_inverse=True)
    sums = np.bincount(inverse, weights=diff - diff.mean())
    n_groups = len(sums)
    if n_groups < 2:
        return 0.0
    return float(np.sqrt(n_groups / (n_groups - 1) * np.sum(sums**2)) / len(diff))


def simplest_within_one_se(errors: Sequence[np.ndarray], groups: np.ndarray) -> int:
    """Index of the first candidate whose mean error is within one clustered standard error of the best one's.

    ``errors`` holds each candidate's per-row errors on the same rows (lower is better), simplest candidate first.
    """
    lengths = {len(e) for e in errors}
    if len(lengths) != 1 or len(groups) not in lengths:
        raise ValueError(
            f"every candidate needs one error per row; got lengths {sorted(lengths)} for {len(groups)} group ids"
        )
    means = np.array([float(np.mean(e)) for e in errors])
    if not np.isfinite(means).any():
        raise ValueError("no candidate has a finite mean error; check the targets and the analytical predictions")
    best = int(np.argmin(np.where(np.isfinite(means), means, np.inf)))
    for index in range(best):
        if not np.isfinite(means[index]):
            continue
        diff = np.asarray(errors[index]) - np.asarray(errors[best])
        if diff.mean() <= clustered_standard_error(diff, groups):
            return index
    return best
