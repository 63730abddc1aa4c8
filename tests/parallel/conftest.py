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


@pytest.fixture(scope="session")
def big_training_graph():
    """A two-layer decoder with a 1B model's layers (hidden 2048, MLP 5632), bf16, 8 x 2048 tokens, on the meta
    device: large enough that matmuls, not launches, set the time."""
    import torch

    with torch.device("meta"):
        model = TinyDecoder(hidden=2048, heads=16, kv_heads=8, ffn=5632).to(torch.bfloat16)
    return capture(model, "training", shape=(8, 2048, 2048), device="meta", dtype=torch.bfloat16)
