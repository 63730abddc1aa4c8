"""The serving simulation over time, with step costs that are simple functions (so the arithmetic is exact):
admission under the KV limit, preemption, chunked prefill, arrivals, prefix caching and speculative decoding."""

from __future__ import annotations

import numpy as np
import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.llm.host_costs import HostCost, serial_host
from perfpredict.llm.paged_kv import KvPlan
from perfpredict.llm.request_stream import Requests
from perfpredict.llm.scheduler import Scheduler
from perfpredict.llm.serving_sim import SimEngine, Simulator
from perfpredict.llm.step_time import SpeculativeStepTime
from perfpredict.llm.vllm_config import EngineConfig, ResolvedEngine

DECODE_S, DECODE_PER_SEQ_S, PREFILL_PER_TOKEN_S = 0.010, 0.001, 0.0001


class LinearCosts:
    """A decode step costs 10 ms + 1 ms per sequence; a prefill step 0.1 ms per token it computes (the batch
    scheduler's test costs)."""

    def decode_s(self, seqs: int, context_sum: float, max_context: int) -> float:
        return DECODE_S + DECODE_PER_SEQ_S * seqs

    def prefill_s(self, chunks, decode_seqs: int = 0, decode_context_sum: float = 0.0) -> float:
        return PREFILL_PER_TOKEN_S * (sum(q for q, _ in chunks) + decode_seqs)


class LinearStep(LinearCosts):
    """The same costs through the simulation's seam, with the host's serial ``HostCost`` added in turn."""

    capture_len = None

    def __init__(self, host: HostCost | None = None) -> None:
        self.host = host or serial_host(0.0, 0.0)

    def mixed_s(self, chunks, decode_seqs: int = 0, decode_context_sum: float = 0.0) -> float:
        return self.prefill_s(chunks, decode_seqs, decode_context_sum)

    def wall_s(self, gpu_s, seqs, prefill_tokens, output_tokens, new_requests) -> float:
        return gpu_s + self.host.step(seqs, prefill_tokens, workers=1).serial_s


def kv(blocks: int, window: int | None = None) -> KvPlan:
    return KvPlan(80, 72, 10, 1, 1, block_bytes=1, block_size=16, blocks=blocks, window=window)


def engine(blocks=10_000, budget=4096, chunked=False, max_seqs=256, step=None, per=1.0, lookahead=0) -> SimEngine:
    return SimEngine(step or LinearStep(), kv(blocks), max_seqs, budget, chunked, 0.0, per, lookahead)


def requests(arrivals, prompt, output) -> Requests:
    n = len(arrivals)
    full = lambda v: np.broadcast_to(np.asarray(v, dtype=np.int64), (n,)).copy()
    return Requests(np.asarray(arrivals, dtype=float), full(prompt), full(output), "test")


def run(reqs: Requests, **kw):
    return Simulator(engine(**kw), reqs).run()


@pytest.mark.parametrize(
    "batch, prompt, new, blocks, budget, chunked, host",
    [
        (4, 100, 10, 10_000, 4096, False, serial_host(0.0, 0.0)),  # room for everything
        (3, 3000, 4, 10_000, 4096, False, serial_host(0.002, 0.0005)),  # one long prompt per prefill step
        (4, 32, 64, 14, 4096, False, serial_host(0.0, 0.0)),  # a small pool: preemption and recompute
        (6, 40, 90, 20, 4096, False, serial_host(0.001, 0.0001)),
        (2, 2048, 4, 10_000, 512, True, serial_host(0.0, 0.0)),  # chunked prefill over the budget
        (5, 300, 40, 30, 512, True, serial_host(0.0, 0.0)),  # chunked, and preemption
    ],
)
def test_requests_arriving_at_once_get_the_batch_schedulers_answer(batch, prompt, new, blocks, budget, chunked, host):
    # the batch scheduler (generate's) and the stream simulation implement the same vLLM rules two ways (runs to
    # block boundaries; arrays and runs to the next event): requests all at t = 0 must agree step for step
    resolved = ResolvedEngine(EngineConfig(watermark=0.0), 8192, chunked, budget, "flash_attn", "")
    batch_trace = Scheduler(LinearCosts(), kv(blocks), resolved, host, workers=1).run(batch, prompt, new)
    sim = run(requests([0.0] * batch, prompt, new), blocks=blocks, budget=budget, chunked=chunked,
              step=LinearStep(host))  # fmt: skip
    assert sim.stats.preemptions == batch_trace.preemptions
    assert sim.first_token_s == pytest.approx(batch_trace.ttft_s)
    assert sim.finish_s == pytest.approx([s.finish_s for s in batch_trace.seqs])
    assert sim.stats.busy_s == pytest.approx(batch_trace.e2e_s)
    assert sim.stats.prefill_steps == batch_trace.prefill_steps
    assert sim.stats.steps == batch_trace.steps


def trtllm(blocks=10_000, budget=4096, step=None) -> SimEngine:
    """TensorRT-LLM's rules: the whole request reserved at admission, whole prompts mixed into decode steps."""
    return SimEngine(step or LinearStep(), kv(blocks), 256, budget, False, 0.0, reserve=True, whole_prompts=True)


def test_tensorrt_llm_reserves_each_request_whole_and_waits_where_vllm_admits_both_and_preempts():
    # 8 blocks of 16 tokens; two requests at t = 0 of a 48-token prompt (3 blocks) and 33 new tokens
    reqs = requests([0.0, 0.0], 48, 33)
    # vLLM: both admitted on their prompts' 3 blocks (6 of 8) and prefilled together, 96 tokens = 9.6 ms. 16 decode
    # steps of 12 ms (2 sequences) fill a 4th block each (tokens 49-64) -> 201.6 ms, 17 tokens each; the next needs
    # a 5th block, none is free: r2, the newest, is evicted. r1 decodes its last 16 alone, 11 ms each -> 377.6 ms.
    # r2 is recomputed (48 + 17 = 65 tokens, 6.5 ms) -> 384.1 ms, then 15 steps alone -> 549.1 ms
    v = Simulator(engine(blocks=8), reqs).run()
    assert v.first_token_s == pytest.approx([0.0096, 0.0096]) and v.finish_s == pytest.approx([0.3776, 0.5491])
    assert v.stats.preemptions == 1 and v.preempted.tolist() == [0, 1]
    # TensorRT-LLM: r1 reserves ceil((48 + 33) / 16) = 6 blocks; r2 needs 6 of the 2 left and waits. r1's prompt
    # joins a step whole (4.8 ms), then 32 decode steps of 11 ms -> 356.8 ms; r2 then prefills (4.8 ms) -> first
    # token at 361.6 ms, and decodes 32 steps -> 713.6 ms; nothing is ever preempted
    t = Simulator(trtllm(blocks=8), reqs).run()
    assert t.first_token_s == pytest.approx([0.0048, 0.3616]) and t.finish_s == pytest.approx([0.3568, 0.7136])
    assert t.stats.preemptions == 0 and t.stats.peak_blocks == 6


def test_tensorrt_llm_mixes_only_whole_prompts_and_refuses_one_over_its_budget():
    # a 100-token budget: three 32-token prompts join the first step (9.6 ms), the fourth does not fit the 4 tokens
    # left and is not chunked: it waits for the next step, which decodes the three and takes it whole
    t = Simulator(trtllm(budget=100), requests([0.0] * 4, 32, 4)).run()
    assert t.first_token_s[:3] == pytest.approx([PREFILL_PER_TOKEN_S * 96] * 3)
    assert t.first_token_s[3] == pytest.approx(PREFILL_PER_TOKEN_S * 96 + PREFILL_PER_TOKEN_S * (3 + 32))
    with pytest.raises(InvalidInputError, match="only whole prompts: raise --max-num-batched-tokens"):
        Simulator(trtllm(budget=100), requests([0.0], 101, 4)).run()


@pytest.mark.parametrize("batch, prompt, new, blocks, budget", [(4, 32, 64, 14, 100), (5, 300, 40, 60, 700)])
def test_tensorrt_llm_requests_arriving_at_once_get_generates_scheduler_answer(batch, prompt, new, blocks, budget):
    from perfpredict.llm.engine_versions import get_version

    resolved = ResolvedEngine(EngineConfig(watermark=0.0), 8192, False, budget, "flash_attn", "",
                              version=get_version("trtllm"))  # fmt: skip
    batch_trace = Scheduler(LinearCosts(), kv(blocks), resolved, serial_host(0.0, 0.0), workers=1).run(
        batch, prompt, new
    )
    sim = Simulator(trtllm(blocks, budget), requests([0.0] * batch, prompt, new)).run()
    assert sim.stats.preemptions == batch_trace.preemptions == 0
    assert sim.first_token_s == pytest.approx(batch_trace.ttft_s)
    assert sim.finish_s == pytest.approx([s.finish_s for s in batch_trace.seqs])
    assert sim.stats.peak_blocks == batch_trace.peak_blocks


def test_a_request_arriving_mid_decode_is_prefilled_at_the_next_step_boundary():
    # r1 at t=0: prefill 100 tokens = 10 ms; decode steps of 11 ms (1 sequence) end at 21, 32 ms. r2 arrives at
    # 30.5 ms: the step running then ends at 32 ms, r2's prefill takes 10 ms -> first token at 42 ms (TTFT 11.5 ms).
    # Together: 12 ms a step; r1 has 3 tokens, needs 7 more: done at 42 + 84 = 126 ms; r2 then has 8 and needs
    # 2 more steps alone at 11 ms: 148 ms.
    t = run(requests([0.0, 0.0305], 100, 10))
    assert t.first_token_s == pytest.approx([0.010, 0.042])
    assert t.finish_s == pytest.approx([0.126, 0.148])
    tpot = (t.finish_s - t.first_token_s) / 9
    assert tpot == pytest.approx([(0.126 - 0.010) / 9, (0.148 - 0.042) / 9])
    # the running batch: prefill 1 seq 10 ms, 2 steps x 1 seq, prefill 1 seq 10 ms, 7 x 2 seqs, 2 x 1 seq
    seq_s = 0.010 + 2 * 0.011 + 0.010 + 7 * 2 * 0.012 + 2 * 0.011
    assert t.stats.seq_s == pytest.approx(seq_s) and t.stats.busy_s == pytest.approx(0.148)


def test_a_request_that_does_not_fit_the_free_blocks_waits_for_one_to_finish():
    # 10 blocks of 16 tokens. r1: a 100-token prompt holds 7 blocks, growing to 8 (119 written). r2 (100 tokens,
    # 7 blocks) arrives at 15 ms with 3 free: it waits. r1: prefill 10 ms, 19 decode steps of 11 ms -> done at
    # 219 ms; r2 is prefilled then: first token at 229 ms, a TTFT of 214 ms.
    t = run(requests([0.0, 0.015], 100, 20), blocks=10)
    assert t.finish_s[0] == pytest.approx(0.219)
    assert t.first_token_s[1] == pytest.approx(0.229)
    assert t.stats.peak_blocks == 8 and t.stats.preemptions == 0


def test_the_pool_running_out_preempts_the_newest_which_is_recomputed_with_its_tokens():
    # 8 blocks: r1 (t=0) and r2 (t=5 ms) each hold 2 blocks at 32 tokens; both decode until the pool runs dry;
    # r2, the newest, is evicted and recomputed (its prompt and generated tokens) once r1 is done
    t = run(requests([0.0, 0.005], 32, 64), blocks=8)
    assert t.stats.preemptions == 1 and t.preempted.tolist() == [0, 1]
    assert t.finish_s[1] > t.finish_s[0]
    assert t.stats.peak_blocks <= 8
    # r2's second prefill computes its 32 prompt tokens and what it had generated before the eviction
    assert t.stats.prefill_tokens > 2 * 32


def test_a_head_that_never_fits_the_pool_is_refused_with_the_fix():
    with pytest.raises(InvalidInputError, match="gpu-memory-utilization"):
        run(requests([0.0], 400, 4), blocks=10)


def test_max_num_seqs_holds_the_rest_in_the_queue():
    # two sequences at most: the third (at t=0) waits for the first pair, which finish together after a 20 ms
    # prefill (200 tokens) and 4 decode steps of 12 ms = 68 ms; then its 10 ms prefill: first token at 78 ms
    t = run(requests([0.0, 0.0, 0.0], 100, 5), max_seqs=2)
    assert t.first_token_s == pytest.approx([0.020, 0.020, 0.078])
    assert t.stats.peak_running == 2


def test_chunked_prefill_mixes_decodes_into_a_long_prompt_that_arrives_later():
    # budget 512: r1 (100 tokens) at t=0 prefills in 10 ms, then decodes (11 ms a step); r2 (1,024 tokens) arrives
    # at 5 ms: at 10 ms it is queued, and each step spends 1 token on r1's decode and 511 on r2's prompt:
    # 0.1 ms x 512 = 51.2 ms, twice (1,022 tokens), then r1's decode and r2's last 2 tokens: 0.1 ms x 3 = 0.3 ms
    # -> r2's first token at 10 + 51.2 + 51.2 + 0.3 = 112.7 ms
    t = run(requests([0.0, 0.005], [100, 1024], [10, 10]), budget=512, chunked=True)
    assert t.first_token_s == pytest.approx([0.010, 0.1127])
    assert t.stats.prefill_steps == 1 + 3  # r1's prefill, then the three mixed steps


def test_prefix_caching_skips_the_cached_blocks_and_holds_the_shared_ones_once():
    from perfpredict.llm.prefix_cache import plan
    from perfpredict.llm.serving_options import PrefixCache

    prompt = np.array([200, 200, 200])
    p = plan(PrefixCache(shared_tokens=100), prompt, 16)
    # 100 shared tokens hold 6 whole blocks (96 tokens): the partial one is each request's own
    assert p.shared_blocks == 6 and p.cached_tokens.tolist() == [96, 96, 96] and p.carriers.all()
    reqs = requests([0.0, 0.050, 0.100], 200, 2)
    t = Simulator(engine(), reqs, p).run()
    # r1 computes all 200 tokens (20 ms) and its prefix becomes the cache's; r2 and r3 compute 104 (10.4 ms)
    assert t.first_token_s - t.arrival_s == pytest.approx([0.020, 0.0104, 0.0104])
    assert t.stats.prefill_tokens == 200 + 104 + 104 and t.stats.cached_tokens == 2 * 96
    # memory, two requests of 40 output tokens together: 6 shared blocks once, and each its own: 200 + 39 tokens
    # written = ceil(239 / 16) = 15 blocks less the 6 shared = 9; 6 + 2 x 9 = 24 (without sharing: 30)
    both = Simulator(engine(), requests([0.0, 0.0], 200, 40), p).run()
    assert both.stats.peak_blocks == 24


def test_a_prefix_hit_rate_alone_skips_that_share_of_each_prompt_in_whole_blocks():
    from perfpredict.llm.prefix_cache import plan
    from perfpredict.llm.serving_options import PrefixCache

    # half of 100 tokens is 50: 3 whole blocks (48 tokens); a 20-token prompt finds 10: no whole block
    p = plan(PrefixCache(hit_rate=0.5), np.array([100, 20, 33]), 16)
    assert p.cached_tokens.tolist() == [48, 0, 16] and p.shared_blocks == 0 and not p.carriers.any()


def test_speculative_decoding_gains_its_expected_tokens_per_step_at_the_verification_cost():
    from perfpredict.llm.serving_options import Speculative

    spec = Speculative(method="ngram", tokens=3, acceptance_rate=0.5)
    assert spec.tokens_per_step == pytest.approx((1 - 0.5**4) / (1 - 0.5))  # 1 + 0.5 + 0.25 + 0.125 = 1.875
    assert Speculative(method="draft", draft_model="x").acceptance == 0.7  # the documented default
    draft = LinearStep()
    step = SpeculativeStepTime(LinearStep(), 3, draft)
    # 2 sequences: the target verifies 4 tokens each as a prefill (0.1 ms x 8), the draft decodes 3 steps
    # (3 x (10 + 2) ms)
    assert step.decode_s(2, 400.0, 200) == pytest.approx(PREFILL_PER_TOKEN_S * 8 + 3 * 0.012)
    # one request of 16 output tokens: the prefill gives 1, then ceil(15 / 1.875) = 8 steps
    t = run(requests([0.0], 100, 16), step=SpeculativeStepTime(LinearStep(), 3), per=1.875, lookahead=3)
    assert t.stats.steps == 1 + 8
    assert t.finish_s[0] == pytest.approx(0.010 + 8 * PREFILL_PER_TOKEN_S * 4)


@pytest.mark.parametrize("seed", range(12))
def test_random_streams_keep_the_pools_books_and_finish_every_request(seed):
    from perfpredict.llm.prefix_cache import plan
    from perfpredict.llm.serving_options import PrefixCache

    rng = np.random.default_rng(seed)
    n = 25
    reqs = Requests(np.sort(rng.exponential(0.02, n).cumsum()), rng.integers(5, 300, n), rng.integers(1, 60, n), "r")
    chunked, spec = bool(seed % 2), seed % 3 == 0
    prefix = plan(PrefixCache(shared_tokens=40, hit_rate=0.5), reqs.prompt, 16, seed) if seed % 4 == 1 else None
    e = engine(blocks=int(rng.integers(30, 80)), budget=512 if chunked else 4096, chunked=chunked,
               max_seqs=int(rng.integers(2, 9)), per=1.8 if spec else 1.0, lookahead=2 if spec else 0)  # fmt: skip
    sim = Simulator(e, reqs, prefix)
    t = sim.run()
    held_by_cache = prefix.shared_blocks if prefix is not None and sim.owner is not None else 0
    assert sim.free == e.kv.blocks - held_by_cache and not sim.running and not sim.waiting  # every block returned
    assert (sim.gen >= reqs.output).all()  # every request got all its tokens
    assert (t.arrival_s <= t.first_token_s).all() and (t.first_token_s <= t.finish_s).all()
    assert t.stats.peak_blocks <= e.kv.blocks and t.stats.peak_running <= e.max_num_seqs
