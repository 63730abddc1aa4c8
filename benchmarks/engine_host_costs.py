"""The serving engines' host phases from public profiles: ``perfpredict/data/engine_host_costs.json``.

    python benchmarks/engine_host_costs.py

1. **vLLM 0.4-0.5** (``vllm-0.5``): every phase of Vidur's CPU-overhead profile of Sarathi-Serve (a vLLM V0
   fork; ``data/external/vidur/cpu_overheads.csv``, the 70B-and-larger rows dropped by its converter), fitted as
   a fixed part, a part per running sequence and a part with tensor parallelism (``host_cost_fit.fit_vidur``).
2. **vLLM 0.6, V1 and SGLang**: vLLM 0.6's serial host time as fitted on LLM-Inference-Bench
   (``benchmarks/llm_serving.py``; the record kept in the ``vllm-0.6`` entry, else ``engine_calibration.json``),
   split over its phases in Vidur's shares, and those phases placed where each design runs them.
3. **The OpenAI server** (``frontend-openai-server``): vLLM's v0.6.0 performance post profiled v0.5.3 serving
   Llama 3 8B on one H100 behind its API server (in the engine's process): the GPU busy 38% of the time, the API
   server 33%, scheduling 29% (blog.vllm.ai/2024/09/05/perf-update.html; a published fact, used here as one).
   The scheduling share pins the running batch (where vLLM 0.5's fitted phases take 29/38 of the GPU's step of
   Llama-3-8B on an H100, context 300: ShareGPT's mean prompt and half its output); the API server's share at that
   batch gives its time per streamed token. Request handling and tokenization are assumptions, stated.

Writes the JSON and ``benchmarks/results/engine_host_costs.md``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import header, write_result  # noqa: E402

PROFILE = {"gpu": 0.38, "api_server": 0.33, "scheduling": 0.29}  # vLLM v0.5.3, Llama 3 8B, 1 x H100 (the post)
PROFILE_CONTEXT = 300  # ShareGPT: 202 prompt tokens and 179 output tokens on average (the post)
REQUEST_S = 1e-3  # [assumption] per request: HTTP parsing, validation of the request, a task and a stream
TOKENIZE_S = 3e-6  # [assumption] per prompt token: a fast (Rust) tokenizer's encode
POST = "vLLM v0.6.0 performance post (blog.vllm.ai/2024/09/05/perf-update.html): v0.5.3, Llama 3 8B, 1 x H100"


def fitted_0_6() -> dict:
    """vLLM 0.6's serial host time: the record ``benchmarks/llm_serving.py`` keeps in the ``vllm-0.6`` entry."""
    from perfpredict.llm import host_costs

    return dict(host_costs.figures("vllm-0.6")["fitted_serial"])


def frontend_from_profile() -> tuple[dict, dict]:
    """The API server's time per streamed token from the v0.5.3 profile (see the module docstring), and how."""
    import numpy as np

    from perfpredict.llm.generation_options import EngineOptions
    from perfpredict.llm.vllm_engine import setup

    s = setup("llama-3-8b", device="H100-SXM", options=EngineOptions(engine="vllm", version="0.5"))
    batches = np.arange(1, 257)
    gpu = np.array([s.costs.decode_s(int(b), b * PROFILE_CONTEXT, PROFILE_CONTEXT) for b in batches])
    sched = np.array([s.host_cost.step(int(b), 0, int(b)).serial_s for b in batches])
    ratio = sched / gpu
    target = PROFILE["scheduling"] / PROFILE["gpu"]
    i = int(np.argmin(np.abs(ratio - target)))
    batch = int(batches[i])
    api_s = PROFILE["api_server"] / PROFILE["gpu"] * gpu[i]
    per_token = api_s / batch
    how = {"batch": batch, "gpu_ms": gpu[i] * 1e3, "scheduling_ms": sched[i] * 1e3, "api_ms": api_s * 1e3,
           "per_token_us": per_token * 1e6}  # fmt: skip
    src = (
        f"{POST}: GPU 38%, API server 33%, scheduling 29%; vLLM 0.5's phases take 29/38 of the GPU's step at "
        f"{batch} running sequences, where the API server's 33/38 is {per_token * 1e6:.0f} us per streamed token"
    )
    phases = {
        "api_stream": {"per_output_token_s": per_token, "where": "serial", "source": src},
        "api_requests": {
            "per_new_request_s": REQUEST_S,
            "per_prefill_token_s": TOKENIZE_S,
            "where": "serial",
            "source": "[assumption] 1 ms per request (HTTP, validation) and 3 us per prompt token "
            "(tokenization); no public profile",
        },  # fmt: skip
    }
    return {"phases": phases, "source": src}, how


def main() -> int:
    from perfpredict.external import vidur_cpu
    from perfpredict.llm import host_cost_fit, host_costs

    t0 = time.perf_counter()
    rows = vidur_cpu.read()
    vidur = host_cost_fit.fit_vidur(rows)
    host_costs.save(host_cost_fit.derived_entries(vidur, fitted_0_6()))
    frontend, how = frontend_from_profile()
    host_costs.save({"frontend-openai-server": frontend})
    lines = [
        "# Serving engines' host phases",
        "",
        header(__file__, seconds=time.perf_counter() - t0, packages=()),
        "",
        f"Vidur's CPU-overhead profile: {len(rows)} rows ({len({r['model'] for r in rows})} models; no 70B-or-larger "
        "row: the converter drops them). Fitted per phase, per step + per running sequence + with tensor "
        "parallelism (vLLM 0.4-0.5, `vllm-0.5`):",
        "",
        "| phase | per step | per sequence | with tp > 1 |",
        "|---|---:|---:|---:|",
    ]
    for phase, t in vidur.items():
        lines.append(f"| {phase} | {t['step_s'] * 1e3:.3f} ms | {t['per_seq_s'] * 1e6:.2f} us | "
                     f"{t['tp_step_s'] * 1e3:.3f} ms |")  # fmt: skip
    lines += [
        "",
        f"The OpenAI server, from the v0.5.3 profile: the running batch where vLLM 0.5's phases take 29/38 of the "
        f"GPU's step (Llama-3-8B, H100, context {PROFILE_CONTEXT}) is {how['batch']} (GPU {how['gpu_ms']:.2f} ms, "
        f"scheduling {how['scheduling_ms']:.2f} ms); the API server's 33/38 of the GPU's step is "
        f"{how['api_ms']:.2f} ms: **{how['per_token_us']:.1f} us per streamed token**.",
        "",
        'Per engine version (`python -c "...host_cost(get_version(e, v)).describe()"`):',
        "",
    ]
    from perfpredict.llm.engine_versions import VERSIONS

    for v in VERSIONS:
        try:
            cost = host_costs.host_cost(v)
        except Exception as err:  # noqa: BLE001 - a version fitted elsewhere (llm_serving.py) and not yet
            lines.append(f"- {v.label}: {err}")
            continue
        lines.append(f"- {v.label}: {cost.describe()}")
    write_result("\n".join(lines) + "\n", ROOT / "benchmarks" / "results" / "engine_host_costs.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
