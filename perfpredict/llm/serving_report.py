"""The answer to a serving question: latency percentiles, throughput, goodput, batch, energy and cost."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfpredict.core.report import JsonReport
from perfpredict.llm.serving_metrics import Percentiles


@dataclass(frozen=True)
class ServingReport(JsonReport):
    """One stream of requests served by one replica (``pp`` stages of ``tp`` GPUs); memory figures are per GPU."""

    model_name: str
    device: str
    tp: int
    engine: str
    num_requests: int
    load: str  # the stream, in words
    mean_prompt_tokens: float
    mean_output_tokens: float
    ttft: Percentiles
    tpot: Percentiles
    e2e: Percentiles
    requests_per_s: float
    output_tokens_per_s: float
    offered_rate_per_s: float | None  # the stream's rate (None: all at t = 0)
    slo: str  # the targets, in words ("none")
    goodput_per_s: float | None  # requests meeting the targets per second (None: no targets)
    slo_met: bool | None  # TTFT and TPOT at the SLO's percentile within their targets (None: no targets)
    mean_running_batch: float  # sequences per step, weighted by the step's time
    peak_running_batch: int
    preemptions: int
    steps: int
    prefill_steps: int
    makespan_s: float  # first arrival to last finish
    busy_share: float  # of the makespan, the engine is running steps
    gpu_busy_share: float  # of the makespan, the GPU is running kernels
    energy_per_token_j: float  # per output token, every GPU of the replica, idle time included
    cost_per_million_tokens_usd: float | None  # per million output tokens at this load
    kv_capacity_tokens: int
    peak_kv_tokens: int
    cached_prompt_share: float = 0.0  # of the prompt tokens, those prefix caching skipped
    tokens_per_step: float = 1.0  # speculative decoding's expected tokens per decode step (1: off)
    engine_version: str = ""  # the engine's version ("0.10", "0.11", ...); "" in a report written before it
    frontend: str = "offline"  # "offline" (the engine's generate call) or "openai-server"
    pp: int = 1  # pipeline stages per replica, each of ``tp`` GPUs
    assumptions: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict) -> ServingReport:
        """The report ``to_dict`` wrote."""
        fields = dict(data)
        for name in ("ttft", "tpot", "e2e"):
            fields[name] = Percentiles(**data[name])
        JsonReport.restore_messages(fields)
        return cls(**fields)
