"""Generation on a serving engine (vLLM, SGLang, TensorRT-LLM, DeepSpeed-MII, llama.cpp: ``engine_versions``), on
one GPU, ``tp`` tensor-parallel GPUs, and ``pp`` pipeline stages of them.

The pieces: the model's sizes (``decoder_spec``), the engine's settings with its version's defaults
(``vllm_config``), the KV pool it reserves at start-up (``paged_kv``), the GPU time of each step from the device
model (``step_costs`` on ``engine_graph``), the engine's host time per step (``host_costs``: where each phase runs,
per version and frontend), the scheduler run step by step over the batch (``scheduler``), the report's power
(``engine_power``) and assumptions (``engine_assumptions``). Nothing here traces the HuggingFace model, so an answer
costs well under a second for any size.

Pipeline parallelism as vLLM's V0 engine runs it (V1's batch queue does the same): the layers are split into pp
stages (the slowest, with ceil(layers/pp) of them, paces the pipeline: ``stage_spec``), and the engine runs pp
virtual engines, each with its own scheduler, a pp-th of the KV blocks (vLLM divides ``num_gpu_blocks`` by pp)
and up to ``max_num_seqs`` sequences; requests go to the least loaded, so the batch splits evenly. Each virtual
engine's step passes through the stages in turn while the others' steps fill the other stages, so one virtual
engine's run (``ceil(batch/pp)`` sequences) is the whole run's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.ops import DTYPE_BYTES
from perfpredict.llm import engine_calibration, engine_power, paged_kv, weight_formats
from perfpredict.llm.engine_assumptions import assumptions
from perfpredict.llm.engine_graph import Numerics, rank_shape, weight_elements
from perfpredict.llm.generation_report import BatchPoint, DecodePoint, GenerationReport
from perfpredict.llm.scheduler import Scheduler
from perfpredict.llm.step_costs import EngineModel, StepCosts
from perfpredict.llm.tp_comm import CommModel
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

    @property
    def pp(self) -> int:
        return self.model.pp

    @property
    def engine_kv(self) -> paged_kv.KvPlan:
        """The KV blocks one virtual engine's scheduler manages (all of them without pipeline parallelism)."""
        return dataclasses.replace(self.kv, blocks=self.kv.blocks // self.pp)

    def engine_batch(self, batch: int) -> int:
        """The sequences of ``batch`` one virtual engine runs (the least-loaded engine takes each request)."""
        return -(-batch // self.pp)

    def largest_batch(self, tokens: int) -> int:
        """Sequences of ``tokens`` tokens the engine holds at once: every virtual engine's KV blocks and limit."""
        per_engine = min(self.engine_kv.max_seqs_at(tokens), self.model.engine.max_num_seqs)
        return per_engine * self.pp


def stage_spec(spec: Any, pp: int) -> Any:
    """One pipeline stage's share of the model: ceil(layers / pp) layers (the slowest stage paces the pipeline)."""
    if pp < 1 or pp > spec.layers:
        raise InvalidInputError(f"--pp {pp} must be from 1 to the {spec.layers} layers of {spec.name}")
    return spec if pp == 1 else dataclasses.replace(spec, layers=-(-spec.layers // pp))


def setup(model_or_config: Any, *, device: str, tp: int = 1, pp: int = 1, dtype: str | None = None,
          weights: str | None = None, kv_dtype: str | None = None, engine: EngineConfig | None = None,
          constants: dict | None = None, host: str | None = None, options: Any = None,
          identical_requests: bool = False) -> Setup:  # fmt: skip
    """The engine for one model on ``tp`` x ``pp`` GPUs of ``device``; refuses what the engine would refuse at
    start-up. ``options``: an ``EngineOptions`` (engine, version, frontend; default: vLLM's current version,
    offline). ``identical_requests``: every request is the same prompt (a benchmark's dummy input), so a mixture of
    experts routes a step's tokens to the same experts."""
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
    spec = stage_spec(spec_from(model_or_config), pp)
    compute = weight_formats.compute_dtype(dtype, weights, spec.declared_dtype, dev)
    fmt = weight_formats.check(weights or {"float16": "fp16", "float32": "fp32"}.get(compute, "bf16"), dev)
    weight_formats.check_engine(fmt, version.engine)
    kv_dtype = kv_dtype or compute
    config = engine if engine is not None else (opts.settings or EngineConfig())
    split = not version.tensor_parallel and tp > 1  # llama.cpp: the layers split over the GPUs, run in turn
    if split and (pp > 1 or config.enable_expert_parallel):
        raise InvalidInputError(
            f"{version.name} splits its layers over the {tp} GPUs (--split-mode layer); it has no --pp or expert "
            "parallelism: drop them"
        )
    rank = rank_shape(spec, 1 if split else tp, config.enable_expert_parallel)
    resolved = resolve(config, max_positions=spec.max_positions, window=spec.window, head_dim=spec.head_dim,
                       kv_dtype=kv_dtype, dtype=compute, device=dev, version=version,
                       frontend=opts.frontend)  # fmt: skip
    num = _numerics(fmt, dev, compute, kv_dtype)
    c = constants or engine_calibration.constants(version.key)
    on_gpu = _gpu_layers(config, spec, version)

    def start(tp_: int, fmt_name: str) -> tuple[int, int, int]:
        """(weights, the start-up profile's activations, runtime) on one of ``tp_`` GPUs in ``fmt_name``."""
        rank_ = rank_shape(spec, 1 if split else tp_, config.enable_expert_parallel)
        per_weight = _numerics(weight_formats.FORMATS[fmt_name], dev, compute, kv_dtype).weight_bytes
        layer, other = weight_elements(spec, rank_)
        tokens = resolved.max_num_batched_tokens
        seqs = min(resolved.max_num_seqs, tokens)
        activation = paged_kv.profile_activation_bytes(spec, rank_, tokens, seqs, compute)
        weights_ = int(layer * on_gpu / spec.layers * per_weight + other * DTYPE_BYTES[compute])
        return weights_ // (tp_ if split else 1), activation, runtime_bytes(c, tp_ * pp)

    weights_bytes, activation, runtime = start(tp, fmt.name)
    kv = paged_kv.plan(spec, rank, device=dev, utilization=resolved.memory_fraction, weights_bytes=weights_bytes,
                       activation_bytes=activation, runtime_bytes=runtime, block_size=resolved.block_size,
                       kv_dtype=kv_dtype, memory=version.memory,
                       layers=-(-on_gpu // tp) if split else on_gpu)  # fmt: skip
    remedies = _start_remedies(start, spec, dev, tp, fmt, kv.budget_bytes) if kv.blocks <= 0 else ""
    paged_kv.check_starts(kv, max_model_len=resolved.max_model_len, name=spec.name, device=dev.name, tp=tp,
                          utilization=resolved.memory_fraction, engine=version.name, remedies=remedies)  # fmt: skip
    comm = CommModel(dev, tp, pp, not config.disable_custom_all_reduce) if tp * pp > 1 and not split else None
    model = EngineModel(spec, rank, num, dev, resolved, None if split else link_for(dev, tp),
                        bool(c["paged_v1_rereads_kv"]), host, pp, comm, c["decode_kernel_scale"],
                        c["prefill_kernel_scale"], identical_requests)  # fmt: skip
    cost = host_cost(version, opts.host_choices())
    return Setup(model, kv, StepCosts(model, resolved.max_num_seqs), fmt, c, opts, cost, tp * pp)


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


def _start_remedies(start, spec, dev, tp: int, fmt, budget: int) -> str:
    """``generate``'s flags that leave this engine room for a KV cache, each with what one GPU needs before it."""
    from perfpredict.core.memory_advice import describe
    from perfpredict.llm.engine_graph import splits
    from perfpredict.llm.memory_remedies import vllm_remedies

    one_byte = "fp8" if weight_formats.route(weight_formats.FORMATS["fp8"], dev) == "native" else "int8"
    smaller = [f for f in (one_byte, "int4") if weight_formats.FORMATS[f].bytes_per_weight < fmt.bytes_per_weight]
    found = vllm_remedies(
        lambda tp_, name: sum(start(tp_, name or fmt.name)), tp, lambda n: splits(spec, n), smaller, budget
    )
    return "; ".join(describe(r, budget) for r in found)


def runtime_bytes(constants: dict, gpus: int) -> int:
    """Memory outside torch's allocator per GPU: the fitted base, and its multi-GPU part where there are several."""
    return int(constants["runtime_bytes"] + (constants["runtime_tp_bytes"] if gpus > 1 else 0.0))


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
                 tp: int = 1, pp: int = 1, dtype: str | None = None, weights: str | None = None,
                 kv_dtype: str | None = None, engine: EngineConfig | None = None,
                 price_usd_per_hour: float | None = None, sweep: bool = True, host: str | None = None,
                 options: Any = None) -> GenerationReport:  # fmt: skip
    """The GenerationReport of ``batch`` requests through a serving engine (``options``: an EngineOptions; default
    vLLM's current version, offline) on ``tp`` x ``pp`` GPUs; ``host`` times the launches of its eager steps (the
    engine's own host time per step is ``host_costs``')."""
    s = setup(model_or_config, device=device, tp=tp, pp=pp, dtype=dtype, weights=weights, kv_dtype=kv_dtype,
              engine=engine, host=host, options=options)  # fmt: skip
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
    """The scheduler's run of ``batch`` requests (a ``scheduler.Trace``; with pipeline parallelism, one virtual
    engine's share of them, whose run is the whole run's); ``host`` replaces the engine's host cost (a fit's
    trial)."""
    scheduler = Scheduler(s.costs, s.engine_kv, s.model.engine, host or s.host_cost, s.gpus, s.pp)
    return scheduler.run(s.engine_batch(batch), prompt, new)


def _report(s: Setup, trace, batch: int, prompt: int, new: int, price, sweep: bool) -> GenerationReport:
    from perfpredict.hardware import cost

    m, kv, dev = s.model, s.kv, s.model.device
    e2e_ms = trace.e2e_s * 1e3
    ttft = np.array(trace.ttft_s) * 1e3
    tpot = float(np.mean(trace.tpot_s)) * 1e3 if new > 1 else 0.0
    points = _decode_points(s, batch, prompt, new)
    largest = s.largest_batch(prompt + new)
    running = max(1, min(batch, largest))  # the sequences decoding together: the others wait for cache space
    stepping = s.engine_batch(running)  # of them, the ones in one virtual engine's step
    power_w = engine_power.run_power_w(s, trace, stepping, prompt, new)
    energy_j = s.gpus * power_w * trace.e2e_s
    tokens = batch * new
    price = price if price is not None else cost.price_usd_per_hour(dev)
    kv_used = trace.peak_blocks * kv.block_bytes * s.pp  # every virtual engine's blocks
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
        tp=s.gpus // s.pp,
        ttft_max_ms=float(ttft.max()),
        tp_communication_ms=s.costs.collectives_s(stepping, stepping) * 1e3,
        kv_pool_bytes=kv.kv_pool_bytes,
        kv_capacity_tokens=kv.capacity_tokens,
        preemptions=trace.preemptions,
        prefill_steps=trace.prefill_steps,
        decode_steps=trace.decode_steps,
        host_ms=trace.host_s * 1e3,
        running_batch=running,
        pp=s.pp,
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
    running = s.engine_batch(max(1, min(batch, s.largest_batch(prompt + new))))
    out = []
    for context in sorted({prompt + 1, prompt + max(new // 2, 1), prompt + max(new - 1, 1)}):
        gpu = s.costs.decode_s(running, running * context, context)
        host_s = s.host_cost.step(running, 0, running, s.gpus).exposed_s(gpu, s.pp)
        streaming = s.pp * s.kv.weights_bytes / s.model.device.memory_bandwidth_bytes_per_s  # every stage
        out.append(DecodePoint(context, (gpu + host_s) * 1e3, gpu * 1e3, host_s * 1e3, streaming * 1e3))
    return out


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
