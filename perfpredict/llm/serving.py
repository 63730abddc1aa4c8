"""``predict_serving``: a serving engine (vLLM, SGLang, TensorRT-LLM, ...) under a stream of requests
(``perfpredict serve-sim``).

The engine is ``vllm_engine.setup``'s (the model's sizes, the KV pool, the step costs of the device model, the
engine's host time); the stream is ``request_stream``'s; the run is ``serving_sim``'s, each step timed through the
``step_time`` seam; the report is ``serving_report``'s. Prefix caching (``prefix_cache``) changes what a prefill
computes and what the pool holds; speculative decoding (``serving_options.Speculative``) changes what a decode step
costs and gains, and a draft model takes its weights and its own KV cache from the pool.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.units import GIB
from perfpredict.llm import request_stream, serving_metrics
from perfpredict.llm.serving_options import Serving
from perfpredict.llm.serving_report import ServingReport
from perfpredict.llm.serving_sim import SimEngine, SimTrace, Simulator


@dataclass(frozen=True)
class ServingEngine:
    """One replica, ready to simulate: the engine's setup, the simulation's view of it, and what it assumed."""

    setup: Any  # vllm_engine.Setup
    sim: SimEngine
    serving: Serving
    draft: Any = None  # the draft model's Setup, for speculative decoding with one

    @property
    def max_model_len(self) -> int:
        return self.setup.model.engine.max_model_len


def build(model: Any, serving: Serving) -> ServingEngine:
    """The replica ``serving`` describes, for ``model`` (refusing what vLLM would refuse at start-up)."""
    from perfpredict.llm import vllm_engine
    from perfpredict.llm.step_time import EngineStepTime, SpeculativeStepTime, StepTimeSurface

    s = vllm_engine.setup(model, device=serving.device, tp=serving.tp, pp=serving.pp, dtype=serving.dtype,
                          weights=serving.weights,
                          kv_dtype=serving.kv_dtype, engine=serving.engine_config, host=serving.host,
                          options=serving.engine_options())  # fmt: skip
    e = s.model.engine
    if serving.prefix_cache is not None and s.model.spec.window is not None:
        raise InvalidInputError(
            f"vLLM does not cache prefixes for a sliding-window model ({s.model.spec.name}, {s.model.spec.window} "
            "tokens): drop --prefix-tokens/--prefix-hit-rate"
        )
    exact = EngineStepTime(s.costs, s.host_cost, s.gpus, capture_len=e.config.max_seq_len_to_capture, pp=s.pp)
    kv, draft, step, spec = s.engine_kv, None, exact, serving.speculative  # one virtual engine's blocks
    if spec is not None:
        draft_exact = None
        if spec.method == "draft":
            draft = _draft_setup(spec.draft_model, serving, e.max_model_len)
            kv = _with_draft(kv, draft.kv, e.max_model_len, s.model.spec.name)
            draft_exact = EngineStepTime(draft.costs, s.host_cost, s.gpus, e.config.max_seq_len_to_capture)
        step = SpeculativeStepTime(exact, spec.tokens, draft_exact)
    sim = SimEngine(
        step=StepTimeSurface(step, e.max_model_len),
        kv=kv,
        max_num_seqs=e.max_num_seqs,
        budget_tokens=e.max_num_batched_tokens,
        chunked_prefill=e.chunked_prefill,
        watermark=e.config.watermark,
        tokens_per_step=spec.tokens_per_step if spec is not None else 1.0,
        lookahead=spec.tokens if spec is not None else 0,
        reserve=s.version.admission == "reserve",
        whole_prompts=s.version.policy == "mixed" and not e.chunked_prefill,
    )
    return ServingEngine(s, sim, serving, draft)


def _draft_setup(draft_model: str, serving: Serving, max_model_len: int):
    """The draft model on the same GPUs and tp, sized for the target's context."""
    from perfpredict.llm import vllm_engine
    from perfpredict.llm.decoder_spec import spec_from
    from perfpredict.llm.vllm_config import EngineConfig

    positions = spec_from(draft_model).max_positions or max_model_len
    if positions < max_model_len:
        raise InvalidInputError(
            f"the draft model {draft_model!r} has {positions} positions, fewer than the target's max_model_len "
            f"{max_model_len}: set --max-model-len {positions} or less, or choose a draft of the same family"
        )
    config = EngineConfig(max_model_len=max_model_len, gpu_memory_utilization=1.0)
    return vllm_engine.setup(draft_model, device=serving.device, tp=serving.tp, dtype=serving.dtype,
                             kv_dtype=serving.kv_dtype, engine=config, host=serving.host,
                             options=serving.engine_options())  # fmt: skip


def _with_draft(kv, draft_kv, max_model_len: int, name: str):
    """The target's pool less the draft's weights, in blocks that hold both models' K and V (vLLM gives the draft
    as many blocks as the target, each of the draft's block size)."""
    pool = kv.kv_pool_bytes - draft_kv.weights_bytes
    blocks = max(pool // (kv.block_bytes + draft_kv.block_bytes), 0)
    if blocks * kv.block_size < max_model_len:
        raise InvalidInputError(
            f"with the draft model's weights ({draft_kv.weights_bytes / GIB:.1f} GiB) and cache, {name}'s KV pool "
            f"holds {blocks * kv.block_size} tokens, less than max_model_len {max_model_len}: use a smaller draft, "
            "--tp, or --speculative ngram"
        )
    return dataclasses.replace(kv, blocks=int(blocks))


def simulate(engine: ServingEngine, stream=None) -> tuple[SimTrace, Any, Any]:
    """(the trace, the requests, the prefix plan) of ``stream`` (default: the engine's own) through ``engine``.

    With pipeline parallelism (pp virtual engines, each with its own scheduler and a pp-th of the blocks) the
    requests go to the least-loaded virtual engine, in turn for requests alike: the first one's share, every pp-th
    request, is simulated and stands for all (the trace and the requests are that share's)."""
    from perfpredict.llm import prefix_cache

    stream = stream or engine.serving.stream
    requests = request_stream.sample(stream, engine.max_model_len).every(engine.setup.pp)
    prefix = None
    if engine.serving.prefix_cache is not None:
        prefix = prefix_cache.plan(engine.serving.prefix_cache, requests.prompt, engine.sim.kv.block_size, stream.seed)
    return Simulator(engine.sim, requests, prefix).run(), requests, prefix


def predict_serving(model: Any, serving: Serving | None = None, **options: Any) -> ServingReport:
    """A serving engine on ``tp`` GPUs serving a stream of requests: TTFT, TPOT and end-to-end latency at
    p50/p90/p99, requests/s and output tokens/s, goodput under an SLO, mean running batch, energy per token.

    ``serving``: a ``serving_options.Serving``, or its fields as keywords (flat: ``rate_per_s``, ``arrival``,
    ``num_requests``, ``seed``, ``lengths`` fixed/sharegpt/file, ``prompt_tokens``, ``new_tokens``,
    ``lengths_file``; ``ttft_ms``, ``tpot_ms``, ``percentile``; ``shared_tokens``, ``hit_rate`` (prefix caching);
    ``method``, ``draft_model``, ``tokens``, ``acceptance_rate`` (speculative decoding); ``device``, ``tp``,
    ``dtype``, ``weights``, ``kv_dtype``, ``host``, ``price_usd_per_hour``, ``engine_config``)."""
    s = serving.but(**options) if serving is not None else Serving.of(**options)
    engine = build(model, s)
    trace, requests, _ = simulate(engine)
    return report(engine, trace, requests)


def cached_serving(model: Any, serving: Serving, *, use_cache: bool = True) -> ServingReport:
    """``predict_serving(model, serving)``, read from the on-disk answer cache where the same question was answered
    under the same code, device and host profile (``serving_cache``)."""
    from perfpredict.llm import serving_cache

    cache_key = serving_cache.key("serving", model, serving)
    return serving_cache.cached(cache_key, lambda: predict_serving(model, serving), ServingReport.from_dict, use_cache)


def report(engine: ServingEngine, trace: SimTrace, requests) -> ServingReport:
    from perfpredict.hardware import cost

    s, serving = engine.setup, engine.serving
    m, dev, stats = s.model, s.model.device, trace.stats
    span = max(trace.makespan_s, 1e-12)
    # pipeline parallelism: the trace is one virtual engine's share, and the others run theirs alike beside it
    total = requests.of or len(trace.output)
    scale = total / max(len(trace.output), 1)
    tokens = int(trace.output.sum()) * scale
    slo = serving.slo
    busy_w = _power_w(s, stats, span, requests)
    energy = s.gpus * busy_w * span
    price = serving.price_usd_per_hour if serving.price_usd_per_hour is not None else cost.price_usd_per_hour(dev)
    stream = serving.stream
    return ServingReport(
        model_name=m.spec.name,
        device=dev.name,
        tp=s.gpus // s.pp,
        engine=s.version.engine,
        num_requests=total,
        load=stream.describe() if stream.lengths != "file" else requests.lengths,
        mean_prompt_tokens=float(requests.prompt.mean()),
        mean_output_tokens=float(requests.output.mean()),
        ttft=serving_metrics.Percentiles.of(serving_metrics.ttft_s(trace)),
        tpot=serving_metrics.Percentiles.of(serving_metrics.tpot_s(trace)),
        e2e=serving_metrics.Percentiles.of(serving_metrics.e2e_s(trace)),
        requests_per_s=total / span,
        output_tokens_per_s=tokens / span,
        offered_rate_per_s=stream.rate_per_s if stream.resolved_arrival != "burst" else None,
        slo=slo.describe(),
        goodput_per_s=serving_metrics.goodput_per_s(trace, slo) * scale if slo.given else None,
        slo_met=serving_metrics.slo_percentiles_met(trace, slo) if slo.given else None,
        mean_running_batch=stats.seq_s / max(stats.busy_s, 1e-12) * s.pp,
        peak_running_batch=stats.peak_running * s.pp,
        preemptions=stats.preemptions,
        steps=stats.steps,
        prefill_steps=stats.prefill_steps,
        makespan_s=trace.makespan_s,
        busy_share=stats.busy_s / span,
        gpu_busy_share=stats.gpu_s / span,
        energy_per_token_j=energy / max(tokens, 1),
        cost_per_million_tokens_usd=None if price is None else price * s.gpus * span / 3600 / max(tokens, 1) * 1e6,
        kv_capacity_tokens=engine.sim.kv.capacity_tokens * s.pp,
        peak_kv_tokens=stats.peak_blocks * engine.sim.kv.block_size * s.pp,
        cached_prompt_share=stats.cached_tokens / max(int(requests.prompt.sum()), 1),
        tokens_per_step=engine.sim.tokens_per_step,
        engine_version=s.version.version,
        frontend=serving.engine_options().frontend,
        pp=s.pp,
        assumptions=_assumptions(engine, requests, stats, busy_w),
        warnings=_warnings(trace),
    )


def _power_w(s, stats, span_s: float, requests) -> float:
    """One GPU's mean power over the run (``engine_power``): busy the share of the span its kernels run, decoding
    the mean running batch at the mean context, prefilling the mean prompt."""
    from perfpredict.llm.engine_power import busy_power_w

    running = max(1, round(stats.seq_s / max(stats.busy_s, 1e-12)))
    context = min(int(requests.prompt.mean() + requests.output.mean() / 2), s.model.engine.max_model_len)
    return busy_power_w(s, decode_gpu_s=stats.gpu_s - stats.prefill_gpu_s, prefill_gpu_s=stats.prefill_gpu_s,
                        wall_s=span_s, running=running, context=context,
                        prompt=int(requests.prompt.mean()))  # fmt: skip


def _assumptions(engine: ServingEngine, requests, stats, busy_w: float) -> dict[str, str]:
    from perfpredict.llm.engine_assumptions import assumptions
    from perfpredict.llm.step_time import CONTEXT_POINTS

    s, serving = engine.setup, engine.serving
    hits = _prefix_hits(stats, requests) if serving.prefix_cache is not None else None
    out = assumptions(s, prefix_hits=hits)
    out["load"] = f"{serving.stream.describe()}; lengths {requests.lengths}"
    out["scheduler over time"] = _scheduler_line(engine)
    out["step times"] = (
        "decode steps from exact step costs at every batch size that occurs and at mean contexts "
        f"{CONTEXT_POINTS} per doubling, linear between; prefill and mixed steps exact"
    )
    if s.pp > 1:
        out["virtual engines"] = (
            f"{s.pp} (one per pipeline stage), each with its own scheduler, 1/{s.pp} of the KV blocks "
            f"({engine.sim.kv.blocks:,}) and up to max_num_seqs sequences; a request goes to the least-loaded one, "
            f"in turn for requests alike: the first one's share (one request in {s.pp}, {len(requests):,}) is "
            f"simulated and stands for all, so throughput, goodput, the running batch and the KV cache are {s.pp} "
            "times its, its latencies everyone's (its steps and preemptions are its own; the peak batch and KV are "
            "an upper bound, as if the engines peaked together). Each of its steps passes every stage, but the other "
            "engines' prefills at the shared stages are not queued in front of its decodes: TPOT is optimistic "
            "where prefills are heavy"
        )
    out["slo"] = serving.slo.describe()
    out["energy"] = (
        f"{busy_w:.0f} W per GPU on average over the run (the GPU's power model: {s.model.device.idle_power_w:.0f} W "
        "idle, plus its kernels' activity for the share of the time they run, the mean running batch decoding; the "
        "host's part of each step and the gaps between requests idle)"
    )
    if serving.prefix_cache is not None:
        out["prefix caching"] = f"{serving.prefix_cache.describe(engine.sim.kv.block_size)}; in this run {hits}"
    spec = serving.speculative
    if spec is not None:
        source = f"the draft model {spec.draft_model}" if spec.method == "draft" else "n-gram lookup in the prompt"
        drafted = f"{spec.tokens} draft decode steps (the draft model's step costs), then " if engine.draft else ""
        out["speculative decoding"] = (
            f"{spec.tokens} tokens proposed per step by {source}, each accepted with probability "
            f"{spec.acceptance:g}{' (the default for ' + spec.method + ')' if spec.acceptance_rate is None else ''}: "
            f"{spec.tokens_per_step:.2f} tokens per sequence per step; a step costs {drafted}the target verifying "
            f"{spec.tokens + 1} tokens per sequence as a prefill; steps that prefill run without speculation"
            + (
                f"; the draft's weights and cache share the pool: {engine.sim.kv.blocks:,} blocks"
                if engine.draft
                else ""
            )
        )
    return out


def _prefix_hits(stats, requests) -> str:
    """What prefix caching found over the run, in words: the requests that hit and the prompt tokens skipped."""
    n, prompt = len(requests.prompt), max(int(requests.prompt.sum()), 1)
    return (
        f"{stats.hit_requests:,} of {n:,} requests hit the cache: {stats.cached_tokens:,} prompt tokens "
        f"({stats.cached_tokens / prompt:.0%}) not computed"
    )


def _scheduler_line(engine: ServingEngine) -> str:
    """How the simulated engine admits and batches requests, in words: its own rule, as ``generate``'s scheduler
    runs it."""
    sim, name = engine.sim, engine.setup.version.name
    held = (
        "the blocks of its prompt and of every token it will generate, taken at once (GUARANTEED_NO_EVICT: "
        "nothing is preempted)"
        if sim.reserve
        else "the blocks of its prompt; a decoding sequence short of a block preempts the newest (recomputed later)"
    )
    if sim.whole_prompts:
        steps = "whole prompts join the decodes of a step while the budget left holds them (no chunked context)"
    elif sim.chunked_prefill:
        steps = "each step spends its budget on the decodes first, then on prompt chunks"
    else:
        steps = "a step that admits prompts runs those prefills alone, else it decodes every running sequence"
    return (
        f"{name}'s: requests queue first come, first served; the head of the queue is admitted under the token "
        f"budget ({sim.budget_tokens:,}), max_num_seqs ({sim.max_num_seqs}) and the free KV blocks less the "
        f"watermark, holding {held}, and blocks the rest while it does not fit; {steps}"
    )


def _warnings(trace: SimTrace) -> tuple[str, ...]:
    out = []
    end = float(trace.arrival_s.max())
    arrived = int(np.count_nonzero(trace.arrival_s > end / 2))
    finished = int(np.count_nonzero((trace.finish_s > end / 2) & (trace.finish_s <= end)))
    # a server that keeps up finishes, over the second half of the arrivals, about as many requests as arrive then
    if arrived >= 20 and finished < 0.9 * arrived:
        out.append(
            f"the engine does not keep up: over the second half of the arrivals it finished {finished} requests while "
            f"{arrived} arrived, so the queue and the latencies grow with --num-requests; more replicas, GPUs or a "
            "lower rate keep up"
        )
    if trace.stats.preemptions:
        hit = int(np.count_nonzero(trace.preempted))
        out.append(
            f"{trace.stats.preemptions} preemption(s) of {hit} request(s): the KV pool ran out of blocks and evicted "
            "the newest sequences, recomputed later"
        )
    return tuple(out)
