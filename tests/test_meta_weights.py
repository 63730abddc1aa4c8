"""A module built on the meta device has no weights to copy: ``weights_built_in="auto"`` costs its weights as loaded
straight in the run dtype (no float32 copy at load), in ``predict`` and ``predict_many`` alike; a module with real
weights still peaks at its float32 size while ``Model(config).to(dtype)`` casts them."""

from __future__ import annotations

import pytest
import torch

import perfpredict

# four Linear(1024, 1024): 4 x (1024 x 1024 + 1024) = 4,198,400 parameters
PARAMS = 4 * (1024 * 1024 + 1024)
RUNTIME = 512 * 2**20  # the L4's framework and context memory (0.50 GiB)


def _mlp(device: str):
    with torch.device(device):
        model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)])
    return model, torch.empty(1, 1024, device=device)


@pytest.fixture(scope="module")
def meta():
    return _mlp("meta")


def test_a_meta_model_loads_in_the_run_dtype(meta):
    report = perfpredict.predict(*meta, device="L4", dtype="bfloat16")
    m = report.memory
    assert m.params_bytes == PARAMS * 2  # 8,396,800 bytes in bfloat16
    assert m.load_transient_bytes == 0  # was 10,489,856: the float32 copy (2 x 8,396,800) + one weight, less the step
    # batch 1: the weights, the activations (two of 1 x 1024 in bfloat16 alive at once, plus the input) and the runtime
    assert report.peak_memory_bytes.value == PARAMS * 2 + m.activations_peak_bytes + RUNTIME
    assert report.assumptions["weights"].startswith("loaded in bfloat16")


def test_a_model_with_weights_still_peaks_at_its_float32_size_while_cast():
    report = perfpredict.predict(*_mlp("cpu"), device="L4", dtype="bfloat16")
    # load: 4,198,400 x 4 bytes (float32) + the largest weight's bfloat16 copy (1,049,600 x 2) = 18,892,800 bytes,
    # over the step's 8,396,800 + 6,144 activation bytes
    assert report.memory.load_transient_bytes == PARAMS * 4 + 1_049_600 * 2 - (PARAMS * 2 + 6_144)
    assert report.assumptions["weights"].startswith("built in float32, then cast")


def test_predict_many_of_a_meta_model_grows_with_the_batch(meta):
    """It was flat from batch 1 to 32: the float32 copy (10.5 MB over the step) hid the activations."""
    model, x = meta
    cols = perfpredict.predict_many(model, (x,), [{"device": "L4", "batch_size": b} for b in (1, 32)], dtype="bfloat16")
    one = perfpredict.predict(model, (x,), device="L4", dtype="bfloat16").memory
    assert cols["peak_memory_bytes"][0] == PARAMS * 2 + one.activations_peak_bytes + RUNTIME
    assert cols["peak_memory_bytes"][1] > cols["peak_memory_bytes"][0]
