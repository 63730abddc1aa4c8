"""Vidur's CPU-overhead profiles (github microsoft/vidur, MIT): the engine's host time per step, by batch and TP.

    python -m perfpredict.external.vidur_cpu /work/.mirror/microsoft+vidur/repo     # the fetched git directory

The files are not at Vidur's HEAD: they are at commit ``57720ca`` (2024-05-14), ``data/profiling/{a100,a40}/
cpu_overheads.csv`` (read there by default; ``--rev`` names another). Vidur's ``profiling/cpu_overhead``
scripts drove **Sarathi-Serve** (microsoft/sarathi-serve, its ``vidur`` branch, package version 0.1.7), a research
fork of vLLM's V0 engine of 2023, with its vLLM scheduler (``scheduler_type="vllm"``), fp16 dummy weights,
``batch_size`` requests of 256 prompt tokens each generating 3 x ``batch_size`` tokens, and tensor parallelism
over Ray workers. Each row is one (model, batch size, TP degree): the mean and median milliseconds per engine step
of ``schedule``, ``sampler_e2e``, ``prepare_inputs_e2e``, ``process_model_outputs`` (with detokenization) and
``model_execution_e2e`` (the model's GPU time with its launch), and ``ray_comm_time_mean``: the rest of the step's
wall time (Ray's RPC to the workers, and what the timers did not cover). Vidur's simulator adds the first four's
medians and the Ray residual's mean as the step's CPU overhead; so does ``host_costs``.

**Held out, never used:** every row of a 70B-or-larger model (Llama-2-70B, Qwen-72B, ...) is dropped as the file
is parsed, on its model name alone, before any of its values is converted: :data:`vidur.MODELS` is the allow-list
and :func:`vidur.held_out` the refusal, as for the compute profiles.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfpredict.external.source_tree import SourceTree
from perfpredict.external.vidur import MODELS, held_out

COMMIT = "57720caf01edae3e5e7391581266e57c258e97dd"
FILES = {"a100": "data/profiling/a100/cpu_overheads.csv", "a40": "data/profiling/a40/cpu_overheads.csv"}
GPUS = {"a100": "A100-80GB", "a40": "A40"}  # Vidur's SKU folders: Azure's DGX-class A100 80GB nodes, A40 nodes
PHASES = ("schedule", "sampler_e2e", "prepare_inputs_e2e", "process_model_outputs", "model_execution_e2e")
OUT = Path(__file__).resolve().parents[2] / "data" / "external" / "vidur" / "cpu_overheads.csv"
COLUMNS = ("gpu", "device", "model", "batch_size", "tp", *(f"{p}_median_ms" for p in PHASES),
           *(f"{p}_mean_ms" for p in PHASES), "ray_comm_mean_ms")  # fmt: skip


def allowed(model: str) -> bool:
    """Whether a row of ``model`` may be used: on the allow-list and not 70B or larger."""
    return not held_out(model) and model in MODELS


def rows_of(text: str, gpu: str) -> Iterator[dict[str, Any]]:
    """The allowed rows of one profile; a held-out model's row is skipped on its name, its values never read."""
    for raw in csv.DictReader(io.StringIO(text)):
        model = raw["model_name"].strip()
        if not allowed(model):
            continue
        row: dict[str, Any] = {"gpu": gpu, "device": GPUS[gpu], "model": model,
                               "batch_size": int(raw["batch_size"]), "tp": int(raw["tensor_parallel_degree"])}  # fmt: skip
        for p in PHASES:
            row[f"{p}_median_ms"] = float(raw[f"{p}_median"])
            row[f"{p}_mean_ms"] = float(raw[f"{p}_mean"])
        row["ray_comm_mean_ms"] = float(raw["ray_comm_time_mean"])
        yield row


def convert(tree: SourceTree) -> list[dict[str, Any]]:
    return [row for gpu, path in FILES.items() for row in rows_of(tree.read_text(path), gpu)]


def write(rows: list[dict[str, Any]], path: Path = OUT) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return path


def read(path: Path = OUT) -> list[dict[str, Any]]:
    """The converted rows, numbers as numbers."""
    with path.open() as f:
        return [{k: (v if k in ("gpu", "device", "model") else float(v) if "_ms" in k else int(v))
                 for k, v in r.items()} for r in csv.DictReader(f)]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", help="the fetched vidur repository's git directory")
    p.add_argument("--rev", default=COMMIT, help="the commit holding the profiles (default 57720ca)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    rows = convert(SourceTree.open(args.path, rev=args.rev))
    path = write(rows, args.out)
    models = sorted({(r["gpu"], r["model"], r["tp"]) for r in rows})
    print(f"{len(rows)} rows of {len(models)} (GPU, model, tp) profiles -> {path}")
    for gpu, model, tp in models:
        print(f"  {gpu:5s} {model:38s} tp {tp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
