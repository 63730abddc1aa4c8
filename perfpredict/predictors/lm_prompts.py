"""The words ``gnn_llm`` shows its language model: the task prompt of a row, and the summary text of a graph.

The prompt names the task, the device (catalog figures, and whether they are measured ceilings), phase, batch,
sequence length and dtype. Numbers are rounded to three significant digits so that the tokenizer sees the same
few tokens for close values. The graph summary (nodes, edges, FLOPs, parameters, per-op-kind counts and FLOP
shares) is what stage 2 aligns the graph token with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfpredict.hardware.devices import Device
    from perfpredict.predictors.cost_arrays import CostArrays

TASK = "predict the run time, peak memory, energy and power of this model"
_DTYPE_WORDS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def _num(x: float) -> str:
    """Three significant digits, without exponent notation for the ranges we print."""
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{_num(x / scale)} {prefix}{unit}"
    return f"{_num(x)} {unit}"


def device_phrase(device: Device, dtype: str) -> str:
    """The device in words and numbers: name, kind, peak FLOP/s (fp32 and the row's dtype), bandwidth, memory."""
    peak_dtype, _ = device.peak_flops(dtype, device.kind == "gpu" and dtype != "float32")
    words = [
        f"device {device.name} ({device.vendor} {device.kind}",
        f"{device.sm_count} {'SMs' if device.kind == 'gpu' else 'cores'})",
        f"fp32 peak {_si(device.peak_flops_per_s.get('fp32', 0.0), 'FLOP/s')}",
        f"{_DTYPE_WORDS.get(dtype, dtype)} peak {_si(peak_dtype, 'FLOP/s')}",
        f"memory bandwidth {_si(device.memory_bandwidth_bytes_per_s, 'B/s')}",
        f"memory {_si(float(device.memory_bytes), 'B')}",
    ]
    words.append("measured ceilings" if device.measured else "datasheet ceilings")
    return ", ".join(words)


def row_prompt(row: Mapping[str, Any], device: Device, seq_len: int | None) -> str:
    """The task prompt of one measured (or asked-about) configuration."""
    dtype = str(row.get("dtype") or "float32")
    phase = "training step" if row.get("phase") == "training" else "inference"
    seq = f", sequence {int(seq_len)}" if seq_len else ""
    return (
        f"{TASK}. {device_phrase(device, dtype)}. {phase}, batch {int(row.get('batch_size') or 1)}{seq}, "
        f"dtype {_DTYPE_WORDS.get(dtype, dtype)}."
    )


def graph_summary(arrays: CostArrays, batch: float) -> str:
    """A one-paragraph description of a graph at ``batch``: sizes, totals and the op mix."""
    import numpy as np

    graph = arrays.graph
    flops = arrays.at(np.array([float(batch)]))[0][:, 0]
    total = float(flops.sum())
    counts = Counter(n.op for n in graph.nodes)
    share: Counter[str] = Counter()
    for node, f in zip(graph.nodes, flops):
        share[node.op] += float(f)
    top = ", ".join(
        f"{op} {n}" + (f" ({100 * share[op] / total:.0f}% of FLOPs)" if total and share[op] else "")
        for op, n in counts.most_common(6)
    )
    phase = (
        "training graph (forward and backward)"
        if any(n.attrs.get("backward") for n in graph.nodes)
        else "inference graph"
    )
    return (
        f"{graph.name or 'model'} {phase}, {len(graph.nodes)} ops, {len(graph.edges)} edges, "
        f"{_si(total, 'FLOP')}, {_si(float(graph.param_count), 'parameters')}, batch {int(batch)}, "
        f"{_DTYPE_WORDS.get(graph.dtype, graph.dtype)}; ops: {top}."
    )
