"""Device time per node of a graph on a GPU, from the learned GPU efficiency model (:mod:`gpu_efficiency`).

The two-timeline predictor asks for device seconds per node at many batch sizes at once (``predict_many``); the
bound scales with the batch exactly (``CostArrays``), and the efficiency is read at a few anchor batches and
interpolated (``TwoTimelinePredictor._efficiency_at``). Every GPU is read on its datasheet basis
(:func:`gpu_op_features.datasheet_basis`), with the units the run allows (``op_kinds.attainable_rate`` under its TF32 switches: TF32 for
float32 convolutions by cuDNN's default, for matmuls with ``tf32=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from perfpredict.core import ops
from perfpredict.predictors import gpu_efficiency as ge
from perfpredict.predictors import gpu_op_features as gf
from perfpredict.predictors.op_efficiency import OpShape, node_shape

Efficiency = Callable[[Sequence[OpShape]], np.ndarray]


def efficiency_fn(model: ge.GpuEfficiencyModel, device: Any, config: Any) -> Efficiency:
    """Efficiency of a list of op shapes on ``device`` under ``config``'s tensor-core rules. A MIG slice runs each
    kernel at the efficiency its whole GPU reaches on it (the slice's bound has its own SMs and bandwidth), so one
    evaluation serves every slice of a MIG table. No op is slower than on a GPU ``device`` matches or beats on every
    datasheet figure, nor faster than on a measured one that beats it (:meth:`GpuEfficiencyModel.efficiency`)."""
    if getattr(device, "parent", None):
        from perfpredict.hardware.devices import get_device

        device = get_device(device.parent)
    basis = gf.datasheet_basis(device)

    def efficiency(shapes: Sequence[OpShape]) -> np.ndarray:
        units = [gf.unit_of(s, basis, config) for s in shapes]
        return model.efficiency(shapes, basis, units)

    return efficiency


def never_slower_than(device: Any) -> list[str]:
    """The catalog GPUs ``device``'s ops are held to (same architecture, no faster on any datasheet figure)."""
    from perfpredict.hardware.dominance import dominated

    return [d.name for d in dominated(device)]


def never_faster_than(device: Any) -> list[str]:
    """The catalog GPUs that hold ``device``'s unmeasured ops from above (same architecture, at least as fast)."""
    from perfpredict.hardware.dominance import dominating

    return [d.name for d in dominating(device)]


def float8_shares(graph: Any, device: Any) -> np.ndarray:
    """Per node: a float8 GEMM's time over the same GEMM's in its own dtype (``float8_linears.float8_share``; the
    learned efficiency has seen no float8 GEMM), 1 for every other op."""
    from perfpredict.compiler_hooks.float8_linears import float8_share

    return np.array([float8_share(n, device) for n in graph.nodes])


def bound_s(arrays: Any, device: Any, config: Any, batches: np.ndarray) -> np.ndarray:
    """The roofline bound [node, config] on the datasheet basis (views: 0)."""
    basis = gf.datasheet_basis(device)
    shapes = [node_shape(n) for n in arrays.graph.nodes]
    rates = np.array([gf.rate(s, basis, gf.unit_of(s, basis, config)) for s in shapes])
    flops, moved, _, _ = arrays.at(batches)
    bound = np.maximum(flops / rates[:, None], moved / max(basis.memory_bandwidth_bytes_per_s, 1.0))
    views = np.array([n.is_view for n in arrays.graph.nodes], dtype=bool)[:, None]
    return np.where(views, 0.0, bound)


def memory_s(
    efficiency: Efficiency, device: Any, moved_bytes: np.ndarray, dtype: str, out_numel: int = 0
) -> np.ndarray:
    """Seconds to stream ``moved_bytes`` (one value per config) in one memory-bound kernel: a fused inductor group
    or an optimizer step, read as an elementwise op of that traffic."""
    basis = gf.datasheet_basis(device)
    width = ops.DTYPE_BYTES.get(dtype, 4)
    out = []
    for moved in np.atleast_1d(moved_bytes):
        numel = out_numel or max(int(moved // (3 * width)), 1)
        shape = OpShape(ops.ELEMENTWISE, dtype, float(numel), float(moved), (numel,), ((numel,),))
        out.append(float(moved) / max(basis.memory_bandwidth_bytes_per_s, 1.0) / efficiency([shape])[0])
    return np.asarray(out)


def classes_used(graph: Any, device: Any, config: Any) -> set[str]:
    """The efficiency classes this graph's kernels fall in on ``device``."""
    basis = gf.datasheet_basis(device)
    found = set()
    for node in graph.nodes:
        if not node.is_view:
            s = node_shape(node)
            found.add(ge.efficiency_class(s, gf.unit_of(s, basis, config)))
    return found


def describe(model: ge.GpuEfficiencyModel, graph: Any, device: Any, config: Any) -> str:
    """One line for the report's assumptions: the data behind this GPU's device time."""
    lines = model.sources(device, classes_used(graph, device, config))
    whole = _whole(device) if getattr(device, "parent", None) else device
    held, above = never_slower_than(whole), never_faster_than(whole)
    if held:
        lines.append(
            f"no op slower than on the {', '.join(held)} (same architecture, no faster on any datasheet figure)"
        )
    if above:
        lines.append(
            f"no op faster than on the {', '.join(above)} (same architecture, at least as fast on every datasheet "
            "figure) where those were measured and this GPU was not"
        )
    return "learned per-op efficiency on the datasheet (op-efficiency-gpu): " + "; ".join(lines)


def _whole(device: Any) -> Any:
    from perfpredict.hardware.devices import get_device

    return get_device(device.parent)
