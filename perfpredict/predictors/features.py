"""Features for the learned predictors: tabular (model + hardware + physics) and per-node graph features.

Tabular features cover the tree-based research's model features (batch, sequence, dtype, nodes, edges, FLOPs,
params, memory, layers, heads, hidden size, vocab), hardware features from the device catalog (measured
ceilings where a roofline run exists), and our own physics features: the analytical predictor's time split by
bound and its memory terms. Node features (for the GNNs) are a canonical-op one-hot plus log-scaled FLOPs,
bytes, params and output size. The names and their order form the feature schema; its hash goes into every
artifact's manifest, so a model trained on another schema is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from perfpredict.core import op_kinds, ops

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.hardware.devices import Device
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.cost_arrays import CostArrays

# 2: node, edge and op-kind counts leave views out (frontends disagree on them, not on the work); vocab from any
# embedding lookup; training graphs hold fused attention. 3: the analytical memory terms give each element picked
# out of a multi-output op its own life (memory_model.picked_elements), so training rows' memory features moved.
# 4: the analytical time share of each op kind, depthwise convolutions and backward nodes; a CPU without
# AVX512_BF16 gets an emulated bf16 peak (devices.detect_local_cpu), so CPU bf16 rows' physics features moved.
# 5: the analytical memory is the step's peak or the weights' float32 load, whichever is higher
# (memory_model.load_peak_bytes), so half-precision rows' log_analytical_memory moved.
FEATURE_VERSION = 5
DTYPES = ("float32", "float16", "bfloat16")
OP_KINDS = op_kinds.BUILTIN_KINDS  # the trained one-hot columns
# Views cost nothing, and each frontend spells reshapes differently (ONNX keeps 19 where FX has one in a ResNet
# stem), so they are neither counted nor fed to the trees.
COUNTED_KINDS = tuple(k for k in OP_KINDS if not op_kinds.is_view(k))
ARCH_KEYS = ("layers", "heads", "hidden", "vocab", "widest")

MODEL_FEATURES = (
    [
        "batch",
        "log_seq",
        "is_training",
        "optimizer_states",
        "log_nodes",
        "log_edges",
        "log_flops",
        "log_bytes",
        "log_params",
        "log_param_bytes",
        "log_trainable_bytes",
        "log_input_bytes",
    ]
    + [f"dtype_{d}" for d in DTYPES]
    + [f"count_{k}" for k in COUNTED_KINDS]
    + [f"flop_share_{k}" for k in (ops.MATMUL, ops.CONV, ops.ATTENTION)]
    + [f"arch_{k}" for k in ARCH_KEYS]
    + ["count_backward", "count_depthwise_conv", "flop_share_depthwise_conv", "log_depthwise_conv_bytes"]
)
HARDWARE_FEATURES = [
    "is_gpu",
    "log_peak_fp32",
    "log_peak_dtype",
    "log_bandwidth",
    "sm_count",
    "log_memory",
    "tdp_w",
    "idle_power_w",
    "launch_overhead_us",
    "log_l2",
    "measured_ceilings",
]
# The time shares say which kind of op the analytical model thinks dominates: the trees learn how wrong it is per
# kind (on a CPU without bf16 arithmetic, a bf16 conv misses by 4x more than a bf16 matmul).
PHYSICS_FEATURES = [
    "log_analytical_latency",
    "log_compute_bound_s",
    "log_memory_bound_s",
    "log_launch_s",
    "log_activation_peak",
    "log_analytical_memory",
    "analytical_power_w",
] + [f"time_share_{k}" for k in COUNTED_KINDS]
STATIC_ONLY_FEATURES = [
    "batch",
    "log_seq",
    "is_training",
    "log_nodes",
    "log_edges",
    "log_flops",
    "log_params",
    "log_bytes",
] + [f"dtype_{d}" for d in DTYPES]
TABULAR_FEATURES = tuple(MODEL_FEATURES + HARDWARE_FEATURES + PHYSICS_FEATURES)

NODE_FEATURES = tuple(
    [f"op_{k}" for k in OP_KINDS]
    + [f"dtype_{d}" for d in DTYPES]
    + [
        "log_flops",
        "log_bytes_read",
        "log_bytes_written",
        "log_params",
        "log_out_numel",
        "out_rank",
        "is_backward",
        "tensor_core",
    ]
)


def schema_hash(names: tuple[str, ...] | list[str] = TABULAR_FEATURES, extra: Any = None) -> str:
    """A short hash of feature names and order (and ``extra``, e.g. node features) for artifact manifests."""
    payload = json.dumps({"v": FEATURE_VERSION, "names": list(names), "extra": extra}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _log(x: Any) -> Any:
    return np.log1p(np.maximum(x, 0.0))


def tabular_matrix(
    arrays: CostArrays, device: Device, config: RunConfig, batches: np.ndarray, arch: Mapping[str, Any] | None = None
) -> np.ndarray:
    """One row of TABULAR_FEATURES per batch size, for a graph captured as batch-affine cost arrays."""
    from dataclasses import replace

    from perfpredict.predictors.analytical import AnalyticalPredictor
    from perfpredict.predictors.memory_model import peak_tensor_bytes

    graph = arrays.graph
    batches = np.asarray(batches, dtype=float)
    n = len(batches)
    flops, moved, _, input_bytes = arrays.at(batches)
    # The shipped learned models were trained on physics columns that cost float32 convolutions at the plain FP32
    # rate; their trees absorb what TF32 changes, so their features keep that rule.
    config = replace(config, conv_tf32=False)
    ev = AnalyticalPredictor().evaluate(arrays, device, config, batches)
    n_nodes, n_edges = graph_size_without_views(graph)
    cols: dict[str, np.ndarray] = {
        "batch": batches,
        "log_seq": np.full(n, math.log1p(graph.seq_len or 0)),
        "is_training": np.full(n, float(config.phase == "training")),
        "optimizer_states": np.full(n, float(config.optimizer_states)),
        "log_nodes": np.full(n, math.log1p(n_nodes)),
        "log_edges": np.full(n, math.log1p(n_edges)),
        "log_flops": _log(flops.sum(axis=0)),
        "log_bytes": _log(moved.sum(axis=0)),
        "log_params": np.full(n, math.log1p(graph.param_count)),
        "log_param_bytes": np.full(n, math.log1p(graph.param_bytes)),
        "log_trainable_bytes": np.full(n, math.log1p(graph.trainable_param_bytes)),
        "log_input_bytes": _log(input_bytes),
    }
    for d in DTYPES:
        cols[f"dtype_{d}"] = np.full(n, float(graph.dtype == d))
    kinds = np.array([node.op for node in graph.nodes], dtype=object)
    for k in COUNTED_KINDS:
        cols[f"count_{k}"] = np.full(n, float((kinds == k).sum()))
    total = np.maximum(flops.sum(axis=0), 1.0)
    for k in (ops.MATMUL, ops.CONV, ops.ATTENTION):
        mask = kinds == k
        cols[f"flop_share_{k}"] = flops[mask].sum(axis=0) / total if mask.any() else np.zeros(n)
    depthwise = depthwise_conv_mask(graph)
    cols.update(
        {
            "count_backward": np.full(n, float(sum(bool(node.attrs.get("backward")) for node in graph.nodes))),
            "count_depthwise_conv": np.full(n, float(depthwise.sum())),
            "flop_share_depthwise_conv": flops[depthwise].sum(axis=0) / total,
            "log_depthwise_conv_bytes": _log(moved[depthwise].sum(axis=0)),
        }
    )
    arch = graph_arch_info(graph) if arch is None else arch
    for k in ARCH_KEYS:
        value = arch.get(k)
        cols[f"arch_{k}"] = np.full(n, float(value) if isinstance(value, (int, float)) else np.nan)
    cols.update(_hardware_columns(device, graph.dtype, n))
    compute_bound = ev.compute_s >= ev.memory_s
    work = np.maximum(ev.compute_s, ev.memory_s)
    cols.update(
        {
            "log_analytical_latency": np.log(np.maximum(ev.latency_s, 1e-12)),
            "log_compute_bound_s": _log(np.where(compute_bound, work, 0.0).sum(axis=0) * 1e6),
            "log_memory_bound_s": _log(np.where(compute_bound, 0.0, work).sum(axis=0) * 1e6),
            "log_launch_s": _log((ev.node_s - work).sum(axis=0) * 1e6),
            "log_activation_peak": _log(ev.activations_bytes),
            # Tensor memory only: the collector measures the allocator's peak above the level before the model was
            # built, which holds no CUDA context, so the runtime overhead is left out here and added back in the report.
            "log_analytical_memory": _log(peak_tensor_bytes(graph, config, ev.activations_bytes)),
            "analytical_power_w": ev.power_w,
        }
    )
    node_total_s = np.maximum(ev.node_s.sum(axis=0), 1e-12)
    for k in COUNTED_KINDS:
        mask = kinds == k
        cols[f"time_share_{k}"] = ev.node_s[mask].sum(axis=0) / node_total_s if mask.any() else np.zeros(n)
    return np.column_stack([cols[name] for name in TABULAR_FEATURES])


def depthwise_conv_mask(graph: OpGraph) -> np.ndarray:
    """Convolutions whose weight has one input channel per group (depthwise: MobileNet, EfficientNet, ConvNeXt).

    Read off the weight's shape (out, in / groups, k...), which every frontend keeps; they run far below the
    dense-conv rate on every device, since each output reads only k x k inputs.
    """

    def is_depthwise(node: Any) -> bool:
        if node.op != ops.CONV or len(node.inputs) < 2:
            return False
        data, weight = node.inputs[0].shape, node.inputs[1].shape
        # a first layer on one-channel images has the same weight shape but one input channel
        return len(weight) >= 3 and weight[1] == 1 and len(data) >= 3 and data[1] > 1

    return np.array([is_depthwise(node) for node in graph.nodes], dtype=bool)


def graph_size_without_views(graph: OpGraph) -> tuple[int, int]:
    """Nodes and edges once views are contracted: an edge through a chain of views joins its two real ends.

    Frontends agree on the work but not on how many reshapes, transposes and getitems spell it, so these counts
    are what the features use.
    """
    from perfpredict.predictors.memory_model import storage_roots

    root = storage_roots(graph)
    edges = {
        (root[src], dst)
        for src, dst in graph.edges
        if not graph.nodes[dst].is_view and not graph.nodes[root[src]].is_view
    }
    return sum(not node.is_view for node in graph.nodes), len(edges)


def graph_arch_info(graph: OpGraph) -> dict[str, float]:
    """The research's architecture features, read off the graph so user models and zoo rows agree.

    layers: forward attention ops (transformers), else forward convolutions, else matmuls; heads and hidden:
    from the first attention's query (batch, heads, seq, head_dim); vocab: the largest lookup table's rows;
    widest: the largest last dimension any matmul produces (the MLP's intermediate size in a transformer).
    """
    forward = [n for n in graph.nodes if not n.attrs.get("backward")]
    attention = [n for n in forward if n.op == ops.ATTENTION]
    convs = [n for n in forward if n.op == ops.CONV]
    matmuls = [n for n in forward if n.op == ops.MATMUL]
    out: dict[str, float] = {"layers": float(len(attention) or len(convs) or len(matmuls))}
    query = attention[0].inputs[0].shape if attention and attention[0].inputs else ()
    if len(query) == 4:
        out["heads"], out["hidden"] = float(query[1]), float(query[1] * query[3])
    # Any forward lookup (FX's embedding, Relax's take, ONNX's Gather): its 2-D float input is the table.
    tables = [
        t.shape[0]
        for n in forward
        if n.op == ops.EMBEDDING
        for t in n.inputs
        if t.dtype in ops.FLOAT_DTYPES and len(t.shape) == 2
    ]
    if tables:
        out["vocab"] = float(max(tables))
    widths = [n.outputs[0].shape[-1] for n in matmuls if n.outputs and n.outputs[0].shape]
    if widths:
        out["widest"] = float(max(widths))
    return out


def _hardware_columns(device: Device, dtype: str, n: int) -> dict[str, np.ndarray]:
    peak_dtype, _ = device.peak_flops(dtype, device.kind == "gpu" and dtype != "float32")
    values = {
        "is_gpu": float(device.kind == "gpu"),
        "log_peak_fp32": math.log1p(device.peak_flops_per_s.get("fp32", 0)),
        "log_peak_dtype": math.log1p(peak_dtype),
        "log_bandwidth": math.log1p(device.memory_bandwidth_bytes_per_s),
        "sm_count": float(device.sm_count),
        "log_memory": math.log1p(device.memory_bytes),
        "tdp_w": device.tdp_w,
        "idle_power_w": device.idle_power_w,
        "launch_overhead_us": device.launch_overhead_s * 1e6,
        "log_l2": math.log1p(device.l2_bytes),
        "measured_ceilings": float(bool(device.measured)),
    }
    return {k: np.full(n, float(v)) for k, v in values.items()}


def node_matrix(arrays: CostArrays, batch: float, device_kind: str = "gpu") -> np.ndarray:
    """NODE_FEATURES for every node of the graph at ``batch`` (log-scaled, not yet standardised)."""
    graph = arrays.graph
    flops, moved, out_bytes, _ = arrays.at(np.array([batch]))
    rows = []
    for i, node in enumerate(graph.nodes):
        out = node.outputs[0] if node.outputs else None
        dtype = out.dtype if out is not None else graph.dtype
        scale = out_bytes[i, 0] / max(node.output_bytes, 1) if node.output_bytes else 1.0
        read_share = node.bytes_read / max(node.bytes_read + node.bytes_written, 1)
        onehot = [float(node.op == k) for k in OP_KINDS] + [float(dtype == d) for d in DTYPES]
        rows.append(
            onehot
            + [
                math.log1p(flops[i, 0]),
                math.log1p(moved[i, 0] * read_share),
                math.log1p(moved[i, 0] * (1 - read_share)),
                math.log1p(node.params),
                math.log1p((out.numel if out is not None else 0) * scale),
                float(len(out.shape) if out is not None else 0),
                float(bool(node.attrs.get("backward"))),
                # the trained basis: half-precision tensor-core ops only (see op_kinds.compute_unit)
                float(op_kinds.uses_tensor_cores(node.op, dtype, device_kind == "gpu", tf32=False, conv_tf32=False)),
            ]
        )
    return np.asarray(rows, dtype=np.float32).reshape(len(graph.nodes), len(NODE_FEATURES))


def edge_index(graph: OpGraph) -> np.ndarray:
    """Edges as a [2, E] int64 array (PyG's layout)."""
    if not graph.edges:
        return np.zeros((2, 0), dtype=np.int64)
    return np.asarray(graph.edges, dtype=np.int64).T.copy()
