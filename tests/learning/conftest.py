"""The learning tests' shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def synthetic_traced():
    """tests/synthetic_graphs.py's traced set (real graphs, SYNTHETIC targets), captured once for every learning test
    module (20 captures, seconds). Learners and tests take subsets, which copy, so no test changes it for another."""
    from synthetic_graphs import traced_set

    return traced_set()
