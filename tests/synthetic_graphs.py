"""A small traced set for the GNN learners' tests: real graphs, SYNTHETIC targets.

The graphs are real (tiny MLPs and conv nets traced with perfpredict.featurize); the targets are a fixed,
deterministic function of the analytical prediction, so tests check that learning happens and that the machinery
(artifacts, intervals, OOD, adaptation) works. They are no statement about accuracy on measured data.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

BATCHES = (1, 2, 4, 8, 16)


def mlp(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def _cnn(channels: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, channels, 3, padding=1), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))


def _specs() -> list[tuple[str, nn.Module, tuple[int, ...]]]:
    specs = [(f"mlp{w}x{d}", mlp(w, d), (w,)) for w in (16, 64, 256) for d in (1, 3)]
    specs += [(f"cnn{c}x{d}", _cnn(c, d), (3, 16, 16)) for c in (8, 32) for d in (1, 3)]
    return specs


def synthetic_targets(ts) -> None:
    """LEARNING CHECK ONLY, not measured data: targets derived from the analytical prediction."""
    lat = ts.analytical("latency_ms")
    mem = ts.analytical("peak_memory_bytes")
    ts.y["latency_ms"] = 4.0 * lat**0.85  # a sub-linear, scaled version of the roofline
    ts.y["peak_memory_bytes"] = 1.3 * mem + 2e5  # a runtime overhead on top of the memory model


def traced_set():
    """(TrainingSet, device): every spec at every batch in BATCHES, on the local CPU entry."""
    import perfpredict
    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.cost_arrays import CostArrays
    from perfpredict.predictors.feature_rows import TARGETS, TrainingSet
    from perfpredict.predictors.features import tabular_matrix

    torch.manual_seed(0)
    device = get_device("cpu")
    X, rows, arrays, families, groups = [], [], [], [], []
    for gid, (name, model, shape) in enumerate(_specs()):
        a, b = (perfpredict.featurize(model, (torch.randn(n, *shape),), name=name) for n in (2, 4))
        arr = CostArrays.fit(a, b)
        X.append(tabular_matrix(arr, device, RunConfig(), np.array(BATCHES, dtype=float)))
        for batch in BATCHES:
            rows.append({"batch_size": batch, "family": name[:3], "key": f"{name}|{batch}"})
            arrays.append(arr)
            families.append(name[:3])
            groups.append(gid)
    n = len(rows)
    ts = TrainingSet(
        X=np.concatenate(X),
        y={t: np.full(n, np.nan) for t in TARGETS},
        families=np.array(families),
        keys=[r["key"] for r in rows],
        group_ids=np.array(groups),
        devices=[device.name],
        rows=rows,
        arrays=arrays,
        data_hash="synthetic",
    )
    synthetic_targets(ts)
    return ts, device
