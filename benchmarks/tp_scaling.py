"""How decode time scales with tensor parallelism: LLM-Inference-Bench's vLLM rows at tp 1, 2 and 4 against the
engine, and the predicted time per output token of 70B models at tp 2, 4 and 8.

    python benchmarks/tp_scaling.py                                   # writes benchmarks/results/tp_scaling.md
    python benchmarks/tp_scaling.py --json before.json                # the same figures as JSON (any commit)
    python benchmarks/tp_scaling.py --before benchmarks/results/tp_scaling_before.json   # with a before column

The issue (47): "Decode time is predicted to fall almost linearly with TP. Measured 70B serving on 8 GPUs decodes
about as fast as on 4." LLM-Inference-Bench has no NVIDIA row of a 70B model above 4 GPUs (its 8-GPU vLLM rows are
AMD MI300X's), so the measured side of the symptom is shown where it has rows: the 7-8B models on one H100 against
2 and 4, whose end-to-end time barely falls from 2 to 4 GPUs. ``--before`` adds the figures the same script gave at
another commit (``tp_scaling_before.json``: commit 2be7f00, before the measured collectives). It uses only
``predict_generation``'s long-standing arguments (and vLLM 0.6, the version the rows ran, where the engine has
versions), so it runs at either commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import header, write_result  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "tp_scaling.md"
LIB_MODELS = ("meta-llama/Llama-2-7b-hf", "meta-llama/Meta-Llama-3-8B")
LIB_POINTS = ((1024, 1), (1024, 64), (128, 1))  # (input = output tokens, batch)
SEVENTY = ("meta-llama/Llama-2-70b-hf", "meta-llama/Meta-Llama-3-70B")


def _v0_6() -> dict:
    """vLLM 0.6 (the version LLM-Inference-Bench ran), where the engine has versions; nothing at older commits."""
    try:
        import perfpredict.llm.engine_versions  # noqa: F401
    except ImportError:
        return {}
    return {"engine_version": "0.6"}


def lib_rows() -> list[dict]:
    """LLM-Inference-Bench's vLLM end-to-end times of the 7-8B models at tp 1, 2, 4 on the H100, and predictions."""
    from perfpredict.external.llm_inference_bench import read
    from perfpredict.llm.generation import predict_generation
    from perfpredict.llm.vllm_config import EngineConfig

    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in read():
        ours = r["framework"] == "vLLM" and r["device"] == "H100-SXM" and r["model"] in LIB_MODELS
        if ours and (r["input_tokens"], r["batch"]) in LIB_POINTS:
            groups[(r["model"], r["input_tokens"], r["batch"], r["gpus"])].append(r["latency_s"])
    out = []
    for (model, tokens, batch, tp), latencies in sorted(groups.items()):
        report = predict_generation(model, prompt_tokens=tokens, new_tokens=tokens, batch=batch, device="H100-SXM",
                                    tp=tp, engine="vllm", dtype="float16",
                                    engine_config=EngineConfig(chunked_prefill=False), **_v0_6())  # fmt: skip
        out.append({"model": model, "tokens": tokens, "batch": batch, "tp": tp,
                    "measured_s": statistics.median(latencies), "predicted_s": report.e2e_ms / 1e3})  # fmt: skip
    return out


def seventy_rows() -> list[dict]:
    from perfpredict.core.errors import PerfPredictError
    from perfpredict.llm.generation import predict_generation

    out = []
    for model in SEVENTY:
        for device in ("H100-SXM", "A100-80GB"):
            for batch in (1, 32):
                for tp in (2, 4, 8):
                    try:
                        r = predict_generation(model, prompt_tokens=512, new_tokens=128, batch=batch, device=device,
                                               tp=tp, engine="vllm", dtype="float16", **_v0_6())  # fmt: skip
                        row = {"tpot_ms": r.tpot_mean_ms, "comm_ms": r.tp_communication_ms}
                    except PerfPredictError:
                        row = {"tpot_ms": None, "comm_ms": None}
                    out.append({"model": model, "device": device, "batch": batch, "tp": tp, **row})
    return out


def _key(r: dict, *names: str) -> tuple:
    return tuple(r[n] for n in names)


def lib_table(rows: list[dict], before: dict | None) -> list[str]:
    prior = {_key(r, "model", "tokens", "batch", "tp"): r for r in (before or {}).get("lib", [])}
    lines = [
        "| model | tokens in = out | batch | tp | measured s | vs tp/2 | predicted s | vs tp/2 | error |"
        + (" before s | before vs tp/2 | before error |" if before else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if before else ""),
    ]
    by = {_key(r, "model", "tokens", "batch", "tp"): r for r in rows}
    for r in rows:
        half = by.get((r["model"], r["tokens"], r["batch"], r["tp"] // 2))
        m_ratio = f"{r['measured_s'] / half['measured_s']:.2f}" if half else "-"
        p_ratio = f"{r['predicted_s'] / half['predicted_s']:.2f}" if half else "-"
        line = (
            f"| {r['model'].split('/')[1]} | {r['tokens']} | {r['batch']} | {r['tp']} | {r['measured_s']:.2f} | "
            f"{m_ratio} | {r['predicted_s']:.2f} | {p_ratio} | {r['predicted_s'] / r['measured_s'] - 1:+.1%} |"
        )
        if before:
            b = prior.get(_key(r, "model", "tokens", "batch", "tp"))
            b_half = prior.get((r["model"], r["tokens"], r["batch"], r["tp"] // 2))
            b_ratio = f"{b['predicted_s'] / b_half['predicted_s']:.2f}" if b and b_half else "-"
            line += (
                f" {b['predicted_s']:.2f} | {b_ratio} | {b['predicted_s'] / r['measured_s'] - 1:+.1%} |"
                if b
                else " - | - | - |"
            )
        lines.append(line)
    return lines


def seventy_table(rows: list[dict], before: dict | None) -> list[str]:
    prior = {_key(r, "model", "device", "batch", "tp"): r for r in (before or {}).get("seventy", [])}
    lines = [
        "| model | GPU | batch | tp | TPOT ms | of which communication | tp 8 / tp 4"
        + (" | before: TPOT ms | communication | tp 8 / tp 4 |" if before else " |"),
        "|---|---|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if before else ""),
    ]

    def cell(v):
        return "does not fit" if v is None else f"{v:.2f}"

    by = {_key(r, "model", "device", "batch", "tp"): r for r in rows}
    for r in rows:
        four = by.get((r["model"], r["device"], r["batch"], 4))
        ratio = f"{r['tpot_ms'] / four['tpot_ms']:.2f}" if r["tp"] == 8 and r["tpot_ms"] and four["tpot_ms"] else ""
        line = (
            f"| {r['model'].split('/')[1]} | {r['device']} | {r['batch']} | {r['tp']} | {cell(r['tpot_ms'])} | "
            f"{cell(r['comm_ms'])} | {ratio}"
        )
        if before:
            b = prior.get(_key(r, "model", "device", "batch", "tp"), {})
            b4 = prior.get((r["model"], r["device"], r["batch"], 4), {})
            b_ratio = f"{b['tpot_ms'] / b4['tpot_ms']:.2f}" if r["tp"] == 8 and b.get("tpot_ms") else ""
            line += f" | {cell(b.get('tpot_ms'))} | {cell(b.get('comm_ms'))} | {b_ratio}"
        lines.append(line + " |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, help="write the figures as JSON instead of the Markdown result")
    p.add_argument("--before", type=Path, help="a JSON written by --json at another commit: shown beside")
    p.add_argument("--out", type=Path, default=RESULT)
    args = p.parse_args()
    t0 = time.perf_counter()
    figures = {"lib": lib_rows(), "seventy": seventy_rows()}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
        return 0
    before = json.loads(args.before.read_text()) if args.before else None
    lines = [
        "# Decode time against tensor parallelism",
        "",
        f"- {header(__file__, seconds=time.perf_counter() - t0, packages=())}",
        "- Measured: LLM-Inference-Bench's vLLM 0.6 rows on H100-SXM (end-to-end time of one batch, input = output "
        "length; the median of repeats). 'vs tp/2': the time over the same question's on half the GPUs (0.5: "
        "linear scaling, 1.0: none)."
        + (f" 'before': the same script at commit 2be7f00 ({args.before.name})." if before else ""),
        "",
        "## The symptom where public rows have it: 7-8B models on 1, 2 and 4 H100s",
        "",
        *lib_table(figures["lib"], before),
        "",
        "## Predicted time per output token of 70B models (prompt 512, 128 new tokens, fp16)",
        "",
        *seventy_table(figures["seventy"], before),
        "",
    ]
    write_result("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
