"""docs/examples/nas_search.py, the NAS page's search loop, runs and keeps to its budget."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
_PATH = Path(__file__).resolve().parents[2] / "docs" / "examples" / "nas_search.py"
_spec = importlib.util.spec_from_file_location("nas_search", _PATH)
nas_search = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nas_search)


def test_the_search_loop_finds_a_candidate_under_the_budget():
    choices, latency_ms = nas_search.search(generations=1, population=12)
    assert len(choices) == 22 and 0 < latency_ms <= nas_search.BUDGET_MS
