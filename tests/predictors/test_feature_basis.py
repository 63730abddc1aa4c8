"""The learned predictors' features are what the shipped artifacts were trained on.

Every feature vector of a fixed set of ops (each tensor-core and memory-bound kind, in float32, bfloat16 and int64)
and of one graph holding them is hashed and compared with ``feature_basis.json``, written from the code that trained
the shipped artifacts (main at 3766a80, before the op-kind registry). A refactor that moves any feature, even in
its last bit, fails here and would need the artifacts retrained. Regenerate only together with a retraining:
``PERFPREDICT_WRITE_FEATURE_BASIS=1 pytest tests/predictors/test_feature_basis.py`` (under the tests' fixtures:
the datasheet catalog, no calibration of this machine). The ``cpu`` keys featurize a pinned CPU (``PINNED_CPU``), so
the test gives the same digests on any host; they were re-written from the code of 8eb91d8, whose GPU digests
still matched 3766a80's.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.hardware.device_types import Device, frozen_mapping
from perfpredict.hardware.devices import get_device
from perfpredict.predictors import features as F
from perfpredict.predictors import gpu_op_features as gf
from perfpredict.predictors import op_efficiency as oe
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.cost_arrays import CostArrays

EXPECTED = Path(__file__).with_name("feature_basis.json")
# The CPU is pinned: the catalog's "cpu" is whatever this host's /proc says, and a feature vector that moved with the
# machine running the test would say nothing about the code. These are the development VM's detected figures (AMD
# EPYC, 2 vCPUs at 2.445 GHz, AVX2+FMA: 2 x 2.445e9 x 32 FP32 FLOP/s; bf16 emulated at 0.15 of that; 2 channels x
# 20 GB/s); the memory size is a round 24 GiB.
PINNED_CPU = Device(
    name="cpu",
    kind="cpu",
    vendor="amd",
    arch="x86_64",
    memory_bytes=24 * 2**30,
    memory_bandwidth_bytes_per_s=40e9,
    peak_flops_per_s=frozen_mapping({"fp32": 156.48e9, "fp64": 78.24e9, "bf16": 0.15 * 156.48e9}),
    tdp_w=20.0,
    idle_power_w=6.0,
    launch_overhead_s=5e-6,
    runtime_overhead_bytes=0,
    sm_count=2,
    boost_clock_mhz=2445.0,
    l2_bytes=32 * 2**20,
    source="estimate",
)
DTYPES = ("float32", "bfloat16", "int64")
CONFIGS = {
    "default": RunConfig(),
    "tf32": RunConfig(tf32=True),
    "no_conv_tf32": RunConfig(conv_tf32=False),
    "as_measured": RunConfig(tf32=False, conv_tf32=False),
}


def _t(shape: tuple[int, ...], dtype: str) -> TensorMeta:
    return TensorMeta(shape, dtype)


def _nodes() -> list[OpNode]:
    nodes = []
    for d in DTYPES:
        w = 4 if d == "float32" else (2 if d == "bfloat16" else 8)
        x, y = _t((4096, 1024), d), _t((2, 8, 128, 64), d)
        nodes += [
            OpNode(f"mm_{d}", "matmul", "mm", (_t((256, 512), d), _t((512, 1024), d)), (_t((256, 1024), d),),
                   flops=2 * 256 * 512 * 1024, bytes_read=w * (256 * 512 + 512 * 1024), bytes_written=w * 256 * 1024),
            OpNode(f"conv_{d}", "conv", "conv2d", (_t((8, 64, 56, 56), d), _t((64, 64, 3, 3), d)),
                   (_t((8, 64, 56, 56), d),), flops=2 * 8 * 56 * 56 * 9 * 64 * 64,
                   bytes_read=w * (8 * 64 * 56 * 56 + 64 * 64 * 9), bytes_written=w * 8 * 64 * 56 * 56),
            OpNode(f"attn_{d}", "attention", "sdpa", (y, y, y), (y,), flops=4 * 2 * 8 * 128 * 128 * 64,
                   bytes_read=3 * w * y.numel, bytes_written=w * y.numel),
            OpNode(f"add_{d}", "elementwise", "add", (x, x), (x,), flops=x.numel, bytes_read=2 * w * x.numel,
                   bytes_written=w * x.numel),
            OpNode(f"emb_{d}", "embedding", "embedding", (_t((50000, 768), d), _t((8, 128), "int64")),
                   (_t((8, 128, 768), d),), bytes_read=w * 8 * 128 * 768 + 8 * 8 * 128,
                   bytes_written=w * 8 * 128 * 768),
            OpNode(f"view_{d}", "view", "view", (x,), (x,)),
            OpNode(f"unknown_{d}", "unknown", "weird", (_t((64,), d),), (_t((64,), d),), bytes_read=64 * w,
                   bytes_written=64 * w),
        ]  # fmt: skip
    return nodes


def vectors() -> dict[str, list]:
    """Every learned feature vector of the fixed ops and graph, by name."""
    nodes = _nodes()
    graph = OpGraph(nodes=tuple(nodes), edges=tuple((i, i + 1) for i in range(len(nodes) - 1)), batch_size=8)
    arrays = CostArrays.from_graph(graph)
    out: dict[str, list] = {}
    for name in ("H100-SXM", "T4", "cpu"):
        device = PINNED_CPU if name == "cpu" else get_device(name)
        basis = gf.datasheet_basis(device)
        for node in nodes:
            shape = oe.node_shape(node)
            out[f"op_efficiency|{name}|{node.name}"] = oe.features(shape, device)
            out[f"op_efficiency.bound|{name}|{node.name}"] = [
                *oe.bound_s(shape, device),
                *oe.bound_s(shape, device, True),
            ]
            if device.kind == "gpu":
                for label, config in CONFIGS.items():
                    unit = gf.unit_of(shape, basis, config)
                    out[f"gpu_op_features|{name}|{label}|{node.name}"] = gf.features(shape, basis, unit)
        out[f"node_matrix|{name}"] = F.node_matrix(arrays, 8.0, device.kind).tolist()
        for label in ("default", "tf32"):
            out[f"tabular|{name}|{label}"] = F.tabular_matrix(
                arrays, device, CONFIGS[label], np.array([1.0, 32.0])
            ).tolist()
    return out


def digests() -> dict[str, str]:
    # json.dumps writes each float as its shortest exact repr, so equal digests are equal vectors to the last bit
    return {k: hashlib.sha256(json.dumps(v).encode()).hexdigest()[:16] for k, v in sorted(vectors().items())}


def test_features_are_the_ones_the_artifacts_were_trained_on():
    if os.environ.get("PERFPREDICT_WRITE_FEATURE_BASIS"):
        EXPECTED.write_text(json.dumps(digests(), indent=1) + "\n")
    expected = json.loads(EXPECTED.read_text())
    got = digests()
    assert sorted(got) == sorted(expected)
    moved = [k for k in expected if got[k] != expected[k]]
    assert not moved, f"these feature vectors moved (the shipped artifacts would need retraining): {moved}"
