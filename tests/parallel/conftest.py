"""Fixtures for the parallel tests: graphs captured from the plain-torch decoder of ``parallel_models``."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from parallel_models import TinyDecoder, capture


@pytest.fixture(scope="module")
def decoder_graphs():
    """(training graph, inference graph) of a two-layer TinyDecoder."""
    import torch

    torch.manual_seed(0)
    model = TinyDecoder()
    return capture(model, "training"), capture(model, "inference")
