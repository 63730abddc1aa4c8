"""Choosing a deployment: the cheapest (GPU, TP, PP, max batch, engine) that carries a load within an SLO.

For each configuration of the grid, the search finds the fewest replicas that meet the SLO: the load's requests
are split evenly over the replicas (a Poisson stream split at random is a Poisson stream of rate/replicas; a
uniform one round-robin is uniform), so one replica's simulation at rate/replicas stands for all of them. It tries
1, 2, 4, ... replicas until the SLO is met (TTFT and TPOT at the SLO's percentile within their targets), then
bisects between the last count that failed and the first that met; a configuration that fails at ``max_replicas``
misses the SLO. Its cost is the replicas' GPUs at their hourly price (``hardware.cost``) over the output tokens the
load asks for per hour:

    cost per 1M tokens = replicas x GPUs per replica x $/GPU-hour / (rate x mean output tokens x 3600) x 1e6

Configurations are ranked by that cost (ties: the lower TPOT at the SLO's percentile, then fewer GPUs); those
that miss follow, then those refused (the model does not fit, tp does not split the heads, no price, ...), each
with its reason. The first is the answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from perfpredict.core.errors import InvalidInputError, PerfPredictError
from perfpredict.core.report import JsonReport
from perfpredict.llm import request_stream, serving_metrics
from perfpredict.llm.serving_sim import SimEngine, Simulator

MEETS, MISSES, REFUSED = "meets", "misses", "refused"
DEFAULT_MAX_REPLICAS = 64


@dataclass(frozen=True)
class Candidate:
    """One deployment: ``tp`` x ``pp`` GPUs of ``device`` per replica, the engine and its max batch."""

    device: str
    tp: int = 1
    pp: int = 1
    max_num_seqs: int = 256
    engine: str = "vllm"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def label(self) -> str:
        par = f" tp{self.tp}" + (f" pp{self.pp}" if self.pp > 1 else "")
        return f"{self.device}{par}, max {self.max_num_seqs} seqs, {self.engine}"


@dataclass(frozen=True)
class Grid:
    """The configurations to try: every combination of the axes."""

    devices: tuple[str, ...]
    tps: tuple[int, ...] = (1, 2, 4, 8)
    pps: tuple[int, ...] = (1,)
    max_num_seqs: tuple[int, ...] = (256,)
    engines: tuple[str, ...] = ("vllm",)

    def candidates(self) -> list[Candidate]:
        axes = (self.devices, self.tps, self.pps, self.max_num_seqs, self.engines)
        return [Candidate(*values) for values in itertools.product(*axes)]


@dataclass(frozen=True)
class Replica:
    """What the search needs of one replica: the simulation's engine, its longest request, its price per GPU."""

    sim: SimEngine
    max_model_len: int
    usd_per_gpu_hour: float | None
    virtual_engines: int = 1  # pipeline parallelism: ``sim`` is one of pp virtual engines, each its share of requests


@dataclass(frozen=True)
class Outcome:
    """One configuration's answer (latencies at the SLO's percentile, at the replica count found)."""

    label: str
    device: str
    tp: int
    pp: int
    max_num_seqs: int
    engine: str
    status: str  # meets, misses or refused
    reason: str = ""
    replicas: int | None = None
    gpus: int | None = None  # all replicas'
    usd_per_hour: float | None = None
    cost_per_million_tokens_usd: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    goodput_per_s: float | None = None  # all replicas'


@dataclass(frozen=True)
class DeployReport(JsonReport):
    model_name: str
    load: str
    slo: str
    rate_per_s: float
    mean_output_tokens: float
    outcomes: tuple[Outcome, ...]  # ranked: the first meets the SLO at the lowest cost, if any does
    assumptions: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def best(self) -> Outcome | None:
        return self.outcomes[0] if self.outcomes and self.outcomes[0].status == MEETS else None

    @classmethod
    def from_dict(cls, data: dict) -> DeployReport:
        fields = dict(data)
        fields["outcomes"] = tuple(Outcome(**o) for o in data["outcomes"])
        JsonReport.restore_messages(fields)
        return cls(**fields)


def search(
    backend: Callable[[Candidate], Replica],
    candidates: list[Candidate],
    stream,
    slo,
    *,
    model_name: str = "",
    max_replicas: int = DEFAULT_MAX_REPLICAS,
) -> DeployReport:
    """Rank ``candidates`` for the load ``stream`` (a ``RequestStream`` with a rate) under ``slo``; ``backend``
    builds a candidate's replica or raises a ``PerfPredictError`` that says why it cannot run."""
    if stream.rate_per_s is None or stream.resolved_arrival == "burst":
        raise InvalidInputError("a deployment is sized for a rate: give --request-rate R (requests per second)")
    if not slo.given:
        raise InvalidInputError("a deployment search needs an SLO: --ttft-ms and/or --tpot-ms")
    mean_output = _mean_output(stream)
    outcomes = [_evaluate(backend, c, stream, slo, max_replicas, mean_output) for c in candidates]
    return DeployReport(
        model_name=model_name,
        load=stream.describe(),
        slo=slo.describe(),
        rate_per_s=float(stream.rate_per_s),
        mean_output_tokens=mean_output,
        outcomes=tuple(sorted(outcomes, key=_rank)),
        assumptions=_assumptions(stream, max_replicas),
    )


def _mean_output(stream) -> float:
    """The load's mean output tokens per request (what the cost is spread over)."""
    return float(request_stream.sample(stream, 1 << 30).output.mean())


def _evaluate(backend, candidate: Candidate, stream, slo, max_replicas: int, mean_output: float) -> Outcome:
    base = Outcome(candidate.label, candidate.device, candidate.tp, candidate.pp, candidate.max_num_seqs,
                   candidate.engine, REFUSED)  # fmt: skip
    try:
        replica = backend(candidate)
        if replica.usd_per_gpu_hour is None:
            return replace(base, reason=f"no price for {candidate.device}: pass prices (--price-usd-per-hour)")
        runs: dict[int, Any] = {}
        count = _fewest_replicas(lambda r: runs.setdefault(r, _run(replica, stream, r)), slo, max_replicas)
        engines = replica.virtual_engines
    except PerfPredictError as err:
        return replace(base, reason=str(err))
    if count is None:
        worst = runs[max(runs)]
        return replace(base, status=MISSES, reason=f"not met even at {max(runs)} replicas",
                       **_latencies(worst, slo, max(runs) * engines))  # fmt: skip
    usd = count * candidate.gpus * replica.usd_per_gpu_hour
    tokens_per_hour = stream.rate_per_s * mean_output * 3600
    return replace(base, status=MEETS, replicas=count, gpus=count * candidate.gpus, usd_per_hour=usd,
                   cost_per_million_tokens_usd=usd / tokens_per_hour * 1e6,
                   **_latencies(runs[count], slo, count * engines))  # fmt: skip


def _run(replica: Replica, stream, replicas: int):
    """One replica's trace at its share of the load (with pipeline parallelism, its first virtual engine's: every
    pp-th of the replica's requests, as ``serving.simulate`` takes it)."""
    share = replace(stream, rate_per_s=stream.rate_per_s / replicas)
    requests = request_stream.sample(share, replica.max_model_len).every(replica.virtual_engines)
    return Simulator(replica.sim, requests).run()


def _fewest_replicas(trace_at: Callable[[int], Any], slo, max_replicas: int) -> int | None:
    """The fewest replicas whose trace meets the SLO: doubling, then bisection (None: not even at the most)."""
    meets = lambda r: serving_metrics.slo_percentiles_met(trace_at(r), slo)
    failed, r = 0, 1
    while not meets(r):
        failed = r
        if r >= max_replicas:
            return None
        r = min(2 * r, max_replicas)
    while r - failed > 1:
        mid = (failed + r) // 2
        failed, r = (failed, mid) if meets(mid) else (mid, r)
    return r


def _latencies(trace, slo, replicas: int) -> dict[str, Any]:
    """The trace's latencies at the SLO's percentile, and its goodput times the ``replicas`` (or virtual engines)
    it stands for."""
    pct = slo.percentile
    tpot = serving_metrics.tpot_s(trace)
    return {
        "ttft_ms": float(np.percentile(serving_metrics.ttft_s(trace), pct)) * 1e3,
        "tpot_ms": float(np.percentile(tpot, pct)) * 1e3 if len(tpot) else 0.0,
        "goodput_per_s": serving_metrics.goodput_per_s(trace, slo) * replicas,
    }


def _rank(o: Outcome) -> tuple:
    order = {MEETS: 0, MISSES: 1, REFUSED: 2}[o.status]
    return (order, o.cost_per_million_tokens_usd or 0.0, o.tpot_ms or 0.0, o.gpus or 0, o.label)


def _assumptions(stream, max_replicas: int) -> dict[str, str]:
    return {
        "replicas": "the load split evenly over identical replicas (a random split of a Poisson stream is Poisson at "
        f"rate/replicas); the fewest that meet the SLO, doubling then bisecting, up to {max_replicas}",
        "cost": "replicas x GPUs per replica x $/GPU-hour (the catalog's prices, or the ones given) over the "
        "output tokens the load asks for per hour; idle replicas cost as much as busy ones",
        "simulation": f"each replica runs {stream.num_requests:,} requests of the load's lengths at its share of the "
        "rate (serve-sim's scheduler and step costs)",
    }
