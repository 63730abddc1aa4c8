"""The deployment search on a small grid whose answer is worked out by hand, and on the real engine."""

from __future__ import annotations

import json

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.llm.deploy_search import MEETS, MISSES, REFUSED, DeployReport, Grid, Replica, search
from perfpredict.llm.paged_kv import KvPlan
from perfpredict.llm.serving_options import RequestStream, Slo
from perfpredict.llm.serving_sim import SimEngine

PRICES = {"slow": 1.0, "fast": 2.5, "old": 0.5}
# each (device, tp)'s step costs as a factor of 10 ms + 1 ms per sequence a decode step, 0.1 ms per prefill token
FACTORS = {("slow", 1): 1.0, ("slow", 2): 0.6, ("fast", 1): 0.5, ("fast", 2): 0.3, ("old", 1): 1.2}


class Scaled:
    """Linear step costs times ``f``; no host time."""

    capture_len = None

    def __init__(self, f: float) -> None:
        self.f = f

    def decode_s(self, seqs, context_sum, max_context):
        return self.f * (0.010 + 0.001 * seqs)

    def mixed_s(self, chunks, decode_seqs=0, decode_context_sum=0.0):
        return self.f * 0.0001 * (sum(q for q, _ in chunks) + decode_seqs)

    def wall_s(self, gpu_s, seqs, prefill_tokens, output_tokens, new_requests):
        return gpu_s


def backend(candidate):
    key = (candidate.device, candidate.tp)
    if key not in FACTORS:
        raise InvalidInputError(f"tp={candidate.tp} does not split the heads")
    kv = KvPlan(80, 72, 10, 1, 1, block_bytes=1, block_size=16, blocks=10_000, window=None)
    sim = SimEngine(Scaled(FACTORS[key]), kv, candidate.max_num_seqs, 4096, False, 0.0)
    return Replica(sim, 4096, PRICES[candidate.device])


def test_the_cheapest_configuration_meeting_the_slo_is_worked_out_by_hand():
    # 10 requests of 100 prompt and 11 output tokens, evenly spaced at 20/s (50 ms apart; r replicas: 50r ms apart);
    # SLO TTFT p90 <= 50 ms, TPOT p90 <= 11.5 ms. A request alone on factor f takes 10f ms to prefill and 10
    # decode steps of 11f ms (service 120f ms), so TPOT 11f.
    # - slow tp1 (f=1, $1): TPOT alone 11 ms; a request that overlaps the next one's 10 ms prefill has TPOT >=
    #   (10 x 11 + 10) / 10 = 12 ms > 11.5, and overlap happens while 50r < 120: r = 1, 2 fail, r = 3 (150 ms
    #   apart) meets -> 3 GPUs, $3/h.
    # - slow tp2 (f=0.6: prefill 6 ms, steps 6.6-7.8 ms, $1 x 2 GPUs): one replica; a request's ~90 ms life overlaps
    #   at most two prefills of 6 ms and steps of at most 3 sequences (7.8 ms): TPOT <= (10 x 7.8 + 12) / 10 = 9 ms,
    #   TTFT <= 7.8 + 6 ms -> meets at r = 1, $2/h.
    # - fast tp1 (f=0.5, $2.5): likewise TPOT <= (10 x 6.5 + 10) / 10 = 7.5 ms -> r = 1, $2.5/h.
    # - fast tp2 (f=0.3, $2.5 x 2): alone (service 36 ms < 50) -> r = 1, $5/h.
    # - old tp1 (f=1.2): TPOT alone 13.2 ms > 11.5 at any replica count: misses.
    # - old tp2, slow/fast tp4: refused by the backend.
    # Cost per 1M output tokens: $/h over 20 x 11 x 3600 = 792,000 tokens an hour.
    stream = RequestStream(rate_per_s=20, arrival="uniform", num_requests=10, prompt_tokens=100, new_tokens=11)
    slo = Slo(ttft_ms=50, tpot_ms=11.5)
    grid = Grid(devices=("slow", "fast", "old"), tps=(1, 2, 4), max_num_seqs=(256,))
    r = search(backend, grid.candidates(), stream, slo, max_replicas=8)
    ranked = [(o.device, o.tp, o.status, o.replicas, o.usd_per_hour) for o in r.outcomes]
    assert ranked[:5] == [
        ("slow", 2, MEETS, 1, 2.0),
        ("fast", 1, MEETS, 1, 2.5),
        ("slow", 1, MEETS, 3, 3.0),
        ("fast", 2, MEETS, 1, 5.0),
        ("old", 1, MISSES, None, None),
    ]
    assert {o.status for o in r.outcomes[5:]} == {REFUSED} and len(r.outcomes) == 9
    assert r.best.label == "slow tp2, max 256 seqs, vllm"
    assert r.best.cost_per_million_tokens_usd == pytest.approx(2.0 / 792_000 * 1e6)  # $2.525
    assert r.outcomes[2].tpot_ms == pytest.approx(11.0)  # slow tp1 at 3 replicas: every request alone
    assert r.outcomes[2].ttft_ms == pytest.approx(10.0)
    assert "does not split the heads" in r.outcomes[-1].reason
    assert DeployReport.from_dict(json.loads(r.to_json())) == r


def test_the_search_needs_a_rate_and_an_slo():
    grid = Grid(devices=("slow",), tps=(1,))
    with pytest.raises(InvalidInputError, match="--request-rate"):
        search(backend, grid.candidates(), RequestStream(), Slo(tpot_ms=10))
    with pytest.raises(InvalidInputError, match="--ttft-ms and/or --tpot-ms"):
        search(backend, grid.candidates(), RequestStream(rate_per_s=1), Slo())


def test_on_the_real_engine_answers_rank_by_cost_and_a_tp_that_does_not_split_is_refused(tiny_llama):
    from perfpredict.llm.deploy import search_deployments

    grid = Grid(devices=("H100-SXM", "L4"), tps=(1, 3), max_num_seqs=(16,))
    r = search_deployments(tiny_llama, grid, rate_per_s=50, num_requests=40, prompt_tokens=128, new_tokens=16,
                           tpot_ms=5, max_replicas=8)  # fmt: skip
    meets = [o for o in r.outcomes if o.status == MEETS]
    assert meets and r.best is meets[0]
    assert all(a.cost_per_million_tokens_usd <= b.cost_per_million_tokens_usd for a, b in zip(meets, meets[1:]))
    # each meets at its replica count: TPOT at p90 within 5 ms, and its cost is those replicas' GPU-hours
    for o in meets:
        assert o.tpot_ms <= 5
        price = {"H100-SXM": 3.0, "L4": 0.8}[o.device]
        assert o.cost_per_million_tokens_usd == pytest.approx(o.replicas * price / (50 * 16 * 3600) * 1e6)
    refused = [o for o in r.outcomes if o.status == REFUSED]
    assert {o.tp for o in refused} == {3} and all("tp=3" in o.reason for o in refused)
