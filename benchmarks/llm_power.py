"""The serving engines' power per GPU against LLM-Inference-Bench's measured mean power (nothing fitted on it).

    python benchmarks/llm_power.py

LLM-Inference-Bench measured the mean power of one GPU (NVML, sampled in a thread) over runs of 1,024 tokens in and
out at batch 1-64, for vLLM, TensorRT-LLM and DeepSpeed-MII on an A100-40GB, an H100 and a GH200
(``Plots/Fig_16_a_b/power_results.csv``, converted to ``data/external/llm_inference_bench/power.csv``). The engine
predicts each with its power model (``hardware.power_draw``: idle + (TDP - idle) x busy fraction x activity), the
engines' constants as fitted on the run times (``llm_serving.py``, ``llm_frameworks.py``), nothing on power.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import header, write_result  # noqa: E402

ENGINES = {
    "vLLM": ("vllm", "0.6", False),
    "TensorRT-LLM": ("trtllm", "0.11", True),
    "Deepspeed-MII": ("mii", "0.3", True),
}


def predict(row: dict) -> float:
    from perfpredict.llm.generation_options import EngineOptions
    from perfpredict.llm.vllm_config import EngineConfig
    from perfpredict.llm.vllm_engine import _report, run, setup

    engine, version, identical = ENGINES[row["framework"]]
    config = EngineConfig(chunked_prefill=False) if engine == "vllm" else EngineConfig(max_num_seqs=64)
    s = setup(row["model"], device=row["device"], tp=row["gpus"], dtype="float16", engine=config,
              options=EngineOptions(engine=engine, version=version), identical_requests=identical)  # fmt: skip
    trace = run(s, row["batch"], row["input_tokens"], row["output_tokens"])
    return _report(s, trace, row["batch"], row["input_tokens"], row["output_tokens"], None, False).power_per_gpu_w


def main() -> int:
    import numpy as np

    from perfpredict.external.llm_inference_bench import read_power

    t0 = time.perf_counter()
    rows = [r for r in read_power() if r["device"] and r["framework"] in ENGINES]
    lines = ["| engine | GPU | model | batch | measured W | predicted W | error |", "|---|---|---|---:|---:|---:|---:|"]
    errors: dict[str, list[float]] = {}
    for r in rows:
        p = predict(r)
        err = (p / r["power_w"] - 1) * 100
        errors.setdefault(f"{r['framework']} on {r['device']}", []).append(err)
        lines.append(f"| {r['framework']} | {r['device']} | {r['model'].split('/')[-1]} | {r['batch']} | "
                     f"{r['power_w']:.0f} | {p:.0f} | {err:+.1f}% |")  # fmt: skip
    every = [abs(e) for v in errors.values() for e in v]
    summary = [f"- {k}: MAPE {np.mean(np.abs(v)):.1f}%, mean signed {np.mean(v):+.1f}% ({len(v)} runs)"
               for k, v in errors.items()]  # fmt: skip
    text = "\n".join([
        "# Power per GPU against LLM-Inference-Bench's measurements", "",
        header(__file__, seconds=time.perf_counter() - t0, packages=()), "",
        f"{len(every)} runs: MAPE **{np.mean(every):.1f}%**, median {np.median(every):.1f}% (nothing fitted on power). "
        "GH200's catalog TDP is the module's (1,000 W), its idle floor 12.5% of it.", "", *summary, "", *lines, "",
    ])  # fmt: skip
    write_result(text, ROOT / "benchmarks" / "results" / "llm_power.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
