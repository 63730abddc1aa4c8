"""A GPU's power at its real utilisation: an idle floor, plus its kernels' activity for the share of time they run."""

from __future__ import annotations

import pytest

from perfpredict.hardware.devices import get_device
from perfpredict.hardware.power_draw import gpu_power_w, mean_activity


def test_power_is_the_idle_floor_plus_activity_for_the_busy_share():
    a100 = get_device("A100-40GB")  # idle 50 W, TDP 400 W
    assert gpu_power_w(a100, 1.0, 1.0) == pytest.approx(400.0)
    assert gpu_power_w(a100, 0.0, 1.0) == pytest.approx(50.0)
    # busy 40% of the time at activity 0.5 (a decode step streaming weights at ~70% of the bandwidth, weighted 0.7)
    assert gpu_power_w(a100, 0.4, 0.5) == pytest.approx(50 + 350 * 0.4 * 0.5)  # 120 W
    assert gpu_power_w(a100, 1.7, -0.2) == pytest.approx(50.0)  # clipped into [0, 1]
    # 3 s of decode at 0.5 and 1 s of collectives at 0.1: (1.5 + 0.1) / 4
    assert mean_activity([(3.0, 0.5), (1.0, 0.1)]) == pytest.approx(0.4)


def test_a_host_bound_engine_draws_less_per_gpu_than_a_gpu_bound_one():
    from perfpredict.llm.generation_options import EngineOptions
    from perfpredict.llm.vllm_engine import predict_vllm

    def run(version: str):
        opts = EngineOptions(engine="vllm", version=version, frontend="openai-server")
        return predict_vllm("Qwen/Qwen2-0.5B", prompt_tokens=128, new_tokens=64, batch=64, device="H100-SXM",
                            sweep=False, options=opts)  # fmt: skip

    v05, v10 = run("0.5"), run("0.10")
    h100 = get_device("H100-SXM")
    for r in (v05, v10):
        assert h100.idle_power_w < r.power_per_gpu_w < h100.tdp_w
        assert 0 < r.gpu_busy_fraction < 1
        # energy per token is the power over the run's time, per token
        assert r.energy_per_token_j == pytest.approx(r.power_per_gpu_w * r.e2e_ms / 1e3 / (64 * 64), rel=1e-6)
    # vLLM 0.5 schedules in turn with a 0.5B model's short steps: the GPU idles most of the time
    assert v05.gpu_busy_fraction < v10.gpu_busy_fraction and v05.power_per_gpu_w < v10.power_per_gpu_w
