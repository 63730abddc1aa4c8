"""How much of NeuSight's end-to-end table its op rows hold: the end-to-end rows whose layer GEMMs were timed one
by one, on the same GPU, among NeuSight's op rows, which train the device-time model.

NeuSight's test split (``data/external/neusight``, ``source_split == "test"``) holds its out-of-distribution
shapes, and those are the GEMMs of the models of its end-to-end table, at their batches and sequence lengths. A
GEMM is matched by its problem, not its spelling: a linear layer as ``(rows, in features, out features)`` (NeuSight's
``nn.Linear`` on ``[B, M, N]`` and a graph's linear on any leading shape are one GEMM of ``B*M`` rows), a batched
matmul as ``(batch, M, K, N)`` (an attention matmul on ``[B, H, M, K]`` is a bmm of batch ``B*H``). A row's layer
GEMMs are the distinct GEMMs of its forward pass that repeat (once per layer, or more); the heads that run once are
not layer GEMMs. A training row's forward pass is the inference graph at the same batch and sequence.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPS = ROOT / "data" / "external" / "neusight" / "ops.parquet"


def gemm_key(kind: str, out_shape: Iterable[int], in_shapes: Iterable[Iterable[int]]) -> tuple | None:
    """A GEMM's problem, ``("linear", rows, K, N)`` or ``("bmm", batch, M, K, N)``; None for any other op."""
    out, ins = tuple(out_shape), [tuple(s) for s in in_shapes]
    if kind != "matmul" or len(ins) < 2 or len(out) < 2:
        return None
    a, b = ins[0], ins[1]
    if len(a) == 1:  # addmm(bias, x, weight): the first two inputs are the bias and the activations
        return ("linear", math.prod(out[:-1]), b[-1], out[-1])
    if len(b) == 2:  # a weight [N, K] (or [K, N]): a linear layer over every leading dimension of ``a``
        return ("linear", math.prod(out[:-1]), a[-1], out[-1])
    return ("bmm", math.prod(out[:-2]), out[-2], a[-1], out[-1])


def op_row_gemms() -> dict[str, dict[tuple, set[str]]]:
    """Per GPU (catalog name), NeuSight's timed GEMMs and the splits each is in."""
    import pandas as pd

    frame = pd.read_parquet(OPS, columns=["device", "source_split", "kind", "out_shape", "in_shapes"])
    found: dict[str, dict[tuple, set[str]]] = {}
    for device, split, kind, out, ins in frame.itertuples(index=False):
        key = gemm_key(kind, json.loads(out), json.loads(ins))
        if key is not None:
            found.setdefault(device, {}).setdefault(key, set()).add(split)
    return found


def layer_gemms(graph) -> dict[tuple, float]:
    """The distinct GEMMs of ``graph`` that occur more than once, with the FLOPs of all their calls."""
    from perfpredict.predictors.op_efficiency import node_shape

    counts: Counter = Counter()
    flops: dict[tuple, float] = {}
    for node in graph.nodes:
        s = node_shape(node)
        key = gemm_key(s.kind, s.out_shape, s.in_shapes)
        if key is not None:
            counts[key] += 1
            flops[key] = flops.get(key, 0.0) + s.flops
    return {key: flops[key] for key, n in counts.items() if n > 1}


def overlap(rows: list[dict], forward_graph) -> list[dict]:
    """Per single-GPU end-to-end row (``device``: its catalog name): its layer GEMMs, how many NeuSight timed on
    that GPU, in which splits, and their share of the layer GEMMs' FLOPs. ``forward_graph(model, batch, seq)``
    gives the forward pass."""
    timed = op_row_gemms()
    out = []
    for r in rows:
        gemms = layer_gemms(forward_graph(r["model_name"], int(r["batch"]), int(r["seqlen"])))
        mine = timed.get(r["device"], {})
        held = [k for k in gemms if k in mine]
        out.append(
            {
                **r,
                "layer_gemms": len(gemms),
                "timed": len(held),
                "splits": sorted({s for k in held for s in mine[k]}),
                "flop_share": sum(gemms[k] for k in held) / max(sum(gemms.values()), 1.0),
            }
        )
    return out


def section(
    found: list[dict], published: dict[tuple[str, str], int], labelled: dict[tuple[str, str], int]
) -> list[str]:
    """The report's section: NeuSight's op rows by GPU and split, as published and as labelled (those the
    device-time model trains on), and per GPU the end-to-end rows whose layer GEMMs are timed."""
    gpus = sorted({d for d, _ in published})
    lines = [
        "### NeuSight's op rows in the training data, and the end-to-end rows' GEMMs among them",
        "",
        "The device-time model trains on every NeuSight op row that its timing floor keeps (labelled), the test "
        "split included: NeuSight published its H100 and L4 rows only as test rows. Rows per GPU and NeuSight "
        "split:",
        "",
        "| | " + " | ".join(gpus) + " | all |",
        "|---|" + "---:|" * (len(gpus) + 1),
    ]
    for name, counts in (("published", published), ("labelled", labelled)):
        for split in ("train", "test"):
            total = sum(n for (_, s), n in counts.items() if s == split)
            cells = " | ".join(f"{counts.get((g, split), 0):,}" for g in gpus)
            lines.append(f"| {name}, {split} | {cells} | {total:,} |")
    lines += [
        "",
        "Each single-GPU end-to-end row's layer GEMMs (the distinct GEMMs of its forward pass that repeat), matched "
        "by problem size against NeuSight's op rows of the same GPU (`benchmarks/neusight_overlap.py`):",
        "",
        "| GPU | rows | every layer GEMM timed | at least half their FLOPs | at least one | none | layer GEMM FLOPs timed "
        "| splits |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    by_gpu: dict[str, list[dict]] = {}
    for r in found:
        by_gpu.setdefault(r["device"], []).append(r)
    for gpu, group in [*sorted(by_gpu.items()), ("all", found)]:
        every = sum(r["timed"] == r["layer_gemms"] > 0 for r in group)
        half = sum(r["flop_share"] >= 0.5 for r in group)
        none = sum(r["timed"] == 0 for r in group)
        share = sum(r["flop_share"] for r in group) / len(group)
        splits = ", ".join(sorted({s for r in group for s in r["splits"]})) or "-"
        lines.append(
            f"| {gpu} | {len(group)} | {every} | {half} | {len(group) - none} | {none} | {100 * share:.0f}% "
            f"| {splits} |"
        )
    return lines


def op_row_counts() -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """NeuSight's op rows per (GPU, split): as published, and labelled (the rows ``gpu_training_rows`` keeps once
    its per-GPU timing floor is taken off, which the device-time model trains on)."""
    import pandas as pd

    from perfpredict.learning.gpu_training_rows import load_frame

    published = pd.read_parquet(OPS, columns=["device", "source_split"])
    frame = load_frame(("neusight",), own=False)  # the floor is per GPU, from NeuSight's rows alone
    return _per_gpu_and_split(published), _per_gpu_and_split(frame[frame["device_s"].notna()])


def _per_gpu_and_split(frame) -> dict[tuple[str, str], int]:
    return {key: int(n) for key, n in frame.groupby(["device", "source_split"]).size().items()}
