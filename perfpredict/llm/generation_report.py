"""The answer to a generation question: time to first token, time per output token, tokens/s, memory, fit."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DecodePoint:
    """One decode step at ``context`` tokens of cache, on the two timelines."""

    context: int
    step_ms: float
    device_ms: float
    host_ms: float
    weight_streaming_ms: float  # the weights' bytes over the HBM bandwidth: no step can be faster


@dataclass(frozen=True)
class BatchPoint:
    """The decode step at the middle of the generation for another batch size."""

    batch: int
    step_ms: float
    tokens_per_s: float
    compute_share: float  # of the device time, the part in compute-bound ops (memory-bound below 0.5)
    fits: bool


@dataclass(frozen=True)
class GenerationReport:
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
    decode_tokens_per_s: float  # batch / mean time per output token
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @property
    def memory_bound_below_batch(self) -> int | None:
        """The first swept batch whose decode step is mostly compute-bound (None: memory-bound throughout)."""
        return next((p.batch for p in self.batch_sweep if p.compute_share >= 0.5), None)
