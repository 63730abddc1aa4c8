"""Fitting the engines' host phases on public profiles (``benchmarks/engine_host_costs.py`` runs it).

- **Vidur's CPU-overhead profiles** (``external.vidur_cpu``: Sarathi-Serve, a fork of vLLM's V0 engine, 2023-24;
  A100 and A40 hosts; the 70B-and-larger rows dropped by the converter): each phase's milliseconds per step,
  fitted by non-negative least squares as a fixed part, a part per running sequence and a part with tensor
  parallelism (``[1, batch, tp > 1]``): :func:`fit_vidur`. Its ``ray_comm`` residual (Ray's RPC and what the
  timers missed) is the phase ``other``.
- **vLLM 0.6's host time fitted on LLM-Inference-Bench** (``engine_calibration``, the serial host time of the
  offline runs): split over the phases that stay in 0.6's loop in the proportions Vidur's profile gives them
  (:func:`split_serial`); 0.6's output processing runs beside the GPU and keeps Vidur's figure.
- **The V1 engine and SGLang** have no public per-phase profile: their phases are Vidur's V0 phases placed where
  their design runs them (:func:`v1_phases`, :func:`sglang_phases`), and say so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Vidur's columns -> the phases' names
VIDUR_PHASES = {
    "schedule": "schedule_median_ms",
    "sample": "sampler_e2e_median_ms",
    "prepare_inputs": "prepare_inputs_e2e_median_ms",
    "process_outputs": "process_model_outputs_median_ms",
    "other": "ray_comm_mean_ms",
}
VIDUR_SOURCE = "Vidur cpu_overheads.csv @57720ca (Sarathi-Serve 0.1.7, a vLLM V0 fork; A100 and A40 hosts)"
SERIAL_IN_0_6 = ("schedule", "prepare_inputs", "sample", "other")


def fit_vidur(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per phase: ``step_s``, ``per_seq_s`` and ``tp_step_s`` (seconds), NNLS on every allowed row."""
    from scipy.optimize import nnls

    A = np.array([[1.0, r["batch_size"], float(r["tp"] > 1)] for r in rows])
    out = {}
    for phase, column in VIDUR_PHASES.items():
        y = np.array([r[column] for r in rows]) * 1e-3
        x, _ = nnls(A, y)
        out[phase] = {"step_s": float(x[0]), "per_seq_s": float(x[1]), "tp_step_s": float(x[2])}
    return out


def split_serial(total: dict[str, float], vidur: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``total`` (a fitted serial host time: ``host_step_s``, ``host_per_seq_s``, ``host_per_prefill_token_s``,
    ``host_tp_step_s``, ``host_per_worker_s``) split over :data:`SERIAL_IN_0_6` in the shares of Vidur's phases,
    term by term (the part per worker in the shares of the part with tensor parallelism, which Vidur's
    ``[1, batch, tp > 1]`` fit folds it into; a term Vidur has none of is split evenly)."""
    pairs = (("host_step_s", "step_s", "step_s"), ("host_per_seq_s", "per_seq_s", "per_seq_s"),
             ("host_tp_step_s", "tp_step_s", "tp_step_s"), ("host_per_worker_s", "per_worker_s", "tp_step_s"),
             ("host_per_prefill_token_s", "per_prefill_token_s", "per_prefill_token_s"))  # fmt: skip
    out: dict[str, dict[str, float]] = {p: {} for p in SERIAL_IN_0_6}
    for fitted, term, shares_of in pairs:
        weights = np.array([vidur[p].get(shares_of, 0.0) for p in SERIAL_IN_0_6])
        shares = weights / weights.sum() if weights.sum() > 0 else np.full(len(weights), 1 / len(weights))
        for p, share in zip(SERIAL_IN_0_6, shares):
            out[p][term] = float(total.get(fitted, 0.0) * share)
    return out


def entry(phases: dict[str, dict[str, Any]], source: str) -> dict[str, Any]:
    return {"phases": phases, "source": source}


def v0_5_phases(vidur: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """vLLM 0.4-0.5: every phase serial, as Vidur profiled them (Ray workers with tensor parallelism)."""
    return {p: {**terms, "where": "serial", "source": VIDUR_SOURCE} for p, terms in vidur.items()}


def v0_6_phases(vidur: dict[str, dict[str, float]], fitted: dict[str, float]) -> dict[str, dict[str, Any]]:
    """vLLM 0.6: the fitted serial time split over its phases; output processing beside the GPU (the version's
    default; ``host_costs`` makes it serial with asynchronous output processing off)."""
    src = f"vLLM 0.6 offline host time fitted on LLM-Inference-Bench ({fitted.get('source', '')[:60]}...), split in Vidur's shares"
    out = {p: {**terms, "where": "serial", "source": src} for p, terms in split_serial(fitted, vidur).items()}
    out["process_outputs"] = {**vidur["process_outputs"], "where": "beside_gpu", "source": VIDUR_SOURCE}
    return out


def v1_phases(vidur: dict[str, dict[str, float]], fitted: dict[str, float]) -> dict[str, dict[str, Any]]:
    """vLLM V1's engine core keeps scheduling, sampling and the IPC residual in its loop (0.6's fitted figures for
    them), prepares inputs as a persistent batch updated by diffs (its fixed part only), sends only diffs to
    tensor-parallel workers (0.6's broadcast cost), and runs output processing and detokenization in the
    frontend's process (Vidur's figure, in the other process)."""
    serial = v0_6_phases(vidur, fitted)
    src = "V0 figures (vLLM 0.6's fit, Vidur's phases) placed as V1's design runs them; no public V1 profile"
    out = {p: {**serial[p], "source": src} for p in ("schedule", "sample", "other")}
    out["prepare_inputs"] = {**serial["prepare_inputs"], "per_seq_s": 0.0, "source": src}
    out["process_outputs"] = {**vidur["process_outputs"], "where": "other_process", "source": src}
    return out


def sglang_phases(vidur: dict[str, dict[str, float]], fitted: dict[str, float]) -> dict[str, dict[str, Any]]:
    """SGLang 0.4: a Python scheduler like vLLM 0.6's (its fitted figures), run beside the GPU by the overlap
    scheduler; the detokenizer in its own process (Vidur's output-processing figure); a CUDA-graph replay and
    the result's copy back stay in the loop (the fixed part of sampling)."""
    serial = v0_6_phases(vidur, fitted)
    src = "V0 figures (vLLM 0.6's fit, Vidur's phases) placed as SGLang's overlap scheduler runs them"
    out = {p: {**serial[p], "where": "beside_gpu", "source": src} for p in ("schedule", "prepare_inputs", "other")}
    out["sample"] = {**serial["sample"], "per_seq_s": 0.0, "where": "serial", "source": src}
    out["process_outputs"] = {**vidur["process_outputs"], "where": "other_process", "source": src}
    return out


def derived_entries(vidur: dict[str, dict[str, float]], fitted: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The entries of ``engine_host_costs.json`` that come from Vidur's phases and vLLM 0.6's fitted serial host
    time (``fitted``: ``host_step_s``, ``host_per_seq_s``, ``host_per_prefill_token_s``, ``host_tp_step_s``,
    ``source``), keyed by engine version."""
    v06 = entry(
        v0_6_phases(vidur, fitted),
        "vLLM 0.6's serial host time fitted on LLM-Inference-Bench (offline "
        "llm.generate), split over its phases in the shares of Vidur's profile; output processing Vidur's",
    )
    v06["fitted_serial"] = {k: fitted[k] for k in (*SERIAL_TERMS, "source") if k in fitted}
    v1 = entry(v1_phases(vidur, fitted), "vLLM 0.6's and Vidur's phases, placed as the V1 engine runs them")
    return {
        "vllm-0.5": entry(v0_5_phases(vidur), VIDUR_SOURCE),
        "vllm-0.6": v06,
        "vllm-0.8": v1,
        "vllm-0.10": v1,
        "sglang-0.4": entry(
            sglang_phases(vidur, fitted),
            "vLLM 0.6's and Vidur's phases, placed as SGLang's overlap scheduler runs them",
        ),
    }


SERIAL_TERMS = ("host_step_s", "host_per_seq_s", "host_per_prefill_token_s", "host_tp_step_s", "host_per_worker_s")


def serial_entry(fitted: dict[str, Any], source: str) -> dict[str, Any]:
    """An engine's host time as one serial phase (TensorRT-LLM's C++ executor, MII's Python loop, llama.cpp): the
    fitted fixed part per step, per sequence, per prefill token and per step with several GPUs."""
    terms = {"step_s": fitted["host_step_s"], "per_seq_s": fitted["host_per_seq_s"],
             "per_prefill_token_s": fitted["host_per_prefill_token_s"], "tp_step_s": fitted["host_tp_step_s"],
             "per_worker_s": fitted.get("host_per_worker_s", 0.0)}  # fmt: skip
    return {"phases": {"engine": {**terms, "where": "serial", "source": source}}, "source": source,
            "fitted_serial": {k: fitted[k] for k in (*SERIAL_TERMS, "source") if k in fitted}}  # fmt: skip
