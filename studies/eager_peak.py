"""The liveness walk against eager PyTorch, without a GPU: a training step's forward and backward run eagerly on
the CPU, every tensor an op makes tracked until it dies, against the analytical walk of the same traced graph.

    python studies/eager_peak.py --dataset data/nvidia-h100-80gb-hbm3 --batch 2

The GPU memory model is read off measured peaks, which need a GPU lease. This checks its liveness walk on any
host: which tensors live when, the logits freed after their last use, the gradients born in the backward
(``memory_model.backward_born_peak``). A ``TorchDispatchMode`` sees every op of the forward and the backward
(the CPU's autograd engine runs on the calling thread), records the storage of each output, and a weakref
finalizer takes it off when it dies. Parameters, buffers, their views and the inputs are made before the step
and are not counted; the gradients are. The walk gets the same: no optimizer step, no cuDNN workspace, and on the
CPU's math attention path (attention dropout on) the scores it saves (``cpu_math_attention_bytes``).

Writes studies/results/eager_peak_<dataset>.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import weakref
from pathlib import Path

import numpy as np

from perfpredict.learning.training_data import GraphCache, arrays_for
from perfpredict.predictors.memory_model import (
    backward_born_peak,
    cpu_math_attention_bytes,
    element_bytes,
    free_steps,
    picked_elements,
)
from perfpredict.profiling import zoo
from perfpredict.profiling.dataset import load_dataset

RESULTS = Path(__file__).parent / "results"


def training_specs(folder: Path, batch: int, max_seq: int, max_hidden: int) -> list[zoo.ModelSpec]:
    """One float32 training spec per architecture (and sequence) in the dataset, at ``batch``."""
    seen, specs = set(), []
    for row in load_dataset(folder).rows:
        spec = zoo.ModelSpec.from_key(row["key"])
        arch = (spec.family, json.dumps(spec.params, sort_keys=True), spec.seq)
        if spec.phase != "training" or arch in seen:
            continue
        seen.add(arch)
        if (spec.seq or 0) <= max_seq and int(spec.params.get("hidden", 0)) <= max_hidden:
            specs.append(zoo.ModelSpec(spec.family, spec.params, phase="training", batch=batch, seq=spec.seq))
    return sorted(specs, key=lambda s: (s.family, s.to_key()))


def eager_peak_bytes(spec: zoo.ModelSpec) -> float:
    """Peak bytes of the tensors that one eager forward + backward makes (gradients included)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    model = spec.build("cpu")
    x, labels = spec.inputs("cpu")
    before = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    before |= {t.untyped_storage().data_ptr() for t in (x, labels) if t is not None}
    live: dict[int, int] = {}
    state = {"now": 0, "peak": 0}

    def gone(key: int) -> None:
        state["now"] -= live.pop(key, 0)

    def track(t: object) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            return
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in live or key in before or storage.nbytes() == 0:
            return
        live[key] = storage.nbytes()
        state["now"] += storage.nbytes()
        state["peak"] = max(state["peak"], state["now"])
        weakref.finalize(storage, gone, key)

    class Tracker(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                track(t)
            return out

    model.train()
    with Tracker():
        loss = zoo._loss(model(x, labels=labels))
        loss.backward()
        del loss
    return float(state["peak"])


def walk_peak_bytes(spec: zoo.ModelSpec, cache: GraphCache) -> float:
    """The analytical walk's peak for the same step: activations and gradients, born where the graph makes them."""
    arrays = arrays_for(spec, cache)
    graph = arrays.graph
    _, _, out_bytes, input_bytes = arrays.at(np.array([float(spec.batch)]))
    out_bytes = out_bytes + cpu_math_attention_bytes(graph, out_bytes)
    picked = picked_elements(graph)
    walk = element_bytes(graph, out_bytes, picked, gradients_walk=True)
    frees = free_steps(graph, picked, forward_outputs_kept=False)
    trainable = float(graph.trainable_param_bytes)
    return float(backward_born_peak(graph, walk, frees, None, set(picked), trainable, 0.0).total[0] + trainable)


def report(name: str, batch: int, results: list[tuple[zoo.ModelSpec, float, float]]) -> list[str]:
    ratios = [w / e for _, e, w in results]
    lines = [
        f"# The liveness walk against eager PyTorch on the CPU: {name}",
        "",
        f"`python studies/eager_peak.py --dataset data/{name} --batch {batch}`; {len(results)} float32 "
        "training architectures, forward + backward, no optimizer step. Eager: the peak bytes of the tensors "
        "the step's ops make, gradients included. Walk: the analytical walk of the traced graph "
        "(`memory_model.backward_born_peak`, no optimizer scratch, no cuDNN workspace). Ratio: walk/eager.",
        "",
        f"- walk/eager: median {statistics.median(ratios):.3f}, mean absolute error "
        f"{100 * statistics.fmean(abs(r - 1) for r in ratios):.1f}%",
        "",
        "| family | median ratio | n |",
        "|---|---:|---:|",
    ]
    families = sorted({s.family for s, _, _ in results})
    for fam in families:
        mine = [w / e for s, e, w in results if s.family == fam]
        lines.append(f"| {fam} | {statistics.median(mine):.3f} | {len(mine)} |")
    lines += ["", "| family | params | seq | eager MB | walk MB | ratio |", "|---|---|---:|---:|---:|---:|"]
    for spec, eager, walk in results:
        lines.append(
            f"| {spec.family} | `{json.dumps(spec.params, sort_keys=True)}` | {spec.seq or '-'} | "
            f"{eager / 1e6:.1f} | {walk / 1e6:.1f} | {walk / eager:.3f} |"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=Path("data/nvidia-h100-80gb-hbm3"))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--max-seq", type=int, default=1024, help="skip longer sequences (CPU time)")
    ap.add_argument("--max-hidden", type=int, default=1024, help="skip wider models (CPU time)")
    args = ap.parse_args()
    import torch

    torch.manual_seed(0)
    cache, results = GraphCache(), []
    for spec in training_specs(args.dataset, args.batch, args.max_seq, args.max_hidden):
        try:
            results.append((spec, eager_peak_bytes(spec), walk_peak_bytes(spec, cache)))
        except Exception as err:  # noqa: BLE001 - one untraceable architecture must not stop the check
            print(f"skipped {spec.family}: {type(err).__name__}: {str(err)[:120]}", file=sys.stderr)
            continue
        spec_, eager, walk = results[-1]
        print(f"{spec_.family}: eager {eager / 1e6:.1f} MB, walk {walk / 1e6:.1f} MB", file=sys.stderr)
    if not results:
        print(f"no float32 training architecture in {args.dataset} could be run", file=sys.stderr)
        return 1
    lines = report(args.dataset.name, args.batch, results)
    (RESULTS / f"eager_peak_{args.dataset.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
