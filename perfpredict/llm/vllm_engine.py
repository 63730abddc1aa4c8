"""``engine="vllm"``: generation on a vLLM-class serving engine, on one GPU, ``tp`` tensor-parallel GPUs, and ``pp``
pipeline stages of them.

The pieces: the model's sizes (``decoder_spec``), the engine's settings with vLLM v0.6's defaults
(``vllm_config``), the KV pool it reserves at start-up (``paged_kv``), the GPU time of each step from the device
model (``step_costs`` on ``engine_graph``), the engine's host time per step (``engine_calibration``), and the
scheduler run step by step over the batch (``scheduler``). Nothing here traces the HuggingFace model, so an answer
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
from perfpredict.core.units import GIB
from perfpredict.llm import engine_calibration, paged_kv, weight_formats
from perfpredict.llm.engine_graph import Numerics, rank_shape, weight_elements
from perfpredict.llm.generation_report import BatchPoint, DecodePoint, GenerationReport
from perfpredict.llm.scheduler import Scheduler
from perfpredict.llm.step_costs import EngineModel, StepCosts
from perfpredict.llm.tp_comm import CommModel
from perfpredict.llm.tp_ranks import link_for
from perfpredict.llm.vllm_config import VLLM_VERSION, EngineConfig, resolve

SWEEP_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Setup:
    """Everything decided before the run: the engine model, its KV pool and its host time."""

    model: EngineModel
    kv: paged_kv.KvPlan
    costs: StepCosts
    fmt: Any
    constants: dict

    @property
    def pp(self) -> int:
        return self.model.pp

    @property
    def gpus(self) -> int:
        return self.model.rank.tp * self.model.pp

    @property
    def engine_kv(self) -> paged_kv.KvPlan:
        """The KV blocks one virtual engine's scheduler manages (all of them without pipeline parallelism)."""
        return dataclasses.replace(self.kv, blocks=self.kv.blocks // self.pp)

    def engine_batch(self, batch: int) -> int:
        """The sequences of ``batch`` one virtual engine runs (the least-loaded engine takes each request)."""
        return -(-batch // self.pp)

    def largest_batch(self, tokens: int) -> int:
        """Sequences of ``tokens`` tokens the engine holds at once: every virtual engine's KV blocks and limit."""
        per_engine = min(self.engine_kv.max_seqs_at(tokens), self.model.engine.config.max_num_seqs)
        return per_engine * self.pp


def stage_spec(spec: Any, pp: int) -> Any:
    """One pipeline stage's share of the model: ceil(layers / pp) layers (the slowest stage paces the pipeline)."""
    if pp < 1 or pp > spec.layers:
        raise InvalidInputError(f"--pp {pp} must be from 1 to the {spec.layers} layers of {spec.name}")
    return spec if pp == 1 else dataclasses.replace(spec, layers=-(-spec.layers // pp))


def setup(model_or_config: Any, *, device: str, tp: int = 1, pp: int = 1, dtype: str | None = None,
          weights: str | None = None, kv_dtype: str | None = None, engine: EngineConfig | None = None,
          constants: dict | None = None, host: str | None = None) -> Setup:  # fmt: skip
    """The engine for one model on ``tp`` x ``pp`` GPUs of ``device``; refuses what vLLM would refuse at start-up."""
    from perfpredict.hardware.devices import get_device
    from perfpredict.llm.decoder_spec import spec_from

    dev = get_device(device)
    if dev.kind != "gpu":
        raise InvalidInputError(f"the vLLM-class engine runs on CUDA GPUs; {dev.name} is a {dev.kind}: use --engine hf")
    spec = stage_spec(spec_from(model_or_config), pp)
    compute = weight_formats.compute_dtype(dtype, weights, spec.declared_dtype, dev)
    fmt = weight_formats.check(weights or {"float16": "fp16", "float32": "fp32"}.get(compute, "bf16"), dev)
    kv_dtype = kv_dtype or compute
    config = engine or EngineConfig()
    rank = rank_shape(spec, tp, config.enable_expert_parallel)
    resolved = resolve(config, max_positions=spec.max_positions, window=spec.window, head_dim=spec.head_dim,
                       kv_dtype=kv_dtype, dtype=compute, device=dev)  # fmt: skip
    num = _numerics(fmt, dev, compute, kv_dtype)
    c = constants or engine_calibration.constants()

    def start(tp_: int, fmt_name: str) -> tuple[int, int, int]:
        """(weights, the start-up profile's activations, runtime) on one of ``tp_`` GPUs in ``fmt_name``."""
        rank_ = rank_shape(spec, tp_, config.enable_expert_parallel)
        per_weight = _numerics(weight_formats.FORMATS[fmt_name], dev, compute, kv_dtype).weight_bytes
        layer, other = weight_elements(spec, rank_)
        tokens = resolved.max_num_batched_tokens
        seqs = min(config.max_num_seqs, tokens)
        activation = paged_kv.profile_activation_bytes(spec, rank_, tokens, seqs, compute)
        return int(layer * per_weight + other * DTYPE_BYTES[compute]), activation, runtime_bytes(c, tp_ * pp)

    weights_bytes, activation, runtime = start(tp, fmt.name)
    kv = paged_kv.plan(spec, rank, device=dev, utilization=config.gpu_memory_utilization, weights_bytes=weights_bytes,
                       activation_bytes=activation, runtime_bytes=runtime,
                       block_size=config.block_size, kv_dtype=kv_dtype)  # fmt: skip
    remedies = _start_remedies(start, spec, dev, tp, fmt, kv.budget_bytes) if kv.blocks <= 0 else ""
    paged_kv.check_starts(kv, max_model_len=resolved.max_model_len, name=spec.name, device=dev.name, tp=tp,
                          utilization=config.gpu_memory_utilization, remedies=remedies)  # fmt: skip
    comm = CommModel(dev, tp, pp, not config.disable_custom_all_reduce) if tp * pp > 1 else None
    model = EngineModel(spec, rank, num, dev, resolved, link_for(dev, tp), bool(c["paged_v1_rereads_kv"]), host, pp,
                        comm)  # fmt: skip
    return Setup(model, kv, StepCosts(model, config.max_num_seqs), fmt, c)


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
                 price_usd_per_hour: float | None = None, sweep: bool = True,
                 host: str | None = None) -> GenerationReport:  # fmt: skip
    """The GenerationReport of ``batch`` requests through a vLLM-class engine on ``tp`` x ``pp`` GPUs; ``host``
    times the launches of its eager steps (the scheduler's own time per step is the engine's,
    ``engine_calibration``)."""
    s = setup(model_or_config, device=device, tp=tp, pp=pp, dtype=dtype, weights=weights, kv_dtype=kv_dtype,
              engine=engine, host=host)  # fmt: skip
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


def run(s: Setup, batch: int, prompt: int, new: int):
    """The scheduler's run of ``batch`` requests (a ``scheduler.Trace``; with pipeline parallelism, one virtual
    engine's share of them, whose run is the whole run's)."""
    host = engine_calibration.host_time(s.constants)
    scheduler = Scheduler(s.costs, s.engine_kv, s.model.engine, host, s.gpus, s.pp)
    return scheduler.run(s.engine_batch(batch), prompt, new)


def _report(s: Setup, trace, batch: int, prompt: int, new: int, price, sweep: bool) -> GenerationReport:
    from perfpredict.hardware import cost

    m, kv, dev = s.model, s.kv, s.model.device
    e2e_ms = trace.e2e_s * 1e3
    ttft = np.array(trace.ttft_s) * 1e3
    tpot = float(np.mean(trace.tpot_s)) * 1e3 if new > 1 else 0.0
    points = _decode_points(s, batch, prompt, new)
    busy_w = _busy_power_w(s, batch, prompt + new // 2)
    gpu_s = trace.e2e_s - trace.host_s
    energy_j = s.gpus * (busy_w * gpu_s + dev.idle_power_w * trace.host_s)
    tokens = batch * new
    price = price if price is not None else cost.price_usd_per_hour(dev)
    kv_used = trace.peak_blocks * kv.block_bytes * s.pp  # every virtual engine's blocks
    largest = s.largest_batch(prompt + new)
    running = max(1, min(batch, largest))  # the sequences decoding together: the others wait for cache space
    stepping = s.engine_batch(running)  # of them, the ones in one virtual engine's step
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
        mode="cuda_graph decode" if not m.engine.config.enforce_eager else "eager",
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
        engine="vllm",
        tp=m.rank.tp,
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
    )


def _decode_points(s: Setup, batch: int, prompt: int, new: int) -> list[DecodePoint]:
    """The decode step (GPU and host) at the first, middle and last context, for the batch that runs together."""
    host = engine_calibration.host_time(s.constants)
    running = s.engine_batch(max(1, min(batch, s.largest_batch(prompt + new))))
    out = []
    for context in sorted({prompt + 1, prompt + max(new // 2, 1), prompt + max(new - 1, 1)}):
        gpu = s.costs.decode_s(running, running * context, context)
        host_s = host.seconds(running, 0, s.gpus)
        host_s = max(gpu + host_s, s.pp * host_s) - gpu  # the driver's host parts of the pp virtual engines
        streaming = s.pp * s.kv.weights_bytes / s.model.device.memory_bandwidth_bytes_per_s  # every stage
        out.append(DecodePoint(context, (gpu + host_s) * 1e3, gpu * 1e3, host_s * 1e3, streaming * 1e3))
    return out


def _busy_power_w(s: Setup, batch: int, context: int) -> float:
    """The GPU's power while it runs a decode step (the roofline power model of the device)."""
    from perfpredict.llm.engine_graph import StepShape, step_graph
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.registry import get_predictor

    seqs = max(1, min(batch, s.model.engine.config.max_num_seqs))
    graph = step_graph(s.model.spec, s.model.rank, StepShape(seqs, 1, context), s.model.num)
    out = get_predictor("two_timeline").predict(
        graph, s.model.device, RunConfig(weights_built_in=None, mode="cuda_graph", host=s.model.host)
    )
    return float(out.avg_power_w.value)


def _sweep(s: Setup, prompt: int, new: int, largest: int) -> tuple[BatchPoint, ...]:
    """Tokens/s of the whole run for batch 1, 2, 4, ... up to max_num_seqs: past the largest batch the KV pool
    holds, the engine preempts, and tokens/s flattens."""
    out = []
    batches = [b for b in SWEEP_BATCHES if b <= s.model.engine.config.max_num_seqs]
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
    m, kv, e = s.model, s.kv, s.model.engine
    c = s.constants
    out = {
        "engine": f"vLLM {VLLM_VERSION} (V0 engine) defaults unless set: block size {e.config.block_size}, "
        f"gpu_memory_utilization {e.config.gpu_memory_utilization:g}, max_num_seqs {e.config.max_num_seqs}, "
        f"max_model_len {e.max_model_len}, max_num_batched_tokens {e.max_num_batched_tokens}, chunked prefill "
        f"{'on' if e.chunked_prefill else 'off'}",
        "kv cache": f"{kv.blocks:,} blocks of {e.config.block_size} tokens ({kv.kv_pool_bytes / GIB:.1f} GiB per GPU, "
        f"{kv.capacity_tokens:,} tokens): {kv.budget_bytes / GIB:.1f} GiB less weights "
        f"{kv.weights_bytes / GIB:.1f}, start-up profile activations {kv.activation_bytes / GIB:.2f} and "
        f"{kv.runtime_bytes / GIB:.2f} GiB outside torch",
        "attention": f"{e.backend}: {e.backend_reason}",
        "cuda graphs": "decode steps of up to 256 sequences replay the captured graph of the next size up (1, 2, 4, "
        "8, 16, ..., 256); larger steps, prefills and contexts over 8,192 tokens run eagerly",
        "kernels": "one GEMM for q/k/v and one for gate/up, fused add+RMSNorm, rotary, SiLU-and-mul and KV-cache "
        "write kernels; logits for one position per sequence",
        "scheduler": (
            "chunked prefill: each step decodes the running sequences, then fills its token budget with prompt chunks"
            if e.chunked_prefill
            else "prefill-first: a step runs waiting prompts alone, else decodes"
        )
        + "; preemption by recompute; host time per step "
        f"{c['host_step_s'] * 1e3:.2f} ms + {c['host_per_seq_s'] * 1e6:.1f} us per sequence + "
        f"{c['host_per_prefill_token_s'] * 1e6:.2f} us per prefill token"
        + (
            f" + {c['host_tp_step_s'] * 1e3:.2f} ms + {c['host_per_worker_s'] * 1e3:.2f} ms per worker beyond the "
            f"driver with {s.gpus} GPU workers (the step's inputs broadcast to each)"
            if s.gpus > 1
            else ""
        )
        + f" ({c['source']})",
        "weights": f"{s.fmt.name}, {m.num.weight_bytes:g} bytes per layer weight",
    }
    if m.comm is not None:
        out.update(_parallel_assumptions(s))
    if m.spec.experts:
        split = (
            f"split whole over the {m.rank.ep} GPUs ({m.rank.experts} each), the busiest rank's even share of the "
            "token-expert pairs (uniform routing: the load-balance assumption)"
            if m.rank.ep > 1
            else "each expert's intermediate features split over tp"
        )
        out["experts"] = (
            f"{m.spec.experts} experts, {m.spec.experts_per_token} per token, routed uniformly: a step reads the "
            f"experts its tokens reach; {split}"
        )
    return out


def _parallel_assumptions(s: Setup) -> dict[str, str]:
    """The report's lines on tensor, expert and pipeline parallelism and what their collectives cost."""
    m, comm, out = s.model, s.model.comm, {}
    dtype = DTYPE_BYTES[m.num.dtype]
    decode = max(1, s.engine_batch(min(m.engine.config.max_num_seqs, 256))) * m.spec.hidden * dtype
    prefill = m.engine.max_num_batched_tokens * m.spec.hidden * dtype
    if m.rank.tp > 1:
        out["tensor parallel"] = (
            f"tp={m.rank.tp}: {m.rank.heads} heads, {m.rank.kv_heads} key/value heads, {m.rank.intermediate} "
            "intermediate features per GPU; two all-reduces per block, the embedding's all-reduce and the logits' "
            f"gather per step on {m.link.description}; all-reduce at a full decode batch and a full prefill: "
            + comm.describe(decode, prefill)
        )
    if m.rank.ep > 1:
        out["expert parallel"] = (
            f"ep={m.rank.ep} over the tp GPUs: a MoE block's all-reduce becomes a reduce-scatter and an all-gather "
            "of the same bytes around an all-to-all dispatch and an all-to-all combine of each rank's token-expert "
            "pairs (DeepSpeed-MoE's and SGLang's layout; vLLM >= 0.8 with tensor-parallel attention keeps every "
            "token on every GPU and combines with the all-reduce instead), NCCL costed from the measured curves"
        )
    if s.pp > 1:
        out["pipeline parallel"] = (
            f"pp={s.pp}: {m.spec.layers} layers per stage (the slowest), {s.pp} virtual engines (vLLM V0; V1's "
            f"batch queue alike), each with {s.engine_kv.blocks:,} KV blocks and up to "
            f"{m.engine.config.max_num_seqs} sequences; a step of one virtual engine passes the stages in turn, "
            f"{s.pp - 1} send(s) of its activations between them ("
            + ("across nodes" if comm.stage_crosses_node else "inside a node")
            + "), while the other virtual engines' steps fill the other stages; a prefill waits behind half the "
            "others on each stage"
        )
    return out
