"""A fixed set of answers, to show a refactor changed no answer.

    python benchmarks/answer_snapshot.py write benchmarks/results/answers     # before the change
    python benchmarks/answer_snapshot.py check benchmarks/results/answers     # after: byte-identical or a diff

Each answer is one CLI call (`perfpredict demo` and `--json -` reports of every door the CLI has: predict, training,
MIG, multi-GPU, explain, generate with both engines and --tp, devices) or one Python API call, run in a fresh
environment (empty caches and config, so neither a calibrated host nor a cached graph can change an answer).
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CLI_ANSWERS: dict[str, list[str]] = {
    "demo.txt": ["demo"],
    "predict-bert-h100.json": ["predict", "--hf", "bert", "--device", "H100-SXM", "--json", "-"],
    "predict-gpt2-l4-fp16-b8.json": [
        "predict",
        "--hf",
        "gpt2",
        "--device",
        "L4",
        "--batch",
        "8",
        "--dtype",
        "float16",
        "--json",
        "-",
    ],
    "predict-resnet-a100-train.json": [
        "predict",
        "--hf",
        "resnet-50",
        "--device",
        "A100-80GB-SXM",
        "--batch",
        "32",
        "--training",
        "--json",
        "-",
    ],
    "predict-vit-h100-cudagraph-mig.json": [
        "predict",
        "--hf",
        "vit",
        "--device",
        "H100-SXM",
        "--mode",
        "cuda_graph",
        "--max-latency-ms",
        "5",
        "--json",
        "-",
    ],
    "predict-bert-cpu.json": ["predict", "--hf", "bert", "--device", "cpu", "--json", "-"],
    "predict-llama-tp2-dp2.json": [
        "predict",
        "--hf",
        "llama-2-7b",
        "--device",
        "H100-SXM",
        "--tp",
        "2",
        "--dp",
        "2",
        "--training",
        "--json",
        "-",
    ],
    "predict-bert-analytical-tf32.json": [
        "predict",
        "--hf",
        "bert",
        "--device",
        "A100-80GB-SXM",
        "--predictor",
        "analytical",
        "--tf32",
        "--dtype",
        "float32",
        "--json",
        "-",
    ],
    "explain-mobilenet-t4.txt": ["explain", "--hf", "mobilenet-v2", "--device", "T4"],
    "generate-qwen2-vllm-tp2.json": [
        "generate",
        "--hf",
        "qwen2-7b",
        "--device",
        "H100-SXM",
        "--tp",
        "2",
        "--json",
        "-",
    ],
    "generate-qwen2-hf-static.json": [
        "generate",
        "--hf",
        "qwen2",
        "--device",
        "L4",
        "--engine",
        "hf",
        "--cache",
        "static",
        "--mode",
        "cuda_graph",
        "--json",
        "-",
    ],
    "devices.txt": ["devices", "--wide"],
}

API_SCRIPT = """
import torch, perfpredict
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10))
report = perfpredict.predict(model, torch.randn(16, 256), device="{device}")
print(report.to_json())
"""
API_ANSWERS = {"api-mlp-h100.json": "H100-SXM", "api-mlp-cpu.json": "cpu"}


def _environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFPREDICT_")}
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_CONFIG_HOME=str(home / "config"),
        COLUMNS="120",
        TERM="dumb",
        PYTHONHASHSEED="0",
    )
    return env


def answers() -> dict[str, str]:
    """Every answer's text, by file name."""
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = _environment(Path(tmp))
        for name, args in CLI_ANSWERS.items():
            out[name] = _run([sys.executable, "-m", "perfpredict", *args], env, name)
        for name, device in API_ANSWERS.items():
            out[name] = _run([sys.executable, "-c", API_SCRIPT.format(device=device)], env, name)
    return out


def _run(command: list[str], env: dict[str, str], name: str) -> str:
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr[-2000:]}")
    print(f"  {name}", file=sys.stderr)
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verb", choices=("write", "check"))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    got = answers()
    if args.verb == "write":
        args.folder.mkdir(parents=True, exist_ok=True)
        for name, text in got.items():
            (args.folder / name).write_text(text)
        print(f"{len(got)} answers written to {args.folder}")
        return 0
    differing = [name for name, text in got.items() if (args.folder / name).read_text() != text]
    for name in differing:
        want = (args.folder / name).read_text().splitlines()
        sys.stdout.writelines(
            line + "\n" for line in difflib.unified_diff(want, got[name].splitlines(), name, "now", lineterm="", n=1)
        )
    print(
        f"{len(got) - len(differing)} of {len(got)} answers byte-identical"
        + (f"; differ: {differing}" if differing else "")
    )
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
