"""vLLM 0.6's scheduler, step by step, with step costs that are simple functions (so the arithmetic is exact)."""

from __future__ import annotations

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.llm.host_costs import serial_host
from perfpredict.llm.paged_kv import KvPlan
from perfpredict.llm.scheduler import Scheduler
from perfpredict.llm.vllm_config import EngineConfig, ResolvedEngine

DECODE_S, DECODE_PER_SEQ_S, PREFILL_PER_TOKEN_S = 0.010, 0.001, 0.0001


class LinearCosts:
    """A decode step costs 10 ms + 1 ms per sequence; a prefill step 0.1 ms per token it computes."""

    def decode_s(self, seqs: int, context_sum: float, max_context: int) -> float:
        return DECODE_S + DECODE_PER_SEQ_S * seqs

    def prefill_s(self, chunks, decode_seqs: int = 0, decode_context_sum: float = 0.0) -> float:
        return PREFILL_PER_TOKEN_S * (sum(q for q, _ in chunks) + decode_seqs)


def kv(blocks: int, window: int | None = None) -> KvPlan:
    return KvPlan(80, 72, 10, 1, 1, block_bytes=1, block_size=16, blocks=blocks, window=window)


def engine(budget: int = 4096, chunked: bool = False, watermark: float = 0.0) -> ResolvedEngine:
    return ResolvedEngine(EngineConfig(watermark=watermark), 8192, chunked, budget, "flash_attn", "")


NO_HOST = serial_host(0.0, 0.0)


def run(batch, prompt, new, *, blocks=10_000, budget=4096, chunked=False, host=NO_HOST, window=None):
    return Scheduler(LinearCosts(), kv(blocks, window), engine(budget, chunked), host, workers=1).run(
        batch, prompt, new
    )


def test_with_room_for_everything_one_prefill_then_one_decode_step_per_token():
    t = run(4, 100, 10)
    assert (t.prefill_steps, t.decode_steps, t.preemptions) == (1, 9, 0)
    prefill = PREFILL_PER_TOKEN_S * 400  # 4 prompts of 100 tokens in one step
    decode = DECODE_S + DECODE_PER_SEQ_S * 4
    assert t.e2e_s == pytest.approx(prefill + 9 * decode)
    assert t.ttft_s == pytest.approx([prefill] * 4)
    assert t.tpot_s == pytest.approx([decode] * 4)
    assert all(s.generated == 10 for s in t.seqs)


def test_the_host_time_adds_per_step_and_per_sequence():
    t = run(4, 100, 10, host=serial_host(step_s=0.002, per_seq_s=0.0005))
    assert t.host_s == pytest.approx(10 * 0.002 + (4 + 9 * 4) * 0.0005)  # 10 steps, 40 sequence-steps
    assert t.e2e_s == pytest.approx(run(4, 100, 10).e2e_s + t.host_s)


def test_the_token_budget_admits_one_long_prompt_per_prefill_step_first_come_first_served():
    t = run(3, 3000, 4)  # 3,000 + 3,000 > 4,096: one prompt a step
    assert t.prefill_steps == 3
    one = PREFILL_PER_TOKEN_S * 3000
    assert t.ttft_s == pytest.approx([one, 2 * one, 3 * one])


def test_a_small_kv_pool_preempts_the_newest_and_recomputes_it():
    # blocks of 16 tokens: a 32-token prompt holds 2, 96 tokens (32 + 64 new) hold 6; 14 blocks hold 2 such
    # sequences, so 4 cannot all finish together
    ample, tight = run(4, 32, 64), run(4, 32, 64, blocks=14)
    assert ample.preemptions == 0 and tight.preemptions > 0
    assert all(s.generated == 64 for s in tight.seqs)  # every sequence ends with all its tokens
    assert tight.peak_blocks <= 14
    assert tight.e2e_s > ample.e2e_s
    assert tight.prefill_steps > 1  # the evicted ones are prefilled again (prompt plus what they had generated)


def test_chunked_prefill_splits_a_long_prompt_over_the_token_budget():
    t = run(1, 2048, 4, budget=512, chunked=True)
    assert (t.prefill_steps, t.decode_steps) == (4, 3)  # 2,048 tokens in chunks of 512, then 3 decode steps
    assert t.ttft_s == pytest.approx([4 * PREFILL_PER_TOKEN_S * 512])


def test_chunked_prefill_decodes_the_running_sequences_in_the_same_steps():
    t = run(2, 512, 3, budget=512, chunked=True)
    first, second = t.seqs
    assert first.first_token_s < second.first_token_s
    # step 1 prefills the first prompt; step 2 decodes it (1 token of the budget) beside 511 of the second prompt;
    # step 3 decodes it again (its last token) beside the second's last prompt token; then 2 decode-only steps
    assert t.prefill_steps == 3 and t.decode_steps == 2
    assert first.finish_s == pytest.approx(PREFILL_PER_TOKEN_S * (512 + 512 + 2))
    assert all(s.generated == 3 for s in t.seqs)


def test_a_sequence_the_pool_can_never_hold_is_refused():
    with pytest.raises(InvalidInputError, match="needs more KV blocks"):
        run(1, 1000, 10, blocks=10)


def test_a_sliding_window_caps_the_blocks_a_sequence_holds():
    plan = kv(100, window=64)
    assert plan.blocks_for(32) == 2 and plan.blocks_for(64) == 4 and plan.blocks_for(10_000) == 5
    assert plan.max_seqs_at(10_000) == 20
    t = run(2, 32, 200, blocks=10, window=64)  # 2 x 5 blocks: they never need more
    assert t.preemptions == 0 and all(s.generated == 200 for s in t.seqs)


def _engine_of(version, budget: int = 4096) -> ResolvedEngine:
    # chunked prefill as the version resolves it by default (TensorRT-LLM: off, its chunked context not enabled)
    return ResolvedEngine(EngineConfig(watermark=0.0), 8192, version.chunked_default == "always", budget,
                          "flash_attn", "", version=version)  # fmt: skip


def test_tensorrt_llm_reserves_a_requests_whole_length_and_mixes_whole_prompts_into_decode_steps():
    from perfpredict.llm.engine_versions import get_version

    trt = get_version("trtllm")
    # 14 blocks of 16 tokens; a request of 32 + 64 tokens reserves 6 at admission: two at a time, never preempted
    t = Scheduler(LinearCosts(), kv(14), _engine_of(trt, budget=100), NO_HOST, workers=1).run(4, 32, 64)
    assert t.preemptions == 0 and t.peak_blocks == 12 and all(s.generated == 64 for s in t.seqs)
    assert sorted(t.ttft_s)[2] > sorted(t.ttft_s)[1]  # the third waits for the first two to finish
    # mixed batching: a prompt joins a step only whole (100-token budget: three 32-token prompts, not a fourth chunk)
    m = Scheduler(LinearCosts(), kv(10_000), _engine_of(trt, budget=100), NO_HOST, workers=1).run(4, 32, 4)
    assert m.ttft_s[:3] == pytest.approx([PREFILL_PER_TOKEN_S * 96] * 3)


def test_host_work_beside_the_gpu_hides_behind_the_step_and_only_its_excess_is_exposed():
    from perfpredict.llm.host_costs import HostCost, HostPhase

    beside = HostCost((HostPhase("outputs", "beside_gpu", per_seq_s=0.001),))  # 1 ms per sequence, overlapped
    t = run(4, 100, 10, host=beside)
    decode = DECODE_S + DECODE_PER_SEQ_S * 4  # 14 ms of GPU against 4 ms of output processing: hidden
    assert t.host_s == pytest.approx(0.0) and t.e2e_s == pytest.approx(run(4, 100, 10).e2e_s)
    assert t.decode_gpu_s == pytest.approx(9 * decode)
    slow = HostCost((HostPhase("outputs", "beside_gpu", per_seq_s=0.005),))  # 20 ms > 14 ms: 6 ms exposed a step
    assert run(4, 100, 10, host=slow).decode_s == pytest.approx(9 * 4 * 0.005)
