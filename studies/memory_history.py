"""Which allocations make a step's peak on the GPU: the bytes the analytical memory model misses, named.

    python studies/memory_history.py --split studies/results/memory_split_nvidia-h100-80gb-hbm3.json \\
        --families distilbert,roberta,vgg,resnet --per-family 2 --out $OUT/memory_history.json

For the rows that studies/memory_split.py found furthest under their measured step peak (inference rows, or
training ones for a ``family:training`` entry), this builds each model as the collector does (float32, cast,
moved; inputs made), runs one warm-up step, and records the allocator's history over one more
(``torch.cuda.memory._record_memory_history``). It writes, per row, the step's peak, the predicted and measured
step peaks from the split file, and the allocations alive at the peak that the step itself made, largest first,
each with the Python frames that allocated it. Needs a CUDA GPU; the trace arithmetic (:func:`live_at_peak`) is
plain Python and tested on any host.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FREES = ("free_completed",)  # 'free_requested' precedes it on another stream's use; the bytes stay held until then


def live_at_peak(trace: Iterable[Mapping[str, Any]]) -> tuple[int, list[Mapping[str, Any]]]:
    """(peak bytes the traced allocations held at once, those allocations at that moment) over one device's trace.

    Allocations made before recording began are not in the trace; the caller adds them as a baseline. A free of
    an address the trace never allocated is such an allocation going away, and lowers nothing below zero here.
    """
    live: dict[int, Mapping[str, Any]] = {}
    held = peak = 0
    at_peak: list[Mapping[str, Any]] = []
    for entry in trace:
        action, addr = entry.get("action"), entry.get("addr")
        if action == "alloc":
            live[addr] = entry
            held += int(entry.get("size", 0))
            if held > peak:
                peak, at_peak = held, list(live.values())
        elif action in FREES and addr in live:
            held -= int(live.pop(addr).get("size", 0))
    return peak, sorted(at_peak, key=lambda e: -int(e.get("size", 0)))


def where(frames: list[Mapping[str, Any]], depth: int = 4) -> list[str]:
    """The innermost frames outside torch's own Python (the model code that asked), as 'file:line name'."""
    outside = [f for f in frames if "/torch/" not in str(f.get("filename", ""))] or frames
    return [f"{Path(str(f.get('filename'))).name}:{f.get('line')} {f.get('name')}" for f in outside[:depth]]


def pick_rows(split: Mapping[str, Any], families: list[str], per_family: int) -> list[Mapping[str, Any]]:
    """The rows of each ``family[:phase]`` entry (inference when no phase is named) whose measured step peak is
    furthest above the predicted one."""
    chosen = []
    for entry in families:
        family, _, phase = entry.partition(":")
        rows = [r for r in split["rows"] if r["family"] == family and r["phase"] == (phase or "inference")]
        rows.sort(key=lambda r: r["predicted"]["step"] / r["measured"]["step"])
        chosen += rows[:per_family]
    return chosen


def trace_row(row: Mapping[str, Any], top: int) -> dict[str, Any]:
    import torch

    from perfpredict.profiling import zoo

    spec = zoo.ModelSpec.from_key(row["key"])
    model = spec.build("cuda")
    x, labels = spec.inputs("cuda")
    step = zoo.make_step(model, x, labels, spec.phase)
    step()  # warm-up: lazy init, cuBLAS/cuDNN handles and workspaces
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    try:
        step()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    measured_peak = torch.cuda.max_memory_allocated()
    traced, live = live_at_peak(snapshot["device_traces"][torch.cuda.current_device()])
    del model, x, labels, step
    torch.cuda.empty_cache()
    return {
        "key": row["key"],
        "family": row["family"],
        "dtype": row["dtype"],
        "batch": row["batch"],
        "split_measured_step": row["measured"]["step"],
        "split_predicted_step": row["predicted"]["step"],
        "baseline_bytes": baseline,
        "traced_peak_bytes": traced,
        "max_allocated_bytes": measured_peak,
        "at_peak": [{"bytes": int(e.get("size", 0)), "where": where(list(e.get("frames") or []))} for e in live[:top]],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", type=Path, required=True, help="a memory_split_<device>.json")
    ap.add_argument(
        "--families",
        default="distilbert,roberta,bert,vgg,resnet,mobilenet_v2,gpt2:training,vgg:training",
        help="family or family:phase entries (phase inference when not named)",
    )
    ap.add_argument("--per-family", type=int, default=2)
    ap.add_argument("--top", type=int, default=12, help="allocations kept per row")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(
            "memory_history needs a CUDA GPU: run it on the GPU host (see benchmarks/gpu_campaign.sh)", file=sys.stderr
        )
        return 2
    rows = pick_rows(json.loads(args.split.read_text()), args.families.split(","), args.per_family)
    results = []
    for row in rows:
        try:
            results.append(trace_row(row, args.top))
        except Exception as err:  # noqa: BLE001 - one row's failure (an OOM, say) must not lose the others
            results.append({"key": row["key"], "error": f"{type(err).__name__}: {str(err)[:200]}"})
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"{row['family']} b{row['batch']}: done", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
