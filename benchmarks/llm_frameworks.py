"""The other serving engines against LLM-Inference-Bench: TensorRT-LLM, DeepSpeed-MII and llama.cpp, each calibrated
on its 7-8B rows and tested on the rest, and vLLM 0.5.3 on GH200 with nothing fitted.

    python benchmarks/llm_frameworks.py            # fit each engine's constants on its calibration half, then score
    python benchmarks/llm_frameworks.py --no-fit   # score with the saved constants

Per framework, LLM-Inference-Bench's rows on NVIDIA GPUs (A100-40GB, H100-SXM, GH200; fp16, input = output length
128-2,048, batch 1-64) are split by model as for vLLM (``llm_serving.py``): the 7-8B Llama-2-7B, Llama-3-8B and
Mistral-7B calibrate, every other model tests. What is fitted, on the calibration half only (non-negative least
squares on the relative error): the engine's serial host time (per step, per running sequence, per prefill token,
per step on several GPUs) and its kernels' time against the device model's: none, one scale for every step, or
one for decode-only steps and one for steps that prefill (TensorRT-LLM's fused kernels, DeepSpeed's blocked
kernels, llama.cpp's ggml kernels), the one of the three with the lowest leave-one-model-out error on the
calibration half (each 7-8B model predicted from the other two's fit: chosen without the test half); for
TensorRT-LLM also the memory outside its KV cache (a grid), which decides how many requests its no-evict policy
admits. TensorRT-LLM's and DeepSpeed-MII's scripts repeat one prompt over the batch ("France France ..."), so a
mixture of experts routes every sequence's token to the same experts (``identical_requests``).

- **TensorRT-LLM 0.11** (``ModelRunnerCpp.generate`` on an engine built per batch and length): in-flight batching,
  whole prompts mixed into generation steps under 8,192 tokens, a request admitted only when its whole length fits.
- **DeepSpeed-MII** (``mii.pipeline``, one call timed, no warm-up): Dynamic SplitFuse, 768 tokens a step.
- **llama.cpp** (``llama-bench -p N -n N -pg N,N -b B``): ONE sequence; the prompt in physical batches of
  min(B, 512) tokens, then one token per step; several GPUs split the layers and run in turn.
- **vLLM 0.5.3 on GH200** (LLM-Inference-Bench's GH200 container pins 0.5.3.post1): the ``vllm-0.5`` host phases
  are Vidur's (Sarathi-Serve) profile, not fitted on any of these rows: every row is a test row.

A row no engine could run, or of a model with no shipped config, is refused with the reason.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import header, write_result  # noqa: E402
from benchmarks.serving_fit import (  # noqa: E402
    HOST_TERMS,
    SCALES,
    Framework,
    choose_structure,
    fit,
    predict,
    rows,
    score,
    simulate,
)
from perfpredict.core.units import GIB  # noqa: E402

NVIDIA = ("A100-40GB", "H100-SXM", "GH200")
FRAMEWORKS = {
    "trtllm": Framework(
        "TensorRT-LLM",
        "trtllm",
        "0.11",
        "TensorRT-LLM 0.11 (C++ runtime)",
        NVIDIA,
        reserve_batch=True,
        identical_prompts=True,
    ),  # fmt: skip
    "mii": Framework("Deepspeed-MII", "mii", "0.3", "DeepSpeed-MII (FastGen)", NVIDIA, identical_prompts=True),
    "llamacpp": Framework("llama.cpp", "llamacpp", "b3600", "llama.cpp (llama-bench)", NVIDIA, llama_bench=True),
}
GH200_VLLM = Framework("vLLM", "vllm", "0.5", "vLLM 0.5.3 on GH200 (nothing fitted)", ("GH200",), fit_host=False)
RUNTIME_GIB = {"trtllm": (0.5, 2.0, 4.0)}  # the grid of memory outside the KV cache, per GPU


def calibrate(key: str, fw: Framework, all_rows: list[dict]) -> dict:
    """The framework's constants fitted on its calibration half (see the module docstring)."""
    import numpy as np

    from perfpredict.llm import engine_calibration, host_costs

    try:
        host_costs.figures(fw_key(fw))
    except Exception:  # noqa: BLE001 - first fit: a zero host time to simulate against
        from perfpredict.llm.host_cost_fit import serial_entry

        host_costs.save({fw_key(fw): serial_entry(dict.fromkeys(HOST_TERMS, 0.0) | {"source": "unfitted"}, "unfitted")})
    calibration = [r for r in all_rows if r["half"] == "calibration"]
    best = None
    for gib in RUNTIME_GIB.get(key, (0.5,)):
        constants = {**engine_calibration.DEFAULTS, "runtime_bytes": gib * GIB, "runtime_tp_bytes": 0.0}
        sim = simulate(fw, calibration, constants)
        structure, cv = choose_structure(sim)
        fitted = fit(sim, structure)
        scored = predict(sim, fitted)
        errors = [abs(r["error_pct"]) if r["error_pct"] is not None else 100.0 for r in scored]
        mape = float(np.mean(errors))
        print(f"  {fw.name}: runtime {gib:g} GiB: kernel scales {structure} (leave-one-model-out MAPE "
              f"{', '.join(f'{k} {v:.2f}%' for k, v in cv.items())}); calibration MAPE {mape:.2f}% "
              f"({_describe(fitted)})")  # fmt: skip
        if best is None or mape < best[0]:
            best = (mape, constants | fitted | {"kernel_scales": structure, "cv_mape": cv})
    return best[1]


def fw_key(fw: Framework) -> str:
    return f"{fw.engine}-{fw.version}"


def _describe(c: dict) -> str:
    return (
        f"kernels x{c['decode_kernel_scale']:.2f} decode, x{c['prefill_kernel_scale']:.2f} prefill; host "
        f"{c['host_step_s'] * 1e3:.3f} ms + {c['host_per_seq_s'] * 1e6:.1f} us/seq + "
        f"{c['host_per_prefill_token_s'] * 1e6:.2f} us/prefill token + {c['host_tp_step_s'] * 1e3:.3f} ms on "
        "several GPUs"
    )


def saved(fw: Framework) -> dict:
    from perfpredict.llm import engine_calibration, host_costs

    c = engine_calibration.constants(fw_key(fw))
    serial = host_costs.figures(fw_key(fw))["fitted_serial"]
    return c | {k: float(serial.get(k, 0.0)) for k in HOST_TERMS}


def save(fw: Framework, constants: dict) -> None:
    from benchmarks.llm_serving import save_fit

    save_fit(constants, fw_key(fw))


def table(scored: list[dict]) -> list[str]:
    from benchmarks.llm_serving_report import SHORT

    lines = [
        "| model | GPU | GPUs | rows answered | MAPE | median | worst | mean signed |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple, list] = {}
    for r in scored:
        groups.setdefault((SHORT.get(r["model"], r["model"]), r["device"], r["tp"]), []).append(r)
    for (model, device, tp), members in sorted(groups.items()):
        s = score(members)
        if not s["answered"]:
            why = next((r["error"] for r in members if "error" in r), "")[:160]
            lines.append(f"| {model} | {device} | {tp} | 0 / {s['rows']} | - | - | - | refused: {why} |")
            continue
        signed = sum(r["error_pct"] for r in members if r["error_pct"] is not None) / s["answered"]
        lines.append(f"| {model} | {device} | {tp} | {s['answered']} / {s['rows']} | {s['mape']:.1f}% | "
                     f"{s['median']:.1f}% | {s['worst']:.0f}% | {signed:+.1f}% |")  # fmt: skip
    return lines


def refusals(scored: list[dict]) -> list[str]:
    """Every refused row with its reason (a group refused whole says why in its table row)."""
    from benchmarks.llm_serving_report import SHORT

    answered = {(r["model"], r["device"], r["tp"]) for r in scored if not r.get("error")}
    out = [f"- {SHORT.get(r['model'], r['model'])} on {r['tp']} x {r['device']}, {r['tokens']} tokens, batch "
           f"{r['batch']}: {r['error']}" for r in scored
           if r.get("error") and (r["model"], r["device"], r["tp"]) in answered]  # fmt: skip
    return ["Refused rows:", "", *out, ""] if out else []


def summary(name: str, scored: list[dict], targets: bool = True) -> str:
    s = score(scored)
    refused = s["rows"] - s["answered"]
    verdict = ""
    if targets:
        verdict = (f" (targets: MAPE <= 10% {'met' if s['mape'] <= 10 else 'NOT met'}, median <= 7% "
                   f"{'met' if s['median'] <= 7 else 'NOT met'})")  # fmt: skip
    return (f"{name}: MAPE **{s['mape']:.1f}%**, median **{s['median']:.1f}%**{verdict}; {s['answered']} of "
            f"{s['rows']} rows answered" + (f", {refused} refused with the reason" if refused else ""))  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-fit", action="store_true", help="score with the saved constants instead of refitting them")
    p.add_argument("--only", choices=sorted(FRAMEWORKS), action="append", help="fit and score these frameworks only")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "llm_frameworks.md")
    args = p.parse_args()
    t0 = time.perf_counter()
    sections, headline = [], []
    for key in args.only or list(FRAMEWORKS):
        fw = FRAMEWORKS[key]
        all_rows = rows(fw)
        if args.no_fit:
            constants = saved(fw)
        else:
            constants = calibrate(key, fw, all_rows)
            constants["source"] = (f"benchmarks/llm_frameworks.py on {sum(r['half'] == 'calibration' for r in all_rows)} "
                                   f"calibration configurations of LLM-Inference-Bench's {fw.name} rows (Llama-2-7B, "
                                   f"Llama-3-8B, Mistral-7B), {time.strftime('%Y-%m-%d')}")  # fmt: skip
            save(fw, constants)
        scored = predict(simulate(fw, all_rows, constants), constants)
        test = [r for r in scored if r["half"] == "test"]
        cal = [r for r in scored if r["half"] == "calibration"]
        headline.append("- " + summary(f"**{fw.label}**, test half", test))
        sections += [f"## {fw.label}", "", f"Fitted on the calibration half: {_describe(constants)}; memory outside "
                     f"the KV cache {constants['runtime_bytes'] / GIB:g} GiB.", "",
                     summary("Test half", test), "", *table(test), "", *refusals(test),
                     summary("Calibration half (fitted on)", cal, targets=False), "", *table(cal), "",
                     *refusals(cal)]  # fmt: skip
    gh = rows(GH200_VLLM)
    from perfpredict.llm import engine_calibration

    gh_scored = predict(simulate(GH200_VLLM, gh, engine_calibration.constants("vllm-0.5") | _vllm_05_host()),
                        engine_calibration.constants("vllm-0.5") | _vllm_05_host())  # fmt: skip
    headline.append("- " + summary(f"**{GH200_VLLM.label}**, every row", gh_scored, targets=False))
    sections += [f"## {GH200_VLLM.label}", "", "vLLM 0.4-0.5's host phases are Vidur's profile of Sarathi-Serve "
                 "(`benchmarks/engine_host_costs.py`); its memory constants vLLM 0.6's. Nothing was fitted on these "
                 "rows.", "", summary("Every row", gh_scored, targets=False), "", *table(gh_scored), "",
                 *refusals(gh_scored)]  # fmt: skip
    text = "\n".join([
        "# Serving engines on LLM-Inference-Bench, per framework", "",
        header(__file__, seconds=time.perf_counter() - t0, packages=()), "",
        *headline, "", *sections,
    ])  # fmt: skip
    write_result(text, args.out)
    return 0


def _vllm_05_host() -> dict:
    """vLLM 0.5's host phases are all serial and not fitted here: zero fitted terms (the phases stay in the run)."""
    return dict.fromkeys(HOST_TERMS, 0.0) | dict.fromkeys(SCALES, 1.0)


if __name__ == "__main__":
    sys.exit(main())
