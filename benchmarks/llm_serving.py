"""LLM serving on public measurements: the vLLM-class engine against LLM-Inference-Bench, the transformers engine
against gpt-fast's published figures.

    python benchmarks/llm_serving.py             # fit the engine's constants on the calibration half, then score
    python benchmarks/llm_serving.py --no-fit    # score with the constants in perfpredict/data/engine_calibration.json
    python benchmarks/llm_serving.py --hf-rows rows.csv   # also score the transformers engine on rows of your own

**vLLM** (``engine="vllm"``): LLM-Inference-Bench's vLLM rows on "Nvidia H100 GPU" (taken as H100-SXM) and "Nvidia
A100 GPU" (A100-40GB, ALCF Polaris) at 1, 2 and 4 GPUs (tensor parallel), fp16, input = output length 128-2,048,
batch 1-64; each row is the wall time of one batch through ``llm.generate`` with vLLM 0.6 (chunked prefill passed
as off by their script). The rows are split by model: the 7-8B Llama-2-7B, Llama-3-8B and Mistral-7B calibrate,
every other model with a shipped config tests (Qwen2-7B, Llama-2-70B, Llama-3-70B, Mixtral-8x7B, Qwen2-72B).
Only the engine's constants are fitted, on the calibration half alone: its host time per step (fixed, per
sequence, per prefill token, per tensor-parallel step and per GPU worker beyond the driver; non-negative least
squares on the relative error) and the
memory outside torch that sizes the KV pool (a grid). The GPU's time is the device model's, unfitted. Rows of
the same configuration measured twice are scored once, on their median.

**transformers** (``engine="hf"``): gpt-fast's README and the PyTorch blog post that introduced it (A100-80GB,
power-limited to 330 W, batch 1, a 5-token prompt, 200 new tokens): eager, torch.compile with CUDA graphs and a
static cache, int8 and int4 weight-only, and tensor parallelism. gpt-fast is not transformers' generate: it is the
same kind of step (the model's own modules, one step per token) written for speed, so these rows anchor the
transformers engine's modes; they are labelled as gpt-fast's. ``--hf-rows`` scores rows of the same columns
(model, device, tp, weights, mode, cache, batch, prompt_tokens, new_tokens, tokens_per_s) measured elsewhere.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.llm_serving_report import fit_summary, markdown  # noqa: E402
from benchmarks.provenance import header, write_result  # noqa: E402
from benchmarks.serving_fit import CALIBRATION, HOST_TERMS, Framework, fit, predict, simulate  # noqa: E402
from perfpredict.core.units import GIB  # noqa: E402

#: what the figures read beyond perfpredict and this script: the rows, the report's layout and the shared fit
INPUTS = ("data/external/llm_inference_bench", "benchmarks/llm_serving_report.py", "benchmarks/serving_fit.py")
TEST = (
    "Qwen/Qwen2-7B",
    "meta-llama/Llama-2-70b-hf",
    "meta-llama/Meta-Llama-3-70B",
    "mistralai/Mixtral-8x7B-v0.1",
    "Qwen/Qwen2-72B",
)
VLLM = Framework("vLLM", "vllm", "0.6", "vLLM 0.6 (V0, offline llm.generate)", ("H100-SXM", "A100-40GB"))
RUNTIME_GIB = (0.5, 1.0, 2.0)  # the grid of memory outside torch, per GPU
RUNTIME_TP_GIB = (0.0, 1.0, 2.0)  # and its part with tensor parallelism
V1_REREADS = (0.0, 1.0)  # whether PagedAttention v1 reads a key/value head once per query head
# gpt-fast (github.com/pytorch-labs/gpt-fast README; pytorch.org/blog/accelerating-generative-ai-2): A100-80GB at
# 330 W, batch 1, 5-token prompt, 200 new tokens, bf16 unless quantized; tokens/s of the whole generate call
GPT_FAST = (
    ("llama-2-7b", 1, "bf16", "eager", "static", 25.5, "blog: starting point (eager)"),
    ("llama-2-7b", 1, "bf16", "compiled_cuda_graph", "static", 104.9, "README: base"),
    ("llama-2-7b", 1, "int8", "compiled_cuda_graph", "static", 155.58, "README: 8-bit"),
    ("llama-2-7b", 1, "int4-g32", "compiled_cuda_graph", "static", 196.80, "README: 4-bit (G=32)"),
    ("llama-2-7b", 2, "bf16", "compiled_cuda_graph", "static", 168.84, "README: tensor parallel"),
    ("llama-2-7b", 4, "bf16", "compiled_cuda_graph", "static", 254.02, "README: tensor parallel"),
    ("llama-2-7b", 8, "bf16", "compiled_cuda_graph", "static", 328.43, "README: tensor parallel"),
    ("llama-2-70b", 8, "bf16", "compiled_cuda_graph", "static", 62.50, "README: tensor parallel"),
    ("llama-2-70b", 8, "int8", "compiled_cuda_graph", "static", 80.44, "README: TP + 8-bit"),
)


def vllm_rows() -> list[dict]:
    """LLM-Inference-Bench's vLLM 0.6 rows on the two NVIDIA GPUs, one per configuration (the median of repeats)."""
    from benchmarks.serving_fit import rows

    return rows(VLLM, CALIBRATION + TEST)


def calibrate(rows: list[dict]) -> tuple[dict, list[dict]]:
    """The engine constants fitted on the calibration half: the runtime memory by grid, host terms by NNLS (the
    kernels are the device model's: no scale is fitted for vLLM)."""
    import numpy as np

    from perfpredict.llm import engine_calibration

    calibration = [r for r in rows if r["half"] == "calibration"]
    best = None
    for gib, tp_gib, v1 in itertools.product(RUNTIME_GIB, RUNTIME_TP_GIB, V1_REREADS):
        grid = {"runtime_bytes": gib * GIB, "runtime_tp_bytes": tp_gib * GIB, "paged_v1_rereads_kv": v1}
        constants = {**engine_calibration.DEFAULTS, **grid}
        sim = simulate(VLLM, calibration, constants)
        fitted = fit(sim, scales="none")
        scored = predict(sim, fitted)
        errors = [abs(r["error_pct"]) if r["error_pct"] is not None else 100.0 for r in scored]
        mape = float(np.mean(errors))
        host = np.array([fitted[k] for k in HOST_TERMS])
        print(f"  runtime {gib:g} + {tp_gib:g} GiB, v1 re-reads {v1:g}: calibration MAPE {mape:.2f}% "
              f"(host {np.round(host * 1e6, 2)} us)")  # fmt: skip
        if best is None or mape < best[0]:
            best = (mape, constants | fitted)
    return best[1], calibration


def save_fit(constants: dict, key: str = "vllm-0.6") -> None:
    """The fitted constants: memory and kernel scales to ``engine_calibration.json``, the serial host time to
    ``engine_host_costs.json`` (vLLM 0.6's split over its phases, and the versions derived from it)."""
    from perfpredict.external import vidur_cpu
    from perfpredict.llm import engine_calibration, host_cost_fit, host_costs

    engine_calibration.save({k: v for k, v in constants.items() if k not in HOST_TERMS}, key)
    fitted = {k: constants[k] for k in HOST_TERMS} | {"source": constants["source"]}
    if key == "vllm-0.6":
        vidur = host_cost_fit.fit_vidur(vidur_cpu.read())
        host_costs.save(host_cost_fit.derived_entries(vidur, fitted))
    else:
        host_costs.save({key: host_cost_fit.serial_entry(fitted, constants["source"])})


def gpt_fast_rows(extra: list[dict]) -> list[dict]:
    rows = [
        {"model": m, "device": "A100-80GB", "tp": tp, "weights": w, "mode": mode, "cache": cache, "batch": 1,
         "prompt_tokens": 5, "new_tokens": 200, "tokens_per_s": tps, "source": f"gpt-fast {src}"}
        for m, tp, w, mode, cache, tps, src in GPT_FAST
    ]  # fmt: skip
    return rows + extra


def score_hf(rows: list[dict]) -> list[dict]:
    from perfpredict.llm.generation import predict_generation

    out = []
    for r in rows:
        report = predict_generation(
            r["model"], prompt_tokens=int(r["prompt_tokens"]), new_tokens=int(r["new_tokens"]), batch=int(r["batch"]),
            device=r["device"], tp=int(r["tp"]), weights=r["weights"] or None, engine="hf", mode=r["mode"],
            cache=r["cache"],
        )  # fmt: skip
        predicted = report.tokens_per_s
        out.append(
            {**r, "predicted_tokens_per_s": predicted, "error_pct": (predicted / float(r["tokens_per_s"]) - 1) * 100}
        )
    return out


def host_serial(key: str) -> dict:
    """The serial host terms last fitted for ``key`` (the record kept in ``engine_host_costs.json``)."""
    from perfpredict.llm import host_costs

    serial = host_costs.figures(key)["fitted_serial"]
    return {k: float(serial.get(k, 0.0)) for k in HOST_TERMS}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-fit", action="store_true", help="score with the saved constants instead of refitting them")
    p.add_argument("--hf-rows", type=Path, help="a CSV of transformers-generate rows to score beside gpt-fast's")
    p.add_argument("--skip-hf", action="store_true", help="leave the transformers-engine anchors out")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "llm_serving.md")
    args = p.parse_args()
    from perfpredict.llm import engine_calibration

    t0 = time.perf_counter()
    rows = vllm_rows()
    if args.no_fit:
        constants = engine_calibration.constants("vllm-0.6")
        constants.update(host_serial("vllm-0.6"))
    else:
        constants, _ = calibrate(rows)
        constants["source"] = fit_summary(rows, constants)
        save_fit(constants)
    scored = predict(simulate(VLLM, rows, constants), constants)
    extra = list(csv.DictReader(args.hf_rows.open())) if args.hf_rows else []
    anchors = [] if args.skip_hf else score_hf(gpt_fast_rows(extra))
    text = markdown(
        scored, anchors, constants, header(__file__, seconds=time.perf_counter() - t0, packages=(), inputs=INPUTS)
    )
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
