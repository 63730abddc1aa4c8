"""What a serving benchmark reports, from a simulated trace: latency percentiles, throughput and goodput.

The definitions are vLLM's ``benchmark_serving``'s:

- **TTFT**: first token's time less the request's arrival (queueing included);
- **TPOT**: (finish - first token) / (output tokens - 1), for requests of more than one output token;
- **E2E**: finish less arrival;
- percentiles as ``numpy.percentile`` computes them (linear between the order statistics);
- **throughput**: requests and output tokens over the makespan (first arrival to last finish);
- **goodput**: requests that meet every SLO target given (TTFT and TPOT each at most its target; a one-token
  request has no TPOT and meets that target) over the makespan (DistServe's definition, OSDI 2024).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Percentiles:
    """One latency's p50, p90, p99 and mean, milliseconds."""

    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float

    @classmethod
    def of(cls, seconds: np.ndarray) -> Percentiles:
        if len(seconds) == 0:
            return cls(0.0, 0.0, 0.0, 0.0)
        p50, p90, p99 = (float(v) * 1e3 for v in np.percentile(seconds, PERCENTILES))
        return cls(p50, p90, p99, float(np.mean(seconds)) * 1e3)


def ttft_s(trace) -> np.ndarray:
    return trace.first_token_s - trace.arrival_s


def tpot_s(trace) -> np.ndarray:
    """Per request of more than one output token."""
    many = trace.output > 1
    return (trace.finish_s[many] - trace.first_token_s[many]) / (trace.output[many] - 1)


def e2e_s(trace) -> np.ndarray:
    return trace.finish_s - trace.arrival_s


def meets_slo(trace, slo) -> np.ndarray:
    """Per request: it meets every target ``slo`` gives."""
    ok = np.ones(len(trace.output), dtype=bool)
    if slo.ttft_ms is not None:
        ok &= ttft_s(trace) * 1e3 <= slo.ttft_ms
    if slo.tpot_ms is not None:
        many = trace.output > 1
        per = np.zeros(len(ok))
        per[many] = tpot_s(trace) * 1e3
        ok &= per <= slo.tpot_ms
    return ok


def goodput_per_s(trace, slo) -> float:
    """Requests meeting the SLO per second of the makespan."""
    span = trace.makespan_s
    return float(meets_slo(trace, slo).sum()) / span if span > 0 else 0.0


def slo_percentiles_met(trace, slo) -> bool:
    """The deployment test: TTFT and TPOT at ``slo.percentile`` each within its target."""
    ok = True
    if slo.ttft_ms is not None:
        ok &= _pct(ttft_s(trace), slo.percentile) <= slo.ttft_ms
    if slo.tpot_ms is not None:
        ok &= _pct(tpot_s(trace), slo.percentile) <= slo.tpot_ms
    return bool(ok)


def _pct(seconds: np.ndarray, percentile: float) -> float:
    return float(np.percentile(seconds, percentile)) * 1e3 if len(seconds) else 0.0
