"""Fitting a serving engine's constants on LLM-Inference-Bench's rows: shared by ``llm_serving.py`` (vLLM 0.6) and
``llm_frameworks.py`` (TensorRT-LLM, DeepSpeed-MII, llama.cpp, and vLLM 0.5.3 on GH200).

Each row is simulated once with the engine's fitted serial host time taken out: the scheduler's decisions do not
depend on time, so the row's wall time is linear in what is fitted. With the serial host phases at zero the run
has GPU seconds in decode-only steps and in steps that prefill; the fitted constants multiply them (the kernel
scales) and the run's counts (steps, sequence-steps, prefill tokens, steps with several GPUs, worker-steps beyond the driver's:
the host terms). A
row the engine would refuse keeps its reason in ``error``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

HOST_TERMS = ("host_step_s", "host_per_seq_s", "host_per_prefill_token_s", "host_tp_step_s", "host_per_worker_s")
SCALES = ("decode_kernel_scale", "prefill_kernel_scale")
CALIBRATION = ("meta-llama/Llama-2-7b-hf", "meta-llama/Meta-Llama-3-8B", "mistralai/Mistral-7B-v0.1")


@dataclass(frozen=True)
class Framework:
    """One of LLM-Inference-Bench's frameworks as perfpredict runs it."""

    name: str  # the source's "Framework" column
    engine: str
    version: str
    label: str
    devices: tuple[str, ...]  # catalog names of the rows scored
    llama_bench: bool = False  # llama.cpp: one sequence, the batch column is the prompt's batch size (-b)
    reserve_batch: bool = False  # TensorRT-LLM: the engine is built with max_batch_size = the row's batch
    fit_host: bool = True  # False: the version's host phases as they are (nothing fitted: every row tests them)
    identical_prompts: bool = False  # the script repeats one prompt over the batch ("France France ...")


def rows(framework: Framework, models: tuple[str, ...] | None = None) -> list[dict]:
    """The framework's rows on its devices, one per configuration (the median of repeats), each marked with its
    half (calibration: the 7-8B Llama-2-7B, Llama-3-8B, Mistral-7B; test: every other model)."""
    from perfpredict.external.llm_inference_bench import read

    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in read():
        ours = r["framework"] == framework.name and r["device"] in framework.devices
        if ours and (models is None or r["model"] in models):
            groups[(r["model"], r["device"], r["gpus"], r["input_tokens"], r["batch"])].append(r["latency_s"])
    out = [
        {"model": k[0], "device": k[1], "tp": k[2], "tokens": k[3], "batch": k[4], "measured_s": statistics.median(v),
         "repeats": len(v), "half": "calibration" if k[0] in CALIBRATION else "test"}
        for k, v in sorted(groups.items())
    ]  # fmt: skip
    return [_impossible(r, framework.identical_prompts) for r in out]


def _impossible(row: dict, identical: bool = False) -> dict:
    """``row``, refused where its time is under what streaming the weights once per new token takes on all its
    GPUs together at the datasheet bandwidth (new tokens x weight bytes / (GPUs x bandwidth); a mixture of experts
    reads the experts a step's distinct tokens reach, ``identical``: the batch repeats one prompt): no engine decodes
    faster, so such a row records a run that did not generate what it says (LLM-Inference-Bench's TensorRT-LLM
    Qwen2-7B rows at 2,048 tokens on an H100: 0.08 s for 2,048 new tokens)."""
    from perfpredict.core.errors import PerfPredictError
    from perfpredict.hardware.devices import get_device
    from perfpredict.llm.decoder_spec import spec_from
    from perfpredict.llm.moe import expected_experts

    try:
        spec = spec_from(row["model"])
    except PerfPredictError as err:
        return {**row, "error": str(err).split(";")[0]}
    params = spec.params()
    if spec.experts:  # a decode step streams only the experts its tokens reach (one prompt repeated: one token's)
        expert = spec.layers * spec.experts * 3 * spec.hidden * spec.intermediate
        distinct = 1 if identical else row["batch"]
        reached = expected_experts(spec.experts, spec.experts_per_token, distinct) / spec.experts
        params = params - expert + expert * reached
    bound = row["tokens"] * params * 2 / (row["tp"] * get_device(row["device"]).memory_bandwidth_bytes_per_s)
    if row["measured_s"] < bound:
        return {**row, "error": f"measured {row['measured_s']:.3g} s is under the weight-streaming bound "
                f"{bound:.3g} s ({row['tokens']} new tokens x {params * 2 / 1e9:.1f} GB over {row['tp']} GPU(s)): "
                "not a measurement of this configuration"}  # fmt: skip
    return row


def options(framework: Framework):
    from perfpredict.llm.generation_options import EngineOptions

    return EngineOptions(engine=framework.engine, version=framework.version)


def config_for(framework: Framework, row: dict):
    """The engine settings the row's script used."""
    from perfpredict.llm.vllm_config import EngineConfig

    if framework.engine == "vllm":
        return EngineConfig(chunked_prefill=False)  # LLM-Inference-Bench's script passes enable_chunked_prefill=False
    if framework.llama_bench:  # llama-bench -b: the logical batch; the physical one (n_ubatch) is at most 512
        return EngineConfig(max_num_batched_tokens=min(row["batch"], 512), max_num_seqs=1)
    if framework.reserve_batch:  # trtllm-build --max_batch_size=<batch>: at most 64 here (the largest batch)
        return EngineConfig(max_num_seqs=64)
    return EngineConfig()


def zero_host(cost):
    """``cost`` without its serial phases (the fitted ones): the overlapped phases stay."""
    from perfpredict.llm.host_costs import HostCost

    return HostCost(tuple(p for p in cost.phases if p.where != "serial"), cost.label)


def simulate(framework: Framework, rows_: list[dict], constants: dict) -> list[dict]:
    """Each row's run with the serial host time and the kernel scales left out (see the module docstring)."""
    from perfpredict.core.errors import PerfPredictError
    from perfpredict.llm.vllm_engine import run, setup

    base = {**constants, **dict.fromkeys(SCALES, 1.0)}
    setups: dict[tuple, Any] = {}
    out = []
    for r in rows_:
        if "error" in r:
            out.append(r)
            continue
        config = config_for(framework, r)
        key = (r["model"], r["device"], r["tp"], config)
        if key not in setups:
            try:
                setups[key] = setup(r["model"], device=r["device"], tp=r["tp"], dtype="float16", engine=config,
                                    constants=base, options=options(framework),
                                    identical_requests=framework.identical_prompts)  # fmt: skip
            except PerfPredictError as err:
                setups[key] = err
        s = setups[key]
        if isinstance(s, PerfPredictError):
            out.append({**r, "error": str(s)})
            continue
        batch = 1 if framework.llama_bench else r["batch"]
        try:
            t = run(s, batch, r["tokens"], r["tokens"], host=zero_host(s.host_cost) if framework.fit_host else None)
        except PerfPredictError as err:
            out.append({**r, "error": str(err)})
            continue
        rest = t.e2e_s - t.decode_gpu_s - t.prefill_gpu_s  # overlapped host work that outlasted the GPU
        terms = [t.steps, t.seq_steps, t.prefill_tokens, t.steps if s.gpus > 1 else 0, t.steps * (s.gpus - 1)]
        out.append({**r, "decode_gpu_s": t.decode_gpu_s, "prefill_gpu_s": t.prefill_gpu_s, "rest_s": rest,
                    "terms": terms, "preemptions": t.preemptions, "gpu_s": t.e2e_s})  # fmt: skip
    return out


def nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls as scipy_nnls

    return scipy_nnls(A, b)[0]


STRUCTURES = ("none", "one", "two")  # kernel scales fitted: none (the device model's), one for all steps, or two


def columns(r: dict, scales: str) -> list[float]:
    gpu = {"none": [], "one": [r["decode_gpu_s"] + r["prefill_gpu_s"]], "two": [r["decode_gpu_s"], r["prefill_gpu_s"]]}
    return [*gpu[scales], *map(float, r["terms"])]


def fit(simulated: list[dict], scales: str) -> dict[str, float]:
    """The constants minimising the rows' squared relative error, non-negative: the host terms, and the kernel
    scales ``scales`` asks (one of :data:`STRUCTURES`)."""
    ok = [r for r in simulated if "error" not in r]
    A = np.array([np.array(columns(r, scales)) / r["measured_s"] for r in ok])
    fixed = np.array([(r["decode_gpu_s"] + r["prefill_gpu_s"] if scales == "none" else 0.0) + r["rest_s"] for r in ok])
    b = np.array([(r["measured_s"] - f) / r["measured_s"] for r, f in zip(ok, fixed)])
    x = list(map(float, nnls(A, b)))
    gpu = {"none": [1.0, 1.0], "one": [x[0], x[0]], "two": x[:2]}[scales]
    return dict(zip(SCALES, gpu)) | dict(zip(HOST_TERMS, x[len(x) - len(HOST_TERMS) :]))


def choose_structure(simulated: list[dict]) -> tuple[str, dict[str, float]]:
    """The kernel-scale structure with the lowest leave-one-model-out error on ``simulated`` (the calibration
    half: each model predicted from the others' fit), and its errors: chosen without the test half."""
    ok = [r for r in simulated if "error" not in r]
    models = sorted({r["model"] for r in ok})
    cv = {}
    for structure in STRUCTURES:
        errors = []
        for m in models:
            fitted = fit([r for r in ok if r["model"] != m], structure)
            errors += [abs(r["error_pct"]) for r in predict([r for r in ok if r["model"] == m], fitted)]
        cv[structure] = float(np.mean(errors))
    return min(cv, key=cv.get), cv


def predict(simulated: list[dict], constants: dict) -> list[dict]:
    out = []
    for r in simulated:
        if "error" in r:
            out.append({**r, "predicted_s": None, "error_pct": None})
            continue
        gpu = (
            r["decode_gpu_s"] * constants["decode_kernel_scale"]
            + r["prefill_gpu_s"] * constants["prefill_kernel_scale"]
        )
        host = float(np.dot(r["terms"], [constants[k] for k in HOST_TERMS]))
        p = gpu + r["rest_s"] + host
        out.append({**r, "predicted_s": p, "error_pct": (p / r["measured_s"] - 1) * 100})
    return out


def score(scored: list[dict]) -> dict[str, Any]:
    errors = [abs(r["error_pct"]) for r in scored if r["error_pct"] is not None]
    return {
        "rows": len(scored),
        "answered": len(errors),
        "mape": float(np.mean(errors)) if errors else float("nan"),
        "median": float(np.median(errors)) if errors else float("nan"),
        "worst": float(max(errors)) if errors else float("nan"),
    }
