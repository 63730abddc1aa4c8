"""How long the CLI takes to answer, end to end, as ratios to ``python -c "import torch"`` on the same machine.

    python benchmarks/cli_speed.py [--runs 3] [--out benchmarks/results/cli_speed.md]

Each command runs as a fresh process (what a user types), with an empty graph cache for the first answer
(``PERFPREDICT_CACHE_DIR`` points at a new temporary folder) and the cache that answer left for the repeats.
Targets (issue "Answers a user can act on"): a first ``predict --hf bert-base-uncased`` at most 6x the torch
import, a repeated one at most 2x, a first Llama-2-7B training question at most 10x. Issue "LLM serving as people
run it": a ``generate`` answer for a 7B model at most 5 s from a warm graph cache and 15 s cold, ``--tp 8`` on a 70B
model at most 20 s cold, here as ratios to the 1.28 s the torch import took when they were set (3.9x, 11.7x and
15.6x). ``generate`` asks the default engine (the vLLM-class one for these models); the transformers engine's
times are listed beside it. Run it on a quiet machine: every figure is wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result

BERT = ["predict", "--hf", "bert-base-uncased", "--device", "H100"]
LLAMA = ["predict", "--hf", "llama-2-7b", "--device", "H100", "--training"]
GENERATE = ["generate", "--hf", "llama-2-7b", "--device", "H100"]
GENERATE_TP8 = ["generate", "--hf", "llama-2-70b", "--device", "H100", "--tp", "8"]
GENERATE_HF = ["generate", "--hf", "llama-2-7b", "--device", "H100", "--engine", "hf"]
TARGETS = {
    "first bert": 6.0,
    "repeated bert": 2.0,
    "first llama-2-7b training": 10.0,
    "first generate llama-2-7b": 11.7,
    "repeated generate llama-2-7b": 3.9,
    "first generate llama-2-70b --tp 8": 15.6,
}


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="repeats of the torch import and of each repeated question")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cli_speed.md")
    args = p.parse_args()
    cli = [sys.executable, "-m", "perfpredict"]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PERFPREDICT_CACHE_DIR": cache}
        torch_s = statistics.median(timed([sys.executable, "-c", "import torch"], env) for _ in range(args.runs))
        rows = {
            "first bert": timed(cli + BERT, env),
            "repeated bert": statistics.median(timed(cli + BERT, env) for _ in range(args.runs)),
            "first llama-2-7b training": timed(cli + LLAMA, env),
            "repeated llama-2-7b training": statistics.median(timed(cli + LLAMA, env) for _ in range(args.runs)),
            "first generate llama-2-7b": timed(cli + GENERATE, env),
            "repeated generate llama-2-7b": statistics.median(timed(cli + GENERATE, env) for _ in range(args.runs)),
            "first generate llama-2-70b --tp 8": timed(cli + GENERATE_TP8, env),
            "first generate llama-2-7b --engine hf": timed(cli + GENERATE_HF, env),
            "repeated generate llama-2-7b --engine hf": statistics.median(
                timed(cli + GENERATE_HF, env) for _ in range(args.runs)
            ),
        }
    lines = [
        "# CLI answer time, as ratios to `import torch`",
        "",
        f"- {header(__file__, packages=())}",
        f'- `python -c "import torch"`: {torch_s:.2f} s (median of {args.runs})',
        f"- questions: `perfpredict {' '.join(BERT)}`, `perfpredict {' '.join(LLAMA)}`, "
        f"`perfpredict {' '.join(GENERATE)}` (and with `--engine hf`), `perfpredict {' '.join(GENERATE_TP8)}`; "
        f"first = empty graph cache, repeated = median of {args.runs} with the cache the first one left",
        "",
        "| question | seconds | x import torch | target |",
        "|---|---:|---:|---|",
    ]
    for name, seconds in rows.items():
        ratio = seconds / torch_s
        target = TARGETS.get(name)
        verdict = "-" if target is None else f"<= {target:g}x: {'met' if ratio <= target else 'NOT met'}"
        lines.append(f"| {name} | {seconds:.2f} | {ratio:.2f} | {verdict} |")
    text = "\n".join(lines) + "\n"
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
