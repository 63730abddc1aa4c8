"""The engines' own constants, fitted on the calibration half of LLM-Inference-Bench's rows of each engine.

The GPU's time comes from perfpredict's per-op device model. What remains is the engine's: its host time per step
(``host_costs``: scheduling, building the step's inputs, sampling's bookkeeping, a fixed part per step and a part per
worker when tensor parallelism makes the driver broadcast each step's inputs to its workers and wait for the
slowest), the memory outside torch's allocator that vLLM's start-up profile counts before sizing the KV cache (and
its part that comes with tensor parallelism), and whether vLLM's PagedAttention v1 kernel (XFormers' decode, for a
sliding-window model) reads each key/value head once per query head of its group. ``benchmarks/llm_serving.py --fit`` fits
them on the 7-8B models only (LLM-Inference-Bench's Llama-2-7B, Llama-3-8B and Mistral-7B rows) and writes
``data/engine_calibration.json``; the other models are the test half. The constants are fitted with the device
model of the day: refit them (the same command) whenever the device model changes.

Each engine version has its entry (``vllm-0.6``, ``trtllm-0.11``, ``mii-0.3``, ``llamacpp-b3600``): beside the
memory constants, the scale of its kernels against the device model's (``decode_kernel_scale``,
``prefill_kernel_scale``: TensorRT-LLM's fused kernels, llama.cpp's ggml kernels). A version with no rows to fit
(vLLM V1, SGLang, vLLM 0.4-0.5) takes vLLM 0.6's memory constants and the device model's kernels. The host time
per step is ``host_costs``' (``data/engine_host_costs.json``), written by the same fits.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from perfpredict.core.units import GIB

CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "data" / "engine_calibration.json"
ENGINE_KEY = "vllm-0.6"
#: before any fit: 1 GiB outside torch, the device model's kernels (the host time is ``host_costs``')
DEFAULTS = {
    "runtime_bytes": GIB,
    "runtime_tp_bytes": 0.0,  # more per GPU with tensor parallelism: NCCL communicators, custom all-reduce buffers
    "paged_v1_rereads_kv": 1.0,  # 1: PagedAttention v1 reads a key/value head once per query head of its group
    "decode_kernel_scale": 1.0,  # the engine's decode kernels' time against the device model's
    "prefill_kernel_scale": 1.0,
}
#: where a version without its own entry takes its constants from
FALLBACK = {"vllm": ENGINE_KEY, "sglang": ENGINE_KEY}


@lru_cache(maxsize=1)
def _file() -> dict[str, Any]:
    try:
        return json.loads(CALIBRATION_FILE.read_text())
    except (OSError, ValueError):
        return {}


def constants(key: str = ENGINE_KEY) -> dict[str, Any]:
    """The fitted constants of an engine version (``vllm-0.6``; another version of vLLM or SGLang falls back to
    vLLM 0.6's, the defaults where no fit was saved), with their provenance under ``source``."""
    data = _file()
    entry = data.get(key) or data.get(FALLBACK.get(key.split("-")[0], ""), {})
    out = {k: float(entry.get(k, v)) for k, v in DEFAULTS.items()}
    out["source"] = entry.get("source", "defaults: no fit saved")
    if key not in data and entry:
        out["source"] = f"{FALLBACK[key.split('-')[0]]}'s: {out['source']}"
    return out


def save(values: dict[str, Any], key: str = ENGINE_KEY) -> None:
    """Write fitted constants (the benchmark's ``--fit``); the cached copy is dropped."""
    data = _file() | {key: values}
    CALIBRATION_FILE.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    _file.cache_clear()
