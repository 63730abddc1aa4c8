"""Intervals that bracket their point: ``low < value < high``, never degenerate at one end.

An interval can fail to bracket its point in two ways, and both happened:

- the analytical roofline's low end is the pure roofline at 100% of peak, which *is* the point where an op is
  launch-bound (a small CNN's Relax report read [0.048 ms, 0.077 ms] around 0.048 ms);
- separately trained quantile models cross (xgboost's q50 above its q90), and clipping the band to the point left
  that end on the point.

:func:`bracket` repairs an end that does not lie beyond its point by mirroring the other end in log space (the
band's own width, on the side it lost), and gives a band with no width at all :data:`MIN_RATIO` on each side. An
interval that already brackets its point is returned unchanged. Every report passes its predictions through it
(``assemble.build_report``), whichever predictor made them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from perfpredict.core.report import Prediction

#: the band given to a point whose interval has no width at all: x/1.1 to x*1.1, about the run-to-run variation of
#: a measured latency (9-11%, README), so no interval claims more certainty than a measurement has
MIN_RATIO = 1.1


def bracket(value, low, high):
    """(low, high) arrays (or floats) with ``low < value < high`` wherever ``value > 0``; see the module."""
    v, lo, hi = (np.asarray(a, dtype=float) for a in (value, low, high))
    positive = v > 0
    safe = np.where(positive, v, 1.0)
    lo_ok = positive & (lo < v) & (lo > 0)
    hi_ok = positive & (hi > v)
    up = np.where(hi_ok, hi / safe, np.where(lo_ok, safe / np.where(lo_ok, lo, 1.0), MIN_RATIO))
    down = np.where(lo_ok, safe / np.where(lo_ok, lo, 1.0), up)
    new_lo = np.where(positive, np.where(lo_ok, lo, v / down), lo)
    new_hi = np.where(positive, np.where(hi_ok, hi, v * up), hi)
    if np.ndim(value) == 0:
        return float(new_lo), float(new_hi)
    return new_lo, new_hi


def bracketed(p: Prediction) -> Prediction:
    """``p`` with an interval that brackets its value (:func:`bracket`)."""
    low, high = bracket(p.value, p.low, p.high)
    return p if (low, high) == (p.low, p.high) else replace(p, low=low, high=high)
