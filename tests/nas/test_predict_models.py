"""predict_models: one row per (model, device, batch), the same figures as predict, and reused blocks that change
nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import perfpredict
from perfpredict.compiler_hooks.block_reuse import BlockCache
from perfpredict.compiler_hooks.capture import capture_graph
from perfpredict.core.errors import FrontendError, InvalidInputError
from perfpredict.nas import adapt, fbnet

SPACE = [[0] * 22, [7, 8, 1, 8, 4, 8, 8, 8, 7, 4, 1, 4, 7, 3, 2, 7, 3, 2, 4, 2, 4, 5], [3, 5] * 11]


def _candidates():
    return (fbnet.build(c, device="meta") for c in SPACE)  # a generator: consumed one candidate at a time


def test_rows_are_model_then_device_then_batch_and_agree_with_predict():
    cols = perfpredict.predict_models(
        _candidates(), (fbnet.example_input(4),), device=["T4", "A100-40GB"], batch_sizes=[1, 16]
    )
    assert cols["model"].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert cols["device"].tolist()[:4] == ["T4", "T4", "A100-40GB", "A100-40GB"]
    assert cols["batch_size"].tolist()[:4] == [1, 16, 1, 16]
    for row in (1, 7, 10):  # T4 batch 16 of the first; A100 batch 16 of the second; A100 batch 1 of the third
        model = fbnet.build(SPACE[cols["model"][row]], device="meta")
        b = int(cols["batch_size"][row])
        report = perfpredict.predict(model, (fbnet.example_input(b),), device=cols["device"][row])
        assert cols["latency_ms"][row] == pytest.approx(report.latency_ms.value, rel=1e-9)
        assert cols["peak_memory_bytes"][row] == pytest.approx(report.peak_memory_bytes.value, rel=1e-9)
        assert cols["flops"][row] == pytest.approx(perfpredict.featurize(model, (fbnet.example_input(b),)).total_flops)
    first = fbnet.build(SPACE[0], device="meta")  # parameters and the BatchNorm buffers the forward reads
    weights = sum(p.numel() for p in first.parameters()) + sum(
        b.numel() for n, b in first.named_buffers() if "running" in n
    )
    assert (cols["params"][:4] == weights).all()


def test_reused_blocks_give_the_graph_a_fresh_trace_gives():
    cache = BlockCache()
    x = fbnet.example_input(8)
    rng = np.random.default_rng(0)
    for choices in [rng.integers(0, 9, 22).tolist() for _ in range(12)]:
        cache.next_candidate()
        model = fbnet.build(choices, device="meta")
        reused = capture_graph(model, (x,), {}, phase="inference", dtype=None, name="m", reuse=cache)
        fresh = capture_graph(model, (x,), {}, phase="inference", dtype=None, name="m")
        assert reused.nodes == tuple(
            n.__class__(**{**n.__dict__, "name": r.name}) for n, r in zip(fresh.nodes, reused.nodes)
        )
        assert (reused.edges, reused.keep_alive, reused.param_count) == (
            fresh.edges,
            fresh.keep_alive,
            fresh.param_count,
        )
    assert cache.hits > 100  # 12 candidates of 22 layers: most layers were seen before


def test_with_and_without_reuse_the_columns_are_the_same():
    x = (fbnet.example_input(2),)
    on = perfpredict.predict_models(_candidates(), x, device="L4", batch_sizes=[1, 64])
    off = perfpredict.predict_models(_candidates(), x, device="L4", batch_sizes=[1, 64], reuse=False)
    for column in ("latency_ms", "peak_memory_bytes", "flops", "energy_j"):
        np.testing.assert_array_equal(on[column], off[column])


class _ReadsValues(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum().item() > 0 else x


def test_a_failing_candidate_raises_with_its_position_or_is_skipped():
    models = [nn.Linear(4, 4), _ReadsValues(), nn.Linear(4, 2)]
    with pytest.raises(FrontendError, match="candidate 1: item"):
        perfpredict.predict_models(models, (torch.randn(3, 4),), device="T4")
    cols = perfpredict.predict_models(models, (torch.randn(3, 4),), device="T4", on_error="skip")
    assert np.isnan(cols["latency_ms"][1]) and not np.isnan(cols["latency_ms"][[0, 2]]).any()
    assert list(cols.errors) == [1] and "item()" in cols.errors[1]


def test_inputs_per_model_and_a_frame():
    models = [nn.Linear(4, 8), nn.Linear(16, 8)]
    frame = perfpredict.predict_models(
        models, lambda m: (torch.empty(5, m.in_features, device="meta"),), device="T4", frame=True
    )
    assert list(frame["batch_size"]) == [5, 5] and list(frame["flops"]) == [2 * 5 * 4 * 8, 2 * 5 * 16 * 8]


def test_an_adapted_model_replaces_the_zero_shot_latency_on_its_device():
    x = (fbnet.example_input(32),)
    zero = perfpredict.predict_models(_candidates(), x, device=["T4", "L4"])
    same = perfpredict.predict_models(_candidates(), x, device=["T4", "L4"], adapted=adapt.zero_shot("T4"))
    np.testing.assert_allclose(same["latency_ms"], zero["latency_ms"], rtol=1e-12)
    slower = adapt.AdaptedLatency(device="T4", host_scale=2.0, queue_depth=1, offset_ms=1.0)
    moved = perfpredict.predict_models(_candidates(), x, device=["T4", "L4"], adapted=slower)
    t4 = moved["device"] == "T4"
    assert (moved["latency_ms"][t4] > zero["latency_ms"][t4] + 1.0).all()
    np.testing.assert_array_equal(moved["latency_ms"][~t4], zero["latency_ms"][~t4])
    np.testing.assert_allclose(moved["energy_j"][t4], moved["avg_power_w"][t4] * moved["latency_ms"][t4] / 1e3)
    with pytest.raises(InvalidInputError, match="device="):
        perfpredict.predict_models(_candidates(), x, device="L4", adapted=slower)
    with pytest.raises(InvalidInputError, match="eager inference"):
        perfpredict.predict_models(_candidates(), x, device="T4", adapted=slower, mode="cuda_graph")
