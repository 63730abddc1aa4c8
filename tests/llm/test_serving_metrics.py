"""What a serving run reports: percentiles, goodput under an SLO, the request stream and its options."""

from __future__ import annotations

import numpy as np
import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.llm import request_stream, serving_metrics
from perfpredict.llm.serving_options import PrefixCache, RequestStream, Serving, Slo, Speculative
from perfpredict.llm.serving_sim import SimTrace


def trace(arrival, first, finish, output) -> SimTrace:
    a = lambda v: np.asarray(v, dtype=float)
    n = len(arrival)
    return SimTrace(a(arrival), a(first), a(finish), np.zeros(n, dtype=np.int64), np.asarray(output), np.zeros(n))


def test_percentiles_are_numpys_linear_ones_in_milliseconds():
    ttft = np.arange(1, 11) / 10  # 0.1 .. 1.0 s
    p = serving_metrics.Percentiles.of(ttft)
    # rank (n-1) q: p50 at 4.5 -> 0.55 s; p90 at 8.1 -> 0.91 s; p99 at 8.91 -> 0.991 s
    assert (p.p50_ms, p.p90_ms, p.p99_ms, p.mean_ms) == pytest.approx((550, 910, 991, 550))


def test_ttft_tpot_and_e2e_per_request_and_one_token_requests_have_no_tpot():
    t = trace([0, 1], [0.5, 1.2], [2.5, 1.2], [5, 1])
    assert serving_metrics.ttft_s(t) == pytest.approx([0.5, 0.2])
    assert serving_metrics.tpot_s(t) == pytest.approx([(2.5 - 0.5) / 4])  # the one-token request has none
    assert serving_metrics.e2e_s(t) == pytest.approx([2.5, 0.2])


def test_goodput_counts_the_requests_meeting_every_target_over_the_makespan():
    # four requests: TTFT 0.1, 0.3, 0.1, 0.1 s; TPOT (11 tokens) 0.05, 0.05, 0.2, 0.05 s; the last finish at 4.1 s
    t = trace([0, 1, 2, 3], [0.1, 1.3, 2.1, 3.1], [0.6, 1.8, 4.1, 3.6], [11, 11, 11, 11])
    assert t.makespan_s == pytest.approx(4.1)
    slo = Slo(ttft_ms=200, tpot_ms=100)
    assert serving_metrics.meets_slo(t, slo).tolist() == [True, False, False, True]
    assert serving_metrics.goodput_per_s(t, slo) == pytest.approx(2 / 4.1)
    assert serving_metrics.goodput_per_s(t, Slo(ttft_ms=200)) == pytest.approx(3 / 4.1)
    # p50 of TTFT is 0.1 s, of TPOT 0.05 s: met; p90 of TTFT (rank 2.7: 0.1 + 0.7 x 0.2 = 0.24 s) is not
    assert serving_metrics.slo_percentiles_met(t, Slo(ttft_ms=200, tpot_ms=100, percentile=50))
    assert not serving_metrics.slo_percentiles_met(t, slo)


def test_arrivals_are_poisson_with_a_seed_uniform_or_all_at_once():
    rng = np.random.default_rng(0)
    uniform = request_stream.arrivals(RequestStream(rate_per_s=4, arrival="uniform", num_requests=5), 5, rng)
    assert uniform == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    assert not request_stream.arrivals(RequestStream(num_requests=3), 3, rng).any()  # burst: all at t = 0
    stream = RequestStream(rate_per_s=10, num_requests=20_000)
    a = request_stream.sample(stream, 4096).arrival_s
    assert np.array_equal(a, request_stream.sample(stream, 4096).arrival_s)  # the seed decides
    gaps = np.diff(a)
    assert gaps.mean() == pytest.approx(0.1, rel=0.03) and gaps.std() == pytest.approx(0.1, rel=0.05)  # exponential
    assert not np.array_equal(a, request_stream.sample(RequestStream(rate_per_s=10, seed=1), 4096).arrival_s[:1000])


def test_sharegpt_lengths_have_the_published_means_before_vllms_filter_and_respect_it():
    from perfpredict.llm.request_stream import SHAREGPT_MEAN_OUTPUT, SHAREGPT_MEAN_PROMPT, SHAREGPT_SIGMA

    rng = np.random.default_rng(0)
    mu = np.log(SHAREGPT_MEAN_OUTPUT) - SHAREGPT_SIGMA**2 / 2
    assert rng.lognormal(mu, SHAREGPT_SIGMA, 400_000).mean() == pytest.approx(337.99, rel=0.02)
    r = request_stream.sample(RequestStream(lengths="sharegpt", num_requests=5000), 4096)
    assert r.prompt.min() >= 4 and r.output.min() >= 4 and r.prompt.max() <= 1024
    assert (r.prompt + r.output).max() <= 2048
    assert r.prompt.mean() < SHAREGPT_MEAN_PROMPT and r.output.mean() < SHAREGPT_MEAN_OUTPUT  # the filter cuts tails
    short = request_stream.sample(RequestStream(lengths="sharegpt", num_requests=500), 512)
    assert (short.prompt + short.output).max() <= 512  # and the model's max_model_len


def test_a_lengths_file_is_csv_or_jsonl_and_a_bad_one_says_what_is_wrong(tmp_path):
    csv = tmp_path / "l.csv"
    csv.write_text("prompt_tokens,output_tokens,arrival_s\n10,5,3.5\n20,6,2.0\n")
    r = request_stream.sample(RequestStream(lengths="file", lengths_file=str(csv)), 4096)
    assert r.arrival_s.tolist() == [0.0, 1.5] and r.prompt.tolist() == [20, 10]  # replayed, sorted, from t = 0
    jsonl = tmp_path / "l.jsonl"
    jsonl.write_text('{"prompt_tokens": 7, "output_tokens": 3}\n{"prompt_tokens": 8, "output_tokens": 4}\n')
    r = request_stream.sample(RequestStream(lengths="file", lengths_file=str(jsonl), rate_per_s=2), 4096)
    assert r.prompt.tolist() == [7, 8] and len(r.arrival_s) == 2
    (tmp_path / "bad.csv").write_text("prompt,out\n1,2\n")
    with pytest.raises(InvalidInputError, match="no column 'prompt_tokens'.*its columns: prompt, out"):
        request_stream.sample(RequestStream(lengths="file", lengths_file=str(tmp_path / "bad.csv")), 4096)
    with pytest.raises(InvalidInputError, match="beyond max_model_len 16"):
        request_stream.sample(RequestStream(lengths="file", lengths_file=str(csv)), 16)


def test_the_options_refuse_what_makes_no_sense_with_the_fix():
    with pytest.raises(InvalidInputError, match="--arrival poisson needs --request-rate"):
        RequestStream(arrival="poisson")
    with pytest.raises(InvalidInputError, match="--speculative draft needs --draft-model"):
        Speculative()
    with pytest.raises(InvalidInputError, match="--prefix-tokens N or --prefix-hit-rate"):
        PrefixCache()
    with pytest.raises(InvalidInputError, match="unknown serving option 'rate'; valid: .*rate_per_s"):
        Serving.of(rate=3)
    s = Serving.of(rate_per_s=3, tpot_ms=50, shared_tokens=64, method="ngram", tokens=2)
    assert (s.stream.rate_per_s, s.slo.tpot_ms, s.prefix_cache.shared_tokens, s.speculative.tokens) == (3, 50, 64, 2)
    assert s.but(seed=7).stream == RequestStream(rate_per_s=3, seed=7)
