"""The answer to a generation question: time to first token, time per output token, tokens/s, memory, fit."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfpredict.core.report import JsonReport


@dataclass(frozen=True)
class DecodePoint:
    """One decode step at ``context`` tokens of cache, on the two timelines."""

    context: int
    step_ms: float
    device_ms: float
    host_ms: float
    weight_streaming_ms: float  # the weights' bytes over the device memory's bandwidth: no step can be faster


@dataclass(frozen=True)
class BatchPoint:
    """The decode step at the middle of the generation for another batch size."""

    batch: int
    step_ms: float
    tokens_per_s: float
    compute_share: float  # of the device time, the part in compute-bound ops (memory-bound below 0.5)
    fits: bool
    host_bound: bool = False  # the host's dispatch and launches, not the GPU, set the step time

    @property
    def bound(self) -> str:
        """What limits the step: "host" (launches), else "compute" or "memory" (the device's larger part)."""
        if self.host_bound:
            return "host"
        return "compute" if self.compute_share >= 0.5 else "memory"


@dataclass(frozen=True)
class GenerationReport(JsonReport):
    """One generation question answered. Memory figures are per GPU (each of ``tp`` x ``pp`` ranks);
    times are the whole batch's (with an engine, its sequences' first tokens come at different times:
    ``ttft_ms`` is their mean, ``ttft_max_ms`` the last one)."""

    model_name: str
    device: str
    batch: int
    prompt_tokens: int
    new_tokens: int
    dtype: str
    weights: str
    kv_dtype: str
    cache: str
    mode: str
    predictor: str
    ttft_ms: float
    tpot_mean_ms: float
    tpot_first_ms: float
    tpot_last_ms: float
    e2e_ms: float
    tokens_per_s: float  # batch x new tokens / end-to-end time
    # decode alone: running_batch / mean time per output token, the sequences that decode together (never more
    # than the KV cache holds at once: an engine's others wait, and a batch that does not fit never runs whole)
    decode_tokens_per_s: float
    weights_bytes: int
    kv_cache_bytes: int
    activations_bytes: int
    runtime_bytes: int
    peak_memory_bytes: int
    device_memory_bytes: int
    fits: bool
    max_batch: int  # the largest batch whose weights, KV cache and activations fit at this context
    energy_per_token_j: float
    cost_per_million_tokens_usd: float | None
    decode_points: tuple[DecodePoint, ...]
    batch_sweep: tuple[BatchPoint, ...]
    assumptions: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    engine: str = "hf"  # "hf" (transformers' generate), or a serving engine: vllm, sglang, trtllm, mii, llamacpp
    tp: int = 1  # tensor-parallel GPUs
    ttft_max_ms: float | None = None
    tp_communication_ms: float = 0.0  # per decode step, on the critical path
    kv_pool_bytes: int = 0  # the KV cache an engine reserves per GPU at start-up
    kv_capacity_tokens: int = 0  # tokens that pool holds
    preemptions: int = 0  # sequences an engine evicted (and recomputed) for lack of KV blocks
    prefill_steps: int = 0
    decode_steps: int = 0
    host_ms: float = 0.0  # the engine's scheduler time over the run (not overlapped with the GPU)
    # the sequences that decode together: the batch, or as many as the KV cache holds at the full context
    # (``max_batch``) where that is fewer; 0 in a report written before this field
    running_batch: int = 0
    pp: int = 1  # pipeline stages (each of tp GPUs)
    engine_version: str = ""  # the serving engine's version ("0.10", "0.6", ...); "" for transformers
    engine_label: str = ""  # what that version is ("vLLM 0.10, V1 engine (engine-core process)")
    frontend: str = "offline"  # "offline" (the engine's generate call) or "openai-server"
    gpu_busy_fraction: float = 0.0  # of the wall time, the share each GPU runs kernels (0: not modelled)
    power_per_gpu_w: float = 0.0  # each GPU's mean power over the run (0: not modelled)

    @property
    def serving(self) -> bool:
        """Whether a serving engine answered (not transformers' generate)."""
        return self.engine != "hf"

    @property
    def memory_bound_below_batch(self) -> int | None:
        """The first swept batch whose decode step is mostly compute-bound (None: memory-bound throughout)."""
        return next((p.batch for p in self.batch_sweep if p.compute_share >= 0.5 and not p.host_bound), None)

    @property
    def host_bound_up_to_batch(self) -> int | None:
        """The largest swept batch of the leading run of host-bound steps (None: the first is not host-bound)."""
        last = None
        for p in self.batch_sweep:
            if not p.host_bound:
                break
            last = p.batch
        return last
