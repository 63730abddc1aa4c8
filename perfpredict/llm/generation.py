"""``predict_generation``: prefill, decode along the generation, tokens/s, memory and the largest batch that fits.

It answers for one of two engines: a vLLM-class serving engine (``vllm_engine``, built from the config's sizes),
or transformers' ``generate``, modelled here from traced graphs, on ``tp`` tensor-parallel GPUs (``tp_ranks``):

- **Prefill** (time to first token): one forward over the prompt (``decode_trace.prefill_graph``).
- **Decode**: the step that makes token t+1 attends to the prompt and t tokens already generated. The step is
  traced with a real cache at a few context lengths (``DECODE_POINTS``, from the first step to the last) and
  predicted by the two-timeline model; the time of every step is interpolated between them (linear in the context)
  and summed.
- **Memory**: the weights (in their serving format), the KV cache at the last token (``kv_cache``), the larger of
  the prefill's and the step's activations, and the runtime. The largest batch that fits scales the cache and the
  activations per sequence.
- **Batch sweep**: the middle decode step captured at two batch sizes is affine in the batch
  (``CostArrays.fit``), so tokens/s for every batch up to the largest that fits costs one vectorised evaluation; it
  shows where decode turns from memory-bound (weights streamed once for the batch) to compute-bound.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.units import GIB
from perfpredict.llm.generation_report import BatchPoint, DecodePoint, GenerationReport

DECODE_POINTS = 3
SWEEP_MAX_BATCH = 1024


def predict_generation(model_or_config: Any, generation: Any = None, **options: Any) -> GenerationReport:
    """Predict generating ``new_tokens`` after a ``prompt_tokens`` prompt for ``batch`` sequences on ``device``.

    ``model_or_config``: a shipped HuggingFace id or alias, a config.json path, a ``PretrainedConfig``, or a HF
    model (its ``.config``). The question is one ``generation_options.Generation`` (``generation``), or its fields
    as keywords: ``prompt_tokens`` (512), ``new_tokens`` (128), ``batch`` (1), ``device``, ``dtype``, ``weights``
    (bf16, fp16, fp8, int8, nf4, int4, int4-g32; GGUF q4_k_m, q8_0, ... with llama.cpp), ``kv_dtype``, ``tp``,
    ``pp`` (a serving engine's pipeline stages of tp GPUs each: vLLM's virtual engines, ``vllm_engine``), ``host``
    (the host CPU profile that times dispatch and launches), ``price_usd_per_hour``, and the engine's:

    - ``engine``: ``"vllm"``, ``"sglang"``, ``"trtllm"``, ``"mii"`` or ``"llamacpp"`` (serving engines: paged KV
      cache, CUDA graphs, fused kernels, their schedulers; ``engine_config`` a ``vllm_config.EngineConfig``),
      ``"hf"`` (transformers' ``generate``, with ``mode`` eager, cuda_graph, compiled or compiled_cuda_graph,
      ``cache`` dynamic or static, ``quant_kernel`` fused or dequantize, ``attn_implementation`` sdpa, eager or
      flash_attention_2: ``compiler_hooks.attention_choice``), or ``"auto"``: vllm for a decoder it covers on a GPU
      unless ``mode``, ``cache``, ``quant_kernel`` or ``attn_implementation`` is given, else hf;
    - ``engine_version`` (default: the engine's current one; vLLM: 0.5, 0.6, 0.8, 0.10), ``frontend`` ("offline"
      or "openai-server"), ``frontend_process`` ("engine" or "separate"), ``scheduler_steps`` and
      ``async_output`` (vLLM 0.6), ``async_scheduling`` (vLLM V1).

    Memory figures are per GPU with ``tp`` > 1.
    """
    from perfpredict.compiler_hooks.attention_choice import check
    from perfpredict.llm.decode_trace import check_decoder
    from perfpredict.llm.generation_options import Generation
    from perfpredict.predictors import host_model

    g = generation.but(**options) if generation is not None else Generation.of(**options)
    check(g.attn_implementation)
    host_model.profile_file(g.host)  # an unknown host (or "calibrated" before calibrate-host) fails here, in one line
    check_decoder(getattr(model_or_config, "config", model_or_config))  # BERT generates nothing
    opts = g.engine
    hf_only = g.cache if g.quant_kernel is None and g.attn_implementation is None else "given"
    chosen = choose_engine(opts.engine, model_or_config, g.device, g.mode, hf_only)
    if chosen != "hf":
        if g.mode is not None or g.cache is not None or g.quant_kernel is not None or g.attn_implementation:
            raise InvalidInputError(
                "--mode, --cache, --quant-kernel and --attn-implementation describe transformers' generate; drop "
                f"them with --engine {chosen} (it runs its own attention kernels), or use --engine hf"
            )
        from perfpredict.llm.vllm_engine import predict_vllm

        report = predict_vllm(model_or_config, prompt_tokens=g.prompt_tokens, new_tokens=g.new_tokens, batch=g.batch,
                              device=g.device, tp=g.tp, pp=g.pp, dtype=g.dtype, weights=g.weights, kv_dtype=g.kv_dtype,
                              price_usd_per_hour=g.price_usd_per_hour, host=g.host,
                              options=dataclasses.replace(opts, engine=chosen))  # fmt: skip
        return _with_host(report, g.host)
    if opts.settings is not None:
        raise InvalidInputError("engine settings (block size, memory utilization, ...) apply to serving engines only")
    if opts.version is not None or opts.frontend != "offline":
        raise InvalidInputError(
            "--engine-version and --frontend describe a serving engine; transformers' generate has neither: "
            "drop them, or choose --engine vllm (or sglang, trtllm, mii, llamacpp)"
        )
    if g.pp != 1:
        raise InvalidInputError(
            f"--pp {g.pp}: pipeline parallelism is modelled for the serving engines (vLLM's virtual engines); use "
            "--engine vllm, or --tp alone with --engine hf"
        )
    mode, cache = hf_mode_and_cache(g.mode, g.cache)
    report = _predict_hf(model_or_config, prompt_tokens=g.prompt_tokens, new_tokens=g.new_tokens, batch=g.batch,
                         device=g.device, dtype=g.dtype, weights=g.weights, kv_dtype=g.kv_dtype, mode=mode,
                         cache=cache, tp=g.tp, price_usd_per_hour=g.price_usd_per_hour,
                         quant_kernel=g.quant_kernel or "auto", host=g.host,
                         attn_implementation=g.attn_implementation)  # fmt: skip
    return _with_host(report, g.host)


def _with_host(report: GenerationReport, host: str | None) -> GenerationReport:
    """``report`` with the host profile its steps were timed on among its assumptions."""
    import dataclasses

    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors import host_model

    profile = host_model.load_profile(host=host, kind=get_device(report.device).kind)
    line = (
        f"{host} (its dispatch and launch costs time each step)"
        if host
        else f"{profile.name}, the default (--host names another; calibrate-host measures this machine's)"
    )
    return dataclasses.replace(report, assumptions={**report.assumptions, "host": line})


GRAPH_MODES = ("cuda_graph", "compiled_cuda_graph")


def hf_mode_and_cache(mode: str | None, cache: str | None) -> tuple[str, str]:
    """The mode and cache transformers' generate runs with. A CUDA graph replays fixed shapes at fixed addresses,
    and HF's dynamic cache grows (a new, longer tensor) every step, so it is never captured: the CUDA-graph modes
    take the static cache (their default) and refuse an explicit dynamic one. ``compiled`` defaults to the static
    cache too, as transformers recommends with torch.compile (a growing cache recompiles); eager to the dynamic one,
    generate's own default."""
    mode = mode or "eager"
    if mode in GRAPH_MODES and cache == "dynamic":
        raise InvalidInputError(
            f"--mode {mode} cannot run with --cache dynamic: HF's dynamic cache grows every step and a CUDA graph "
            "replays fixed shapes, so transformers captures graphs only with a static cache; use --cache static "
            "(the default for this mode), or --mode compiled"
        )
    return mode, cache or ("dynamic" if mode == "eager" else "static")


def choose_engine(engine: str, model_or_config: Any, device: str, mode: str | None, cache: str | None) -> str:
    """``engine`` itself, or for "auto": vllm for a decoder the engine covers on a GPU, unless ``mode`` or
    ``cache`` (transformers' generate's own settings) is given."""
    from perfpredict.llm.engine_versions import ENGINES

    if engine not in ENGINES:
        raise InvalidInputError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    if engine != "auto":
        return engine
    if mode is not None or cache is not None:
        return "hf"
    from perfpredict.core.errors import PerfPredictError
    from perfpredict.hardware.devices import get_device
    from perfpredict.llm.decoder_spec import spec_from

    if get_device(device).kind != "gpu":
        return "hf"
    try:
        spec_from(model_or_config)
    except PerfPredictError:
        return "hf"
    return "vllm"


def _predict_hf(
    model_or_config: Any,
    *,
    prompt_tokens: int,
    new_tokens: int,
    batch: int,
    device: str,
    dtype: str | None,
    weights: str | None,
    kv_dtype: str | None,
    mode: str,
    cache: str,
    tp: int,
    price_usd_per_hour: float | None,
    quant_kernel: str = "auto",
    host: str | None = None,
    attn_implementation: str | None = None,
) -> GenerationReport:
    """transformers' generate on ``tp`` GPUs (see the module docstring)."""
    from perfpredict.compiler_hooks import hf_frontend as hf
    from perfpredict.compiler_hooks.attention_choice import configured
    from perfpredict.hardware import cost
    from perfpredict.hardware.devices import get_device
    from perfpredict.llm import kv_cache, moe, tp_ranks, weight_formats
    from perfpredict.llm.decode_trace import prefill_graph

    dev = get_device(device)
    link = tp_ranks.link_for(dev, tp)
    # the attention asked for travels with the config to every traced step (decode_trace reads it)
    config = configured(hf.load_config(getattr(model_or_config, "config", model_or_config)), attn_implementation)
    geometry = kv_cache.kv_geometry(config)
    _check_lengths(prompt_tokens, new_tokens, batch, geometry)
    compute = weight_formats.compute_dtype(dtype, weights, hf.declared_dtype(config), dev)
    fmt = weight_formats.check(weights or {"float16": "fp16", "float32": "fp32"}.get(compute, "bf16"), dev)
    weight_formats.check_engine(fmt, "hf")
    kv_dtype = kv_dtype or compute
    if quant_kernel != "auto" and weight_formats.kernel_for(fmt, dev, prefill=False, rows=batch) is None:
        raise InvalidInputError(
            f"--quant-kernel {quant_kernel} applies to weight-only formats (int8, nf4, int4, int4-g32, fp8 before "
            f"Hopper); {fmt.name} weights on {dev.name} are read by the GEMM as they are"
        )
    name = config.name_or_path or config.model_type
    prefill = moe.apply(
        weight_formats.apply(
            prefill_graph(config, batch=batch, prompt=prompt_tokens, dtype=compute), fmt, dev, kernel="fused"
        ),
        config,
        batch * prompt_tokens,
    )
    prefill, prefill_comm = tp_ranks.shard(prefill, tp)
    if weight_formats.kernel_for(fmt, dev, prefill=True, rows=batch * prompt_tokens, choice=quant_kernel) == (
        "dequantize"
    ):
        prefill = weight_formats.with_dequantize(prefill, fmt, dev)  # each rank widens its own shard
    from perfpredict.predictors.base import RunConfig

    run = RunConfig(weights_built_in=None, mode=mode, host=host)  # the two timelines of every step, on this host
    pre = _predict(prefill, dev, run)
    ttft_ms = pre.latency_ms.value + tp_ranks.comm_s(prefill_comm, tp, link) * 1e3
    contexts = _contexts(prompt_tokens, new_tokens)
    ranks = (tp, link)
    points = [
        _decode_point(config, dev, fmt, run, cache, batch, c, compute, prompt_tokens + new_tokens, ranks, quant_kernel)
        for c in contexts
    ]
    steps = _interpolated_steps(points, prompt_tokens, new_tokens)
    # one rank holds 1/tp of the key/value heads (the sharding refuses a tp that does not split them)
    kv_bytes = kv_cache.kv_cache_bytes(geometry, prompt_tokens + new_tokens, batch, kv_dtype) // tp
    # a dynamic cache's step returns each layer's new K and V: they are the KV cache, counted in kv_bytes
    step_cache = (
        kv_cache.kv_cache_bytes(geometry, points[-1][0].context + 1, batch, kv_dtype) // tp if cache == "dynamic" else 0
    )
    activations = max(pre.memory.activations_peak_bytes, points[-1][1].memory.activations_peak_bytes - step_cache)
    weights_bytes = prefill.param_bytes
    peak = weights_bytes + kv_bytes + activations + dev.runtime_overhead_bytes
    per_seq = (kv_bytes + activations) / batch
    max_batch = int(max(0, dev.memory_bytes - weights_bytes - dev.runtime_overhead_bytes) // max(per_seq, 1))
    e2e_ms = ttft_ms + float(steps.sum())
    power_w = sum(o.avg_power_w.value for _, o in points) / len(points)
    energy_j = tp * (pre.avg_power_w.value * ttft_ms + power_w * steps.sum()) * 1e-3
    price = price_usd_per_hour if price_usd_per_hour is not None else cost.price_usd_per_hour(dev)
    tokens = batch * new_tokens
    decode = tuple(p for p, _ in points)
    mean_step = float(steps.mean()) if len(steps) else 0.0
    return GenerationReport(
        model_name=name,
        device=dev.name,
        batch=batch,
        prompt_tokens=prompt_tokens,
        new_tokens=new_tokens,
        dtype=compute,
        weights=fmt.name,
        kv_dtype=kv_dtype,
        cache=cache,
        mode=mode,
        predictor=pre.latency_ms.predictor,
        ttft_ms=ttft_ms,
        tpot_mean_ms=mean_step,
        tpot_first_ms=float(steps[0]) if len(steps) else 0.0,
        tpot_last_ms=float(steps[-1]) if len(steps) else 0.0,
        e2e_ms=e2e_ms,
        tokens_per_s=tokens / e2e_ms * 1e3,
        # a batch beyond max_batch does not fit (fits=False): no more than max_batch sequences can decode at once
        decode_tokens_per_s=min(batch, max_batch) / mean_step * 1e3 if mean_step else 0.0,
        weights_bytes=int(weights_bytes),
        kv_cache_bytes=int(kv_bytes),
        activations_bytes=int(activations),
        runtime_bytes=dev.runtime_overhead_bytes,
        peak_memory_bytes=int(peak),
        device_memory_bytes=dev.memory_bytes,
        fits=peak <= dev.memory_bytes,
        max_batch=max_batch,
        energy_per_token_j=energy_j / tokens,
        cost_per_million_tokens_usd=None if price is None else price * tp * e2e_ms / 3.6e6 / tokens * 1e6,
        decode_points=decode,
        batch_sweep=_sweep(
            config,
            dev,
            fmt,
            run,
            cache,
            compute,
            contexts[len(contexts) // 2],
            max_batch,
            weights_bytes,
            per_seq,
            prompt_tokens + new_tokens,
            ranks,
            quant_kernel,
        ),
        assumptions={
            **_assumptions(fmt, dev, compute, kv_dtype, cache, mode, config, tp, link),
            "weight kernel": weight_formats.describe_kernels(fmt, dev, batch, quant_kernel),
        },
        warnings=_memory_warnings(
            _generation_memory(prefill, fmt, config, dev, (kv_bytes, activations), batch, tp),
            dev,
            max_batch,
            prompt_tokens + new_tokens,
        )
        + _mode_warnings(mode, cache),
        notes=_notes(decode, steps, dev),
        engine="hf",
        tp=tp,
        ttft_max_ms=ttft_ms,
        tp_communication_ms=decode[0].step_ms - points[0][1].latency_ms.value,
        running_batch=min(batch, max_batch),
    )


def _generation_memory(prefill: Any, fmt: Any, config: Any, dev: Any, cache_and_activations, batch: int, tp: int):
    """One GPU's memory and what ``generate``'s flags can change (``memory_remedies.GenerationMemory``)."""
    from perfpredict.llm.kv_cache import kv_geometry
    from perfpredict.llm.memory_remedies import GenerationMemory
    from perfpredict.llm.weight_formats import quantized_linears

    layer_params = sum(prefill.nodes[i].params for i in quantized_linears(prefill))
    heads = (getattr(config, "num_attention_heads", None) or 1, kv_geometry(config).kv_heads)
    kv_bytes, activations = cache_and_activations
    return GenerationMemory(
        weights_bytes=prefill.param_bytes,
        layer_weights_bytes=layer_params * fmt.bytes_per_weight,
        bytes_per_weight=fmt.bytes_per_weight,
        kv_bytes=kv_bytes,
        activations_bytes=activations,
        runtime_bytes=dev.runtime_overhead_bytes,
        batch=batch,
        tp=tp,
        tp_splits=lambda n: all(h % n == 0 for h in heads),
        gpu=dev.kind == "gpu" and dev.parent is None,
    )


def _memory_warnings(memory: Any, dev: Any, max_batch: int, tokens: int) -> tuple[str, ...]:
    """Does not fit, or fits above ``memory_advice.TIGHT_SHARE`` of the device: say so, and which of ``generate``'s
    flags brings it under, each with about what one GPU would hold after it."""
    from perfpredict.core.memory_advice import TIGHT_SHARE, describe
    from perfpredict.llm.memory_remedies import hf_remedies

    peak = memory.peak_bytes
    if peak <= dev.memory_bytes * TIGHT_SHARE:
        return ()
    share = peak / dev.memory_bytes
    if peak > dev.memory_bytes:
        head = f"does not fit: needs {peak / GIB:.1f} GiB, {dev.name} has {dev.memory_bytes / GIB:.1f} GiB"
    else:
        head = (
            f"peak memory {peak / GIB:.2f} GiB of {dev.memory_bytes / GIB:.2f} GiB ({share:.0%}): fits, but above "
            f"{TIGHT_SHARE:.0%}; allocator fragmentation or a longer context may not fit"
        )
    target = TIGHT_SHARE * dev.memory_bytes
    found = "; ".join(describe(r, target) for r in hf_remedies(memory, target))
    under = f"; to bring it under {TIGHT_SHARE:.0%} ({target / GIB:.2f} GiB): {found}" if found else ""
    return (f"{head}; at most {max_batch} sequences fit at {tokens} tokens (a shorter context fits more){under}",)


def _check_lengths(prompt: int, new: int, batch: int, geometry: Any) -> None:
    if prompt < 1 or batch < 1:
        raise InvalidInputError("--prompt-tokens and --batch must be at least 1")
    if new < 1:
        raise InvalidInputError(f"--new-tokens {new}: generate at least one token")
    if geometry.max_positions and prompt + new > geometry.max_positions:
        raise InvalidInputError(
            f"prompt {prompt} + new {new} tokens = {prompt + new} is beyond the model's "
            f"{geometry.max_positions} positions; shorten one of them"
        )


def _predict(graph: Any, device: Any, run: Any):
    """The two-timeline prediction of ``graph`` under ``run`` (a RunConfig: the mode and the host)."""
    from perfpredict.predictors.registry import get_predictor

    return get_predictor("two_timeline").predict(graph, device, run)


def _contexts(prompt: int, new: int) -> list[int]:
    """Cache lengths of the decode steps to trace: the first step (the prompt plus the first token) to the last."""
    first, last = prompt + 1, prompt + max(new - 1, 1)
    return sorted({int(round(c)) for c in np.linspace(first, last, DECODE_POINTS)})


def _decode_graph(config, device, fmt, cache, batch, context, dtype, max_len=None):
    """One decode step's graph, its layer weights in ``fmt`` (read compressed) and its experts (MoE) those the
    batch reaches."""
    from perfpredict.llm import moe, weight_formats
    from perfpredict.llm.decode_trace import decode_graph

    graph = decode_graph(config, batch=batch, context=context, dtype=dtype, cache=cache, max_cache_len=max_len)
    return moe.apply(weight_formats.apply(graph, fmt, device, kernel="fused"), config, batch)


def _rank_step(config, device, fmt, cache, batch, context, dtype, max_len, tp, quant_kernel="auto", rows=None):
    """(one rank's decode step, its collectives): sharded, then each weight-only matmul given the kernel chosen for
    ``rows`` input rows (default the batch): a dequantize op before it where that kernel is dequantize-then-GEMM."""
    from perfpredict.llm import tp_ranks, weight_formats

    graph, collectives = tp_ranks.shard(_decode_graph(config, device, fmt, cache, batch, context, dtype, max_len), tp)
    kernel = weight_formats.kernel_for(fmt, device, prefill=False, rows=rows or batch, choice=quant_kernel)
    if kernel == "dequantize":
        graph = weight_formats.with_dequantize(graph, fmt, device)
    return graph, collectives


def _decode_point(
    config, device, fmt, run, cache, batch, context, dtype, max_len, ranks=(1, None), quant_kernel="auto"
):
    """One decode step on one rank: its two timelines, plus the tensor-parallel collectives on the critical path."""
    from perfpredict.llm import tp_ranks

    tp, link = ranks
    graph, collectives = _rank_step(config, device, fmt, cache, batch, context, dtype, max_len, tp, quant_kernel)
    out = _predict(graph, device, run)
    t = out.timeline
    comm_ms = tp_ranks.comm_s(collectives, tp, link) * 1e3
    streaming = graph.param_bytes / device.memory_bandwidth_bytes_per_s * 1e3
    return DecodePoint(context, out.latency_ms.value + comm_ms, t.device_ms, t.host_ms, streaming), out


def _interpolated_steps(points: list, prompt: int, new: int) -> np.ndarray:
    """Milliseconds of each decode step (new - 1 of them: the prefill makes the first token)."""
    contexts = np.arange(prompt + 1, prompt + new, dtype=float)
    xs = np.array([p.context for p, _ in points], dtype=float)
    # a longer context only adds K/V to read: the learned per-op efficiency may still dip at one attention shape,
    # so a step is never predicted faster than a step before it
    ys = np.maximum.accumulate(np.array([p.step_ms for p, _ in points]))
    return np.interp(contexts, xs, ys) if len(contexts) else np.zeros(0)


def _sweep(
    config,
    device,
    fmt,
    run,
    cache,
    dtype,
    context,
    max_batch,
    weights_bytes,
    per_seq,
    max_len,
    ranks=(1, None),
    quant_kernel="auto",
) -> tuple:
    """Tokens/s of the middle decode step for batch 1, 2, 4, ... up to the largest that fits (and one beyond)."""
    from perfpredict.llm import weight_formats

    top = min(max(max_batch, 1) * 2, SWEEP_MAX_BATCH)
    batches = np.unique(np.concatenate([2 ** np.arange(int(np.log2(top)) + 1), [max(max_batch, 1)]])).astype(float)
    # the steps of more than one row, fitted at batch 2 and 3; batch 1 on its own where its weight kernel differs
    # (bitsandbytes' nf4: a fused gemv for one row, dequantize-then-GEMM for more)
    step_ms, share, host_bound = _swept(config, device, fmt, run, cache, dtype, context, max_len, ranks,
                                              quant_kernel, batches, rows=2)  # fmt: skip
    kernel = functools.partial(weight_formats.kernel_for, fmt, device, prefill=False, choice=quant_kernel)
    if kernel(rows=1) != kernel(rows=2):
        one = _swept(config, device, fmt, run, cache, dtype, context, max_len, ranks, quant_kernel,
                     np.array([1.0]), rows=1)  # fmt: skip
        for full, single in zip((step_ms, share, host_bound), one):
            full[batches == 1] = single[0]
    return tuple(
        BatchPoint(
            int(b),
            float(t),
            float(b / t * 1e3),
            float(s),
            bool(weights_bytes + device.runtime_overhead_bytes + per_seq * b <= device.memory_bytes),
            bool(hb),
        )
        for b, t, s, hb in zip(batches, step_ms, share, host_bound)
    )


def _swept(config, device, fmt, run, cache, dtype, context, max_len, ranks, quant_kernel, batches, rows):
    """(step ms, compute share, host-bound) at ``batches`` of the decode step fitted at batch 2 and 3, its
    weight-only matmuls run with the kernel for ``rows`` input rows."""
    from perfpredict.llm import tp_ranks
    from perfpredict.predictors.cost_arrays import CostArrays
    from perfpredict.predictors.registry import get_predictor

    tp, link = ranks
    # NB: a MoE step's expert reads are not affine in the batch; the sweep takes them at batch 2 and 3 as they are
    shards = [
        _rank_step(config, device, fmt, cache, b, context, dtype, max_len, tp, quant_kernel, rows) for b in (2, 3)
    ]
    arrays = CostArrays.fit(shards[0][0], shards[1][0])
    predictor = get_predictor("two_timeline")
    config_run = run
    ev = predictor.evaluate(arrays, device, config_run, batches)
    steps, _ = predictor.timelines(arrays, device, config_run, batches)
    host_bound = steps.host_s > steps.device_s  # the launches outlast the kernels: the GPU waits for the host
    comm_s = np.array([tp_ranks.comm_s(shards[0][1], tp, link, scale=b / 2) for b in batches])
    busy = np.maximum(ev.compute_s, ev.memory_s)
    share = np.where(ev.compute_s >= ev.memory_s, busy, 0).sum(axis=0) / np.maximum(busy.sum(axis=0), 1e-30)
    return (ev.latency_s + comm_s) * 1e3, share, host_bound


def _assumptions(fmt, device, compute, kv_dtype, cache, mode, config, tp=1, link=None) -> dict[str, str]:
    from perfpredict.compiler_hooks.attention_choice import NOTE_PREFIX, asked_of, note
    from perfpredict.llm import moe, weight_formats

    asked = asked_of(config)
    out = {
        "engine": "transformers' generate (the model's own modules), one step per token",
        "attention": note(asked or "sdpa", asked is not None).removeprefix(NOTE_PREFIX),
        "compute dtype": compute,
        "weights": f"{fmt.name}: {fmt.bytes_per_weight:g} bytes per layer weight, "
        f"{weight_formats.route(fmt, device)} on {device.name} (embeddings and LM head in {compute})",
        "kv cache": f"{kv_dtype}, HF {cache} cache",
        "mode": mode,
        "prefill": "logits of the last position only, as generate() computes them",
    }
    if tp > 1:
        out["tensor parallel"] = (
            f"tp={tp}, Megatron-style (as predict --tp): q/k/v and gate/up column-parallel, output and down "
            f"row-parallel with an all-reduce each on the critical path, the vocabulary split; on {link.description}"
        )
    if moe.experts_of(config):
        e, k = moe.experts_of(config)
        out["expert weights"] = (
            f"in {compute} whatever --weights says (their grouped GEMMs are not quantized "
            "here); the weight-streaming bound counts every expert"
        )
        out["experts"] = (
            f"{e} experts per layer, {k} per token, routed uniformly: a decode step of batch B streams "
            f"the weights of E(1-(1-k/E)^B) experts ({moe.expected_experts(e, k, 1):.1f} at batch 1, "
            f"{moe.expected_experts(e, k, 16):.1f} at 16); hot experts make it fewer"
        )
    return out


def _mode_warnings(mode: str, cache: str) -> tuple[str, ...]:
    if mode == "compiled" and cache == "dynamic":
        return (
            "torch.compile with HF's dynamic cache: the cache's length changes every step, so dynamo recompiles "
            "(then traces dynamic shapes) and none of it is in this time; transformers recommends the static cache "
            "with torch.compile (the default), which also allows --mode compiled_cuda_graph",
        )
    return ()


def _notes(decode: tuple, steps: np.ndarray, device: Any) -> tuple[str, ...]:
    if not decode:
        return ()
    first = decode[0]
    ratio = first.device_ms / first.weight_streaming_ms if first.weight_streaming_ms else float("nan")
    host = (
        " and the step is host-bound (CUDA graphs or torch.compile would cut it)"
        if first.host_ms > first.device_ms
        else ""
    )
    return (
        f"the first decode step's device time is {ratio:.2f}x the weight-streaming bound "
        f"({first.weight_streaming_ms:.2f} ms: the weights over {device.name}'s {device.memory_label} bandwidth); the gap is the KV "
        f"cache read, the cache update, the small kernels' floor and the achieved bandwidth{host}",
    )
