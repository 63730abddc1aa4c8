"""``benchmarks/vllm_posts.py``: the posts' figures read from their text, and every one scored, the two TPOT ratios
measured at 32 requests/s through the serving simulation (they had been refused as needing one)."""

from __future__ import annotations

import pytest

from benchmarks import vllm_posts

# a made-up post in the real one's phrasing (the posts are never shipped: their repository has no license)
PERF = (
    "**TL;DR:** vLLM achieves 3.0x higher throughput and 4.0x faster TPOT (time per output token) on Llama 8B "
    "model, and 1.5x higher throughput and 2.5x less TPOT on Llama 70B model."
)


def test_the_tpot_ratios_at_32_qps_are_read_and_scored_not_refused():
    published = vllm_posts.figures(PERF, "")
    assert published == {"throughput_8b": 3.0, "tpot_8b": 4.0, "throughput_70b": 1.5, "tpot_70b": 2.5}
    ours = {name: (2.0, "how") for name in vllm_posts.LABELS}
    lines, errors = vllm_posts.score(published, ours)
    # 2.0 against 3.0, 4.0, 1.5, 2.5: -33%, -50%, +33%, -20%; the five figures the post lacks are not found
    assert errors == pytest.approx([100 / 3, 50.0, 100 / 3, 20.0])
    tpot_8b = next(line for line in lines if line.startswith(f"| {vllm_posts.LABELS['tpot_8b']} |"))
    assert "| 2 | -50% |" in tpot_8b and "refused" not in "".join(lines)
    assert sum("not found in the post's text" in line for line in lines) == 5


def test_a_tpot_ratio_is_the_serving_simulations_v05_over_v06_with_ten_scheduler_steps(tmp_path):
    import json

    from tiny_llm import TINY_LLAMA

    from perfpredict.llm.serving import predict_serving

    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    tiny_llama = str(tmp_path)

    ask = dict(device="H100-SXM", frontend="openai-server", rate_per_s=32.0, arrival="poisson", num_requests=40,
               lengths="fixed", prompt_tokens=64, new_tokens=16, seed=0)  # fmt: skip
    old = predict_serving(tiny_llama, engine_version="0.5", **ask)
    new = predict_serving(tiny_llama, engine_version="0.6", scheduler_steps=10, **ask)
    ratio = vllm_posts.stream_tpot_ratio(tiny_llama, 1, rate_per_s=32.0, lengths=(40, 64, 16))
    assert ratio == pytest.approx(old.tpot.mean_ms / new.tpot.mean_ms) and ratio > 1  # 0.6 is the faster
