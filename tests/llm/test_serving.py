"""``predict_serving`` and ``perfpredict serve-sim`` through the real engine, on a tiny Llama (fast tables)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.llm import serving, vllm_engine
from perfpredict.llm.serving_options import Serving
from perfpredict.llm.vllm_config import EngineConfig

SMALL = EngineConfig(max_num_seqs=16)


@pytest.fixture(scope="module")
def tiny(tiny_llama):
    return tiny_llama


@pytest.fixture(scope="module")
def engine(tiny):
    return serving.build(tiny, Serving.of(engine_config=SMALL, num_requests=12, prompt_tokens=64, new_tokens=32))


def test_a_burst_through_the_engine_is_generates_batch_to_the_surfaces_error(engine):
    # 12 requests at t = 0 through the stream simulation, and the batch scheduler's run of the same 12 on the same
    # exact step costs: the only difference is the decode surface's interpolation in the context
    trace, _, _ = serving.simulate(engine)
    batch = vllm_engine.run(engine.setup, 12, 64, 32)
    assert trace.first_token_s == pytest.approx(batch.ttft_s, rel=1e-9)  # one prefill step: exact
    assert trace.finish_s == pytest.approx([s.finish_s for s in batch.seqs], rel=0.005)


def test_the_decode_surface_is_within_half_a_percent_of_exact_step_costs(engine):
    surface, exact = engine.sim.step, engine.sim.step.exact
    for seqs, mean in [(1, 70.0), (3, 333.3), (9, 97.0), (16, 700.0), (13, 1000.0)]:
        assert surface.decode_s(seqs, seqs * mean, int(mean)) == pytest.approx(
            exact.decode_s(seqs, seqs * mean, int(mean)), rel=0.005
        )


def test_the_report_adds_up_and_round_trips_through_json(tiny):
    from perfpredict.llm.serving_report import ServingReport

    r = serving.predict_serving(tiny, engine_config=SMALL, rate_per_s=40, num_requests=60, lengths="sharegpt",
                                ttft_ms=50, tpot_ms=5)  # fmt: skip
    assert r.requests_per_s == pytest.approx(60 / r.makespan_s)
    assert r.output_tokens_per_s == pytest.approx(r.mean_output_tokens * 60 / r.makespan_s)
    assert 0 <= r.goodput_per_s <= r.requests_per_s and r.slo_met in (True, False)
    assert r.ttft.p50_ms <= r.ttft.p90_ms <= r.ttft.p99_ms and r.tpot.p50_ms <= r.tpot.p99_ms
    assert 0 < r.mean_running_batch <= r.peak_running_batch <= 16
    assert r.energy_per_token_j > 0 and 0 < r.gpu_busy_share <= r.busy_share <= 1
    assert {"load", "slo", "step times", "energy", "kv cache"} <= set(r.assumptions)
    assert ServingReport.from_dict(json.loads(r.to_json())) == r


def test_prefix_caching_cuts_ttft_and_speculation_cuts_tpot_at_low_load(tiny):
    base = Serving.of(engine_config=SMALL, rate_per_s=5, num_requests=20, prompt_tokens=512, new_tokens=32)
    plain = serving.predict_serving(tiny, base)
    cached = serving.predict_serving(tiny, base, shared_tokens=480)
    assert cached.cached_prompt_share == pytest.approx(19 * 480 / (20 * 512))  # all but the first request
    assert cached.ttft.p50_ms < plain.ttft.p50_ms
    spec = serving.predict_serving(tiny, base, method="ngram", tokens=3, acceptance_rate=0.8)
    assert spec.tokens_per_step == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    assert spec.tpot.p50_ms < plain.tpot.p50_ms
    assert "speculative decoding" in spec.assumptions and "prefix caching" in cached.assumptions


def test_the_assumptions_state_the_prefix_hits_the_run_had_not_none(tiny):
    # the engine line had said "prefix caching on (no shared prefixes here: no hits)" beside a table of 89% skipped
    base = Serving.of(engine_config=SMALL, rate_per_s=5, num_requests=20, prompt_tokens=512, new_tokens=32)
    hits = "19 of 20 requests hit the cache: 9,120 prompt tokens (89%) not computed"  # 19 x 480; of 20 x 512
    for version in ("0.10", "0.6"):  # V1 caches prefixes by default; 0.6 when asked (--prefix-tokens)
        r = serving.predict_serving(tiny, base.but(engine_version=version), shared_tokens=480)
        assert f"prefix caching on ({hits})" in r.assumptions["engine"] and "no hits" not in r.assumptions["engine"]
        assert r.assumptions["prefix caching"].endswith(f"in this run {hits}")
    plain = serving.predict_serving(tiny, base).assumptions["engine"]
    assert "prefix caching on (no shared prefixes here: no hits)" in plain  # distinct prompts: true


def test_a_draft_model_takes_its_weights_and_its_cache_from_the_pool(tiny, engine):
    drafted = serving.build(tiny, engine.serving.but(method="draft", draft_model=tiny))
    kv, draft = engine.sim.kv, drafted.draft.kv
    # the pool less the draft's weights, in blocks holding both models' K and V
    assert drafted.sim.kv.blocks == (kv.kv_pool_bytes - draft.weights_bytes) // (kv.block_bytes + draft.block_bytes)
    assert drafted.sim.tokens_per_step == pytest.approx((1 - 0.7**6) / 0.3)  # the default k = 5, a = 0.7


def test_vllm_refuses_prefix_caching_on_a_sliding_window_model():
    with pytest.raises(InvalidInputError, match="sliding-window model"):
        serving.build("mistral-7b", Serving.of(shared_tokens=64))


def test_serve_sim_on_the_command_line_writes_the_reports_json(tiny, capsys, tmp_path):
    from perfpredict.cli import main

    argv = ["serve-sim", "--config", tiny, "--request-rate", "20", "--num-requests", "30", "--max-num-seqs", "16",
            "--tpot-ms", "50", "--prefix-tokens", "32", "--json", "-", "--html", str(tmp_path / "s.html")]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_requests"] == 30 and data["offered_rate_per_s"] == 20 and data["goodput_per_s"] is not None
    assert "TPOT p90 <= 50 ms" in data["slo"] and "prefix caching" in data["assumptions"]
    assert "time per output token" in (tmp_path / "s.html").read_text()
    assert main(["serve-sim", "--config", tiny, "--arrival", "uniform"]) == 2
    assert "--arrival uniform needs --request-rate" in capsys.readouterr().err
    assert np.isfinite(data["energy_per_token_j"])


def test_a_repeated_serving_question_and_search_are_answered_from_the_cache(tiny, tmp_path, monkeypatch):
    from perfpredict.llm import deploy
    from perfpredict.llm.deploy_search import Grid

    monkeypatch.delenv("PERFPREDICT_NO_GRAPH_CACHE", raising=False)
    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path))
    calls = []
    real = serving.predict_serving
    monkeypatch.setattr(serving, "predict_serving", lambda *a, **k: calls.append(1) or real(*a, **k))
    ask = Serving.of(engine_config=SMALL, rate_per_s=30, num_requests=20, tpot_ms=5)
    first = serving.cached_serving(tiny, ask)
    assert serving.cached_serving(tiny, ask) == first and len(calls) == 1  # read, not simulated again
    assert serving.cached_serving(tiny, ask.but(seed=1)).load != first.load and len(calls) == 2
    serving.cached_serving(tiny, ask, use_cache=False)  # --no-cache answers again
    assert len(calls) == 3
    grid = Grid(devices=("H100-SXM",), tps=(1,), max_num_seqs=(16,))
    searched = deploy.cached_search(tiny, grid, ask, max_replicas=2)
    monkeypatch.setattr(deploy, "search_deployments", lambda *a, **k: pytest.fail("searched again"))
    assert deploy.cached_search(tiny, grid, ask, max_replicas=2) == searched


def test_a_server_that_does_not_keep_up_says_so(engine):
    from perfpredict.llm.serving_options import RequestStream

    def warned(rate: float) -> bool:
        stream = RequestStream(rate_per_s=rate, num_requests=120, prompt_tokens=64, new_tokens=32)
        trace, requests, _ = serving.simulate(engine, stream)
        return any("does not keep up" in w for w in serving.report(engine, trace, requests).warnings)

    # one request alone takes a prefill and 31 decode steps; 16 at most run together: far below that rate it keeps
    # up, far above it the queue grows
    alone, _, _ = serving.simulate(engine, RequestStream(num_requests=1, prompt_tokens=64, new_tokens=32))
    service_s = float(alone.finish_s[0])
    assert not warned(0.5 / service_s) and warned(100 / service_s)


def test_the_api_names_the_serving_functions():
    import perfpredict
    from perfpredict.llm import deploy

    assert perfpredict.predict_serving is serving.predict_serving
    assert perfpredict.search_deployments is deploy.search_deployments


def test_serve_sim_steps_take_the_versions_host_cost_and_frontend(tiny):
    """The step-time seam asks the version's host cost: vLLM 0.5's API server runs in the engine's process, so
    every step pays its cost per streamed token in turn with the GPU; offline it pays none."""
    from perfpredict.llm.host_costs import figures

    base = Serving.of(engine_config=SMALL, num_requests=8, prompt_tokens=64, new_tokens=16, engine_version="0.5")
    offline, served = serving.build(tiny, base), serving.build(tiny, base.but(frontend="openai-server"))
    assert offline.setup.version.version == "0.5" and served.setup.options.frontend == "openai-server"
    per_token = figures("frontend-openai-server")["phases"]["api_stream"]["per_output_token_s"]  # ~100 us
    # a decode step of 4 sequences on 1 ms of GPU: 4 streamed tokens more, serial, and nothing else differs
    extra = served.sim.step.wall_s(1e-3, 4, 0, 4, 0) - offline.sim.step.wall_s(1e-3, 4, 0, 4, 0)
    assert extra == pytest.approx(4 * per_token)
    with pytest.raises(InvalidInputError, match="version '9.9' is not modelled"):
        Serving.of(engine_version="9.9")


def test_serve_sim_runs_each_engines_admission_and_its_title_names_the_engine_and_version(tiny):
    from perfpredict.llm.render_serving import title

    ask = Serving.of(engine_config=SMALL, num_requests=8, prompt_tokens=64, new_tokens=16, rate_per_s=20.0)
    trt, vllm = serving.build(tiny, ask.but(engine="trtllm")), serving.build(tiny, ask)
    assert (trt.sim.reserve, trt.sim.whole_prompts) == (True, True)  # GUARANTEED_NO_EVICT, no chunked context
    assert (vllm.sim.reserve, vllm.sim.whole_prompts) == (False, False)
    chunked = serving.build(tiny, ask.but(engine="trtllm", engine_config=EngineConfig(chunked_prefill=True)))
    assert chunked.sim.whole_prompts is False and chunked.sim.chunked_prefill  # its chunked context, when enabled
    r = serving.predict_serving(tiny, ask.but(engine="trtllm", frontend="openai-server"))
    assert "(TensorRT-LLM 0.11, behind its OpenAI server)" in title(r) and "vLLM" not in title(r)
    assert r.assumptions["scheduler over time"].startswith("TensorRT-LLM 0.11's: ")
    assert "every token it will generate" in r.assumptions["scheduler over time"]
    assert "(vLLM 0.10)" in title(serving.predict_serving(tiny, ask))


def test_serve_sim_takes_generates_host_choices_multi_step_scheduling_among_them(tiny):
    """vLLM 0.6 with 10 scheduler steps (what its v0.6.0 post benchmarked): the scheduling phases' host cost is paid
    once per 10 steps, as generate's --num-scheduler-steps pays it."""
    base = Serving.of(engine_config=SMALL, num_requests=8, prompt_tokens=64, new_tokens=16, engine_version="0.6")
    one, ten = serving.build(tiny, base), serving.build(tiny, base.but(scheduler_steps=10))
    phases = {p.name: p for p in one.setup.host_cost.phases}
    sched = sum(phases[n].seconds(4, 0, 4, 0, 1) for n in ("schedule", "prepare_inputs"))  # 4 sequences, a step
    saved = one.sim.step.wall_s(1e-3, 4, 0, 4, 0) - ten.sim.step.wall_s(1e-3, 4, 0, 4, 0)
    assert sched > 0 and saved == pytest.approx(sched * (1 - 1 / 10))
    off = serving.build(tiny, base.but(async_output=False))  # its outputs processed in turn with the GPU
    assert off.sim.step.wall_s(1e-3, 4, 0, 4, 0) > one.sim.step.wall_s(1e-3, 4, 0, 4, 0)
    served = serving.build(tiny, base.but(frontend="openai-server", frontend_process="engine"))
    assert served.setup.options.frontend_process == "engine"


def test_a_pipeline_runs_virtual_engines_each_its_share_as_generates_scheduler_does(tiny):
    """pp 2: two virtual engines, each with its own scheduler and half the KV blocks; a request goes to the
    least-loaded one (in turn, for requests alike), so the first one's share stands for both, as generate --pp runs
    one virtual engine's ceil(batch / pp) sequences."""
    from perfpredict.llm.render_serving import title

    ask = Serving.of(engine_config=SMALL, pp=2, num_requests=12, prompt_tokens=64, new_tokens=32)  # all at t = 0
    engine = serving.build(tiny, ask)
    assert engine.setup.pp == 2 and engine.sim.kv.blocks == engine.setup.kv.blocks // 2
    trace, requests, _ = serving.simulate(engine)
    assert len(requests) == 6 and requests.of == 12  # every other request
    batch = vllm_engine.run(engine.setup, 12, 64, 32)  # generate's scheduler: one virtual engine's 6
    assert trace.first_token_s == pytest.approx(batch.ttft_s, rel=1e-9)
    assert trace.finish_s == pytest.approx([s.finish_s for s in batch.seqs], rel=0.005)
    r = serving.report(engine, trace, requests)
    assert (r.pp, r.tp, r.num_requests) == (2, 1, 12) and r.requests_per_s == pytest.approx(12 / r.makespan_s)
    one = trace.stats.seq_s / trace.stats.busy_s  # one virtual engine's mean running batch; the other runs alike
    assert r.mean_running_batch == pytest.approx(2 * one) and r.kv_capacity_tokens == 2 * engine.sim.kv.capacity_tokens
    assert "2 x 1 x " in title(r) and "virtual engines" in r.assumptions
    with pytest.raises(InvalidInputError, match="--pp 2 with speculative decoding is not modelled"):
        Serving.of(pp=2, method="ngram")


def test_a_deployment_grid_sizes_pipeline_parallel_replicas_instead_of_refusing_them(tiny):
    from perfpredict.llm.deploy import search_deployments
    from perfpredict.llm.deploy_search import Grid

    ask = Serving.of(engine_config=SMALL, num_requests=8, prompt_tokens=64, new_tokens=16, rate_per_s=2.0,
                     tpot_ms=1000.0, price_usd_per_hour=1.0)  # fmt: skip
    r = search_deployments(tiny, Grid(("H100-SXM",), (1,), (1, 2), (16,)), ask)
    by_pp = {o.pp: o for o in r.outcomes}
    assert by_pp[2].status == "meets" and by_pp[1].status == "meets"
    assert by_pp[2].gpus == 2 * by_pp[2].replicas  # a replica of 2 stages of 1 GPU
    assert by_pp[2].usd_per_hour == pytest.approx(by_pp[2].gpus * 1.0)


def test_a_deployment_grid_names_an_engine_with_its_version(tiny):
    from perfpredict.llm.deploy import engine_backend
    from perfpredict.llm.deploy_search import Candidate
    from perfpredict.llm.engine_versions import parse_engine

    assert (parse_engine("vllm-0.6").version, parse_engine("vllm").version, parse_engine("sglang").engine) == (
        "0.6",
        "0.10",
        "sglang",
    )
    backend = engine_backend(tiny, Serving.of(num_requests=8, prompt_tokens=64, new_tokens=16, rate_per_s=1.0))
    v06, current = (
        backend(Candidate("H100-SXM", max_num_seqs=16, engine="vllm-0.6")),
        backend(Candidate("H100-SXM", max_num_seqs=16)),
    )
    assert v06.sim.step.exact.host.label.startswith("vLLM 0.6") and current.sim.step.exact.host.label.startswith(
        "vLLM 0.10"
    )
    assert not v06.sim.chunked_prefill and current.sim.chunked_prefill  # V1's chunked prefill is always on


def test_serving_energy_is_the_power_models_over_the_whole_span(engine):
    """A GPU that idles half the span draws less on average than one busy all of it (idle floor + activity x
    busy share), from the one public power function generate's runs use too."""
    from perfpredict.llm.engine_power import busy_power_w

    s = engine.setup
    busy = busy_power_w(s, decode_gpu_s=1.0, prefill_gpu_s=0.0, wall_s=1.0, running=8, context=80, prompt=64)
    half = busy_power_w(s, decode_gpu_s=1.0, prefill_gpu_s=0.0, wall_s=2.0, running=8, context=80, prompt=64)
    idle = s.model.device.idle_power_w
    assert half - idle == pytest.approx((busy - idle) / 2) and busy <= s.model.device.tdp_w
