"""``engine="vllm"``: generation on a vLLM-class serving engine, on one GPU or ``tp`` tensor-parallel GPUs.

The pieces: the model's sizes (``decoder_spec``), the engine's settings with vLLM v0.6's defaults
(``vllm_config``), the KV pool it reserves at start-up (``paged_kv``), the GPU time of each step from the device
model (``step_costs`` on ``engine_graph``), the engine's host time per step (``engine_calibration``), and the
scheduler run step by step over the batch (``scheduler``). Nothing here traces the HuggingFace model, so an answer
costs well under a second for any size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.ops import DTYPE_BYTES
from perfpredict.core.units import GIB
from perfpredict.llm import engine_calibration, paged_kv, weight_formats
from perfpredict.llm.engine_graph import Numerics, rank_shape, weight_elements
from perfpredict.llm.generation_report import BatchPoint, DecodePoint, GenerationReport
from perfpredict.llm.scheduler import Scheduler
from perfpredict.llm.step_costs import EngineModel, StepCosts
from perfpredict.llm.tp_ranks import link_for
from perfpredict.llm.vllm_config import EngineConfig, resolve

SWEEP_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Setup:
    """Everything decided before the run: the engine model, its KV pool, its host time and its version."""

    model: EngineModel
    kv: paged_kv.KvPlan
    costs: StepCosts
    fmt: Any
    constants: dict
    options: Any = None  # the EngineOptions asked
    host_cost: Any = None  # host_costs.HostCost: the engine's host phases per step
    gpus: int = 1  # GPUs the model runs on (tensor-parallel ranks, or llama.cpp's layer split)

    @property
    def version(self):
        return self.model.engine.engine_version


def setup(model_or_config: Any, *, device: str, tp: int = 1, dtype: str | None = None, weights: str | None = None,
          kv_dtype: str | None = None, engine: EngineConfig | None = None, constants: dict | None = None,
          host: str | None = None, options: Any = None, identical_requests: bool = False) -> Setup:  # fmt: skip
    """The engine for one model on ``tp`` GPUs of ``device``; refuses what the engine would refuse at start-up.
    ``options``: an ``EngineOptions`` (engine, version, frontend; default: vLLM's current version, offline).
    ``identical_requests``: every request is the same prompt (a benchmark's dummy input), so a mixture of experts
    routes a step's tokens to the same experts."""
    from perfpredict.hardware.devices import get_device
    from perfpredict.llm.decoder_spec import spec_from
    from perfpredict.llm.engine_versions import get_version
    from perfpredict.llm.generation_options import EngineOptions
    from perfpredict.llm.host_costs import host_cost

    opts = options or EngineOptions(engine="vllm")
    version = get_version(opts.engine if opts.serving else "vllm", opts.version)
    dev = get_device(device)
    if dev.kind != "gpu":
        raise InvalidInputError(f"{version.name} runs on CUDA GPUs; {dev.name} is a {dev.kind}: use --engine hf")
    spec = spec_from(model_or_config)
    compute = weight_formats.compute_dtype(dtype, weights, spec.declared_dtype, dev)
    fmt = weight_formats.check(weights or {"float16": "fp16", "float32": "fp32"}.get(compute, "bf16"), dev)
    weight_formats.check_engine(fmt, version.engine)
    kv_dtype = kv_dtype or compute
    split = not version.tensor_parallel and tp > 1  # llama.cpp: the layers split over the GPUs, run in turn
    rank = rank_shape(spec, 1 if split else tp)
    config = engine if engine is not None else (opts.settings or EngineConfig())
    resolved = resolve(config, max_positions=spec.max_positions, window=spec.window, head_dim=spec.head_dim,
                       kv_dtype=kv_dtype, dtype=compute, device=dev, version=version,
                       frontend=opts.frontend)  # fmt: skip
    num = _numerics(fmt, dev, compute, kv_dtype)
    c = constants or engine_calibration.constants(version.key)
    layer, other = weight_elements(spec, rank)
    on_gpu = _gpu_layers(config, spec, version)
    weights_bytes = int(layer * on_gpu / spec.layers * num.weight_bytes + other * DTYPE_BYTES[compute])
    tokens = resolved.max_num_batched_tokens
    activation = paged_kv.profile_activation_bytes(spec, rank, tokens, min(resolved.max_num_seqs, tokens), compute)
    gpus = tp
    layers = -(-on_gpu // tp) if split else on_gpu
    kv = paged_kv.plan(spec, rank, device=dev, utilization=resolved.memory_fraction,
                       weights_bytes=weights_bytes // (tp if split else 1), activation_bytes=activation,
                       runtime_bytes=runtime_bytes(c, tp), block_size=resolved.block_size, kv_dtype=kv_dtype,
                       memory=version.memory, layers=layers)  # fmt: skip
    paged_kv.check_starts(kv, max_model_len=resolved.max_model_len, name=spec.name, device=dev.name, tp=tp,
                          utilization=resolved.memory_fraction, engine=version.name)  # fmt: skip
    link = None if split else link_for(dev, tp)
    model = EngineModel(spec, rank, num, dev, resolved, link, bool(c["paged_v1_rereads_kv"]), host,
                        c["decode_kernel_scale"], c["prefill_kernel_scale"], identical_requests)  # fmt: skip
    cost = host_cost(version, opts.host_choices())
    return Setup(model, kv, StepCosts(model, resolved.max_num_seqs), fmt, c, opts, cost, gpus)


def _gpu_layers(config: EngineConfig, spec, version) -> int:
    """The layers on the GPU(s): all, or llama.cpp's ``--n-gpu-layers`` (the rest, and their KV cache, stay on the
    host CPU); refused for another engine."""
    if config.n_gpu_layers is None:
        return spec.layers
    if version.engine != "llamacpp":
        raise InvalidInputError(
            f"--n-gpu-layers is llama.cpp's (offloading layers to the CPU); {version.name} keeps every layer on the "
            "GPU: drop it, or use --engine llamacpp"
        )
    return min(config.n_gpu_layers, spec.layers)


def runtime_bytes(constants: dict, tp: int) -> int:
    """Memory outside torch's allocator per GPU: the fitted base, and its tensor-parallel part where tp > 1."""
    return int(constants["runtime_bytes"] + (constants["runtime_tp_bytes"] if tp > 1 else 0.0))


def _numerics(fmt, device, compute: str, kv_dtype: str) -> Numerics:
    """Bytes per layer weight; vLLM's weight-only kernels (Marlin for AWQ/GPTQ int4 and fp8 before Hopper, its
    int8 kernels) dequantize inside the GEMM, except bitsandbytes' nf4, which writes a compute-dtype copy first
    on a many-token step."""
    dequant = 2.0 * DTYPE_BYTES[compute] if fmt.name == "nf4" else 0.0
    if weight_formats.route(fmt, device) == "native" and fmt.compute_dtype in ("float32", "bfloat16", "float16"):
        per_weight = float(DTYPE_BYTES[compute])
    else:
        per_weight = fmt.bytes_per_weight
    return Numerics(compute, kv_dtype, per_weight, dequant)


def predict_vllm(model_or_config: Any, *, prompt_tokens: int, new_tokens: int, batch: int, device: str,
                 tp: int = 1, dtype: str | None = None, weights: str | None = None, kv_dtype: str | None = None,
                 engine: EngineConfig | None = None, price_usd_per_hour: float | None = None,
                 sweep: bool = True, host: str | None = None, options: Any = None) -> GenerationReport:  # fmt: skip
    """The GenerationReport of ``batch`` requests through a serving engine (``options``: an EngineOptions; default
    vLLM's current version, offline) on ``tp`` GPUs; ``host`` times the launches of its eager steps (the engine's
    own host time per step is ``host_costs``')."""
    s = setup(model_or_config, device=device, tp=tp, dtype=dtype, weights=weights, kv_dtype=kv_dtype, engine=engine,
              host=host, options=options)  # fmt: skip
    limit = s.model.engine.max_model_len
    if prompt_tokens + new_tokens > limit:
        what = (
            f"the model's {limit} positions"
            if limit == s.model.spec.max_positions
            else f"max_model_len {limit} (raise --max-model-len)"
        )
        raise InvalidInputError(
            f"prompt {prompt_tokens} + new {new_tokens} tokens = {prompt_tokens + new_tokens} is beyond {what}; "
            "shorten one of them"
        )
    trace = run(s, batch, prompt_tokens, new_tokens)
    return _report(s, trace, batch, prompt_tokens, new_tokens, price_usd_per_hour, sweep)


def run(s: Setup, batch: int, prompt: int, new: int, host: Any = None):
    """The scheduler's run of ``batch`` requests (a ``scheduler.Trace``); ``host`` replaces the engine's host
    cost (a fit's trial)."""
    return Scheduler(s.costs, s.kv, s.model.engine, host or s.host_cost, s.gpus).run(batch, prompt, new)


def _report(s: Setup, trace, batch: int, prompt: int, new: int, price, sweep: bool) -> GenerationReport:
    from perfpredict.hardware import cost

    m, kv, dev = s.model, s.kv, s.model.device
    e2e_ms = trace.e2e_s * 1e3
    ttft = np.array(trace.ttft_s) * 1e3
    tpot = float(np.mean(trace.tpot_s)) * 1e3 if new > 1 else 0.0
    points = _decode_points(s, batch, prompt, new)
    power_w = run_power_w(s, trace, batch, prompt, new)
    energy_j = s.gpus * power_w * trace.e2e_s
    tokens = batch * new
    price = price if price is not None else cost.price_usd_per_hour(dev)
    kv_used = trace.peak_blocks * kv.block_bytes
    largest = min(kv.max_seqs_at(prompt + new), m.engine.max_num_seqs)
    running = max(1, min(batch, largest))  # the sequences decoding together: the others wait for cache space
    v = s.version
    return GenerationReport(
        model_name=m.spec.name,
        device=dev.name,
        batch=batch,
        prompt_tokens=prompt,
        new_tokens=new,
        dtype=m.num.dtype,
        weights=s.fmt.name,
        kv_dtype=m.num.kv_dtype,
        cache="paged",
        mode=_mode_label(s),
        predictor="two_timeline",
        ttft_ms=float(ttft.mean()),
        tpot_mean_ms=tpot,
        tpot_first_ms=points[0].step_ms,
        tpot_last_ms=points[-1].step_ms,
        e2e_ms=e2e_ms,
        tokens_per_s=tokens / trace.e2e_s,
        decode_tokens_per_s=running / tpot * 1e3 if tpot else 0.0,
        weights_bytes=kv.weights_bytes,
        kv_cache_bytes=int(kv_used),
        activations_bytes=kv.activation_bytes,
        runtime_bytes=kv.runtime_bytes,
        peak_memory_bytes=kv.weights_bytes + kv.activation_bytes + kv.kv_pool_bytes + kv.runtime_bytes,
        device_memory_bytes=kv.memory_bytes,
        fits=True,
        max_batch=largest,
        energy_per_token_j=energy_j / tokens,
        cost_per_million_tokens_usd=None if price is None else price * s.gpus * e2e_ms / 3.6e6 / tokens * 1e6,
        decode_points=tuple(points),
        batch_sweep=_sweep(s, prompt, new, largest) if sweep else (),
        assumptions=assumptions(s),
        warnings=_warnings(trace, batch, largest, prompt + new),
        notes=(),
        engine=v.engine,
        tp=s.gpus,
        ttft_max_ms=float(ttft.max()),
        tp_communication_ms=s.costs.collectives_s(min(batch, largest), min(batch, largest)) * 1e3,
        kv_pool_bytes=kv.kv_pool_bytes,
        kv_capacity_tokens=kv.capacity_tokens,
        preemptions=trace.preemptions,
        prefill_steps=trace.prefill_steps,
        decode_steps=trace.decode_steps,
        host_ms=trace.host_s * 1e3,
        running_batch=running,
        engine_version=v.version,
        engine_label=v.label,
        frontend=s.options.frontend if s.options else "offline",
        gpu_busy_fraction=(trace.prefill_gpu_s + trace.decode_gpu_s) / trace.e2e_s if trace.e2e_s else 0.0,
        power_per_gpu_w=power_w,
    )


def _mode_label(s: Setup) -> str:
    if s.model.engine.config.enforce_eager:
        return "eager"
    return {"decode": "cuda_graph decode", "piecewise": "piecewise cuda_graph", "one-token": "cuda_graph decode",
            "none": "c++ launches" if s.version.runtime == "c++" else "eager"}[s.version.graphs]  # fmt: skip


def _decode_points(s: Setup, batch: int, prompt: int, new: int) -> list[DecodePoint]:
    """The decode step (GPU and host) at the first, middle and last context, for the batch that runs together."""
    running = max(1, min(batch, s.kv.max_seqs_at(prompt + new), s.model.engine.max_num_seqs))
    out = []
    for context in sorted({prompt + 1, prompt + max(new // 2, 1), prompt + max(new - 1, 1)}):
        gpu = s.costs.decode_s(running, running * context, context)
        host_s = s.host_cost.step(running, 0, running, s.gpus).exposed_s(gpu)
        streaming = s.kv.weights_bytes / s.model.device.memory_bandwidth_bytes_per_s
        out.append(DecodePoint(context, (gpu + host_s) * 1e3, gpu * 1e3, host_s * 1e3, streaming * 1e3))
    return out


def run_power_w(s: Setup, trace, batch: int, prompt: int, new: int) -> float:
    """One GPU's mean power over the run (``hardware.power``): busy the share of the wall time its kernels run,
    at the activity of a prefill step in prefill steps and of the middle decode step in decode steps, and of
    NCCL's collectives while a tensor-parallel rank waits in them."""
    from perfpredict.hardware.power import COMM_ACTIVITY, gpu_power_w, mean_activity

    running = max(1, min(batch, s.kv.max_seqs_at(prompt + new), s.model.engine.max_num_seqs))
    context = prompt + new // 2
    decode_gpu = s.costs.decode_s(running, running * context, context)
    decode_comm = s.costs.collectives_s(running, running)
    chunk = min(prompt, s.model.engine.max_num_batched_tokens)
    prefill_gpu = s.costs.prefill_s([(chunk, chunk)])
    prefill_comm = s.costs.collectives_s(chunk, 1)
    decode_share = 1 - decode_comm / decode_gpu if decode_gpu else 1.0
    prefill_share = 1 - prefill_comm / prefill_gpu if prefill_gpu else 1.0
    parts = [
        (trace.decode_gpu_s * decode_share, s.costs.activity(running, 1, context, decode_gpu - decode_comm)),
        (trace.prefill_gpu_s * prefill_share, s.costs.activity(1, chunk, chunk, prefill_gpu - prefill_comm)),
        (trace.decode_gpu_s * (1 - decode_share) + trace.prefill_gpu_s * (1 - prefill_share), COMM_ACTIVITY),
    ]
    busy = sum(p for p, _ in parts)
    return gpu_power_w(s.model.device, busy / trace.e2e_s if trace.e2e_s else 0.0, mean_activity(parts))


def _sweep(s: Setup, prompt: int, new: int, largest: int) -> tuple[BatchPoint, ...]:
    """Tokens/s of the whole run for batch 1, 2, 4, ... up to max_num_seqs: past the largest batch the KV pool
    holds, the engine preempts, and tokens/s flattens."""
    out = []
    batches = [b for b in SWEEP_BATCHES if b <= s.model.engine.max_num_seqs]
    shares = s.costs.compute_share(batches, prompt + new // 2)
    for b, share in zip(batches, shares):
        trace = run(s, b, prompt, new)
        step_ms = trace.decode_s / max(trace.decode_steps, 1) * 1e3
        out.append(BatchPoint(b, step_ms, b * new / trace.e2e_s, float(share), b <= largest))
    return tuple(out)


def _warnings(trace, batch: int, largest: int, tokens: int) -> tuple[str, ...]:
    if batch <= largest:
        return ()
    return (
        f"the KV pool holds {largest} sequences of {tokens} tokens at once; the other {batch - largest} wait, and "
        f"{trace.preemptions} preemption(s) recompute evicted sequences: tokens/s stops growing past batch {largest}",
    )


def assumptions(s: Setup) -> dict[str, str]:
    m, kv, e, v = s.model, s.kv, s.model.engine, s.version
    c = s.constants
    memory = (
        f"{e.memory_fraction:g} of the memory left after the weights, activations and runtime"
        if v.memory == "free-fraction"
        else f"{kv.budget_bytes / GIB:.1f} GiB ({e.memory_fraction:g} of the GPU) less weights "
        f"{kv.weights_bytes / GIB:.1f}, start-up profile activations {kv.activation_bytes / GIB:.2f} and "
        f"{kv.runtime_bytes / GIB:.2f} GiB outside torch"
    )
    out = {
        "engine": f"{v.label} ({v.released}); its defaults unless set: block size {e.block_size}, memory share "
        f"{e.memory_fraction:g}, max_num_seqs {e.max_num_seqs}, max_model_len {e.max_model_len}, "
        f"max_num_batched_tokens {e.max_num_batched_tokens}, chunked prefill {'on' if e.chunked_prefill else 'off'}"
        + (", prefix caching on (no shared prefixes here: no hits)" if v.prefix_caching else "")
        + (f"; {v.note}" if v.note else ""),
        "kv cache": f"{kv.blocks:,} blocks of {e.block_size} tokens ({kv.kv_pool_bytes / GIB:.1f} GiB per GPU, "
        f"{kv.capacity_tokens:,} tokens): {memory}",
        "attention": f"{e.backend}: {e.backend_reason}",
        "cuda graphs": _graphs_line(s),
        "kernels": "one GEMM for q/k/v and one for gate/up, fused add+RMSNorm, rotary, SiLU-and-mul and KV-cache "
        "write kernels; logits for one position per sequence"
        + (
            f"; {v.name}'s kernels at {c['decode_kernel_scale']:.2f}x (decode) and {c['prefill_kernel_scale']:.2f}x "
            "(prefill) the device model's time, fitted on its 7-8B rows"
            if (c["decode_kernel_scale"], c["prefill_kernel_scale"]) != (1.0, 1.0)
            else ""
        ),
        "scheduler": _scheduler_line(e, v),
        "host cost": f"{s.host_cost.label}: {s.host_cost.describe(s.gpus)} ({_host_sources(s)})",
        "frontend": _frontend_line(s),
        "weights": f"{s.fmt.name}, {m.num.weight_bytes:g} bytes per layer weight",
    }
    if m.rank.tp > 1:
        out["tensor parallel"] = (
            f"tp={m.rank.tp}: {m.rank.heads} heads, {m.rank.kv_heads} key/value heads, {m.rank.intermediate} "
            "intermediate features per GPU; two all-reduces per block, the embedding's all-reduce and the logits' "
            f"gather per step on {m.link.description} (NCCL's ring; vLLM's custom all-reduce is not modelled)"
        )
    elif s.gpus > 1:
        out["layer split"] = (
            f"{s.gpus} GPUs each hold a share of the layers and run in turn (llama.cpp's --split-mode layer): a step "
            "takes as long as on one GPU holding them all, plus a hand-over per GPU boundary (in the host cost)"
        )
    if m.spec.experts:
        out["experts"] = (
            f"{m.spec.experts} experts, {m.spec.experts_per_token} per token, routed uniformly: a step reads the "
            "experts its tokens reach; each expert's intermediate features are split over tp"
        )
    if s.costs.cpu_layers:
        from perfpredict.hardware.devices import get_device

        out["layer offload"] = (
            f"{s.costs.cpu_layers} of {m.spec.layers} layers (and their KV cache) on the host CPU "
            f"({get_device('cpu').name}: the catalog's cpu, this machine unless a device file says otherwise), run "
            "after the GPU's share of each step at their roofline; the GPU holds the rest"
        )
    return out


def _graphs_line(s: Setup) -> str:
    v, e = s.version, s.model.engine
    if e.config.enforce_eager:
        return "none (--enforce-eager): every kernel launched from Python"
    return {
        "decode": f"decode steps of up to {v.graph_max} sequences replay the captured graph of the next size up (1, 2, "
        f"4, 8, 16, ...); larger steps, prefills and contexts over {e.config.max_seq_len_to_capture:,} tokens run "
        "eagerly",
        "piecewise": f"piecewise CUDA graphs (torch.compile): every step of up to {v.graph_max} tokens replays the "
        "graph of the next size up, attention launched between the pieces; larger steps run eagerly",
        "one-token": "one-token steps replay a CUDA graph; prompt batches launch from C++",
        "none": "none: the C++ runtime launches each kernel (no Python dispatch)"
        if v.runtime == "c++"
        else "none: every kernel launched from Python",
    }[v.graphs]


def _scheduler_line(e, v) -> str:
    policy = (
        "mixed batching: whole prompts join the decodes of a step while its token budget holds them"
        if v.policy == "mixed"
        else "chunked prefill: each step decodes the running sequences, then fills its token budget with prompt chunks"
        if e.chunked_prefill
        else "prefill-first: a step runs waiting prompts alone, else decodes"
    )
    admission = (
        "a request is admitted only when its prompt and all its new tokens fit (no preemption)"
        if v.admission == "reserve"
        else "preemption by recompute"
    )
    return f"{policy}; {admission}"


def _frontend_line(s: Setup) -> str:
    o = s.options
    if o is None or o.frontend == "offline":
        return "offline: the engine's generate call in a script (no API server)"
    process = o.frontend_process or s.version.frontend_process
    where = "in the engine's process, in turn with each step" if process == "engine" else "in its own process"
    return f"{o.frontend}: streams every new token to its client and takes every request, {where}"


def _host_sources(s: Setup) -> str:
    return "; ".join(sorted({p.source for p in s.host_cost.phases if p.source}))
