"""Shared fixtures. Tests run on a CPU-only machine; GPU tests are marked and skipped there."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from scratch, so one test's cached graphs never satisfy another's."""
    import torch

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
