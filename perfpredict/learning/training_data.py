"""Measured rows -> feature matrices and targets for the learned predictors.

Rows come from the collector (``data/<device>/``): a spec key, the device, and measurements. Graphs are
re-derived from the spec on the meta device, never stored in the dataset. Tracing is the slow part (seconds per
model on this 2-core machine), so each batch sweep (a spec group: everything but the batch) is traced once, at
batch 13, and its per-op FLOPs and bytes are scaled to every other batch (:meth:`CostArrays.from_anchor`).
Traced graphs are kept in the one on-disk graph cache (``graph_store``, keyed by the spec and the capture code's
digest), so a second training run does not trace at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.caching import graph_store
from perfpredict.caching.disk_store import DiskStore
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpGraph
from perfpredict.predictors.cost_arrays import CostArrays
from perfpredict.predictors.feature_rows import TARGETS, TrainingSet
from perfpredict.predictors.features import tabular_matrix
from perfpredict.progress import Progress

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

# One capture per batch sweep, at a prime no model dimension shares (see CostArrays.from_anchor).
ANCHOR_BATCH = 13


class GraphCache:
    """Traced OpGraphs per spec key, in memory and in the on-disk graph cache (``graph_store``; ``root``: a store
    of its own, for tests). A trace that failed is remembered in memory only (a later torch may trace it), so the
    other rows of its batch sweep fail at once instead of re-tracing for seconds each."""

    def __init__(self, root: Path | None = None) -> None:
        self.store = graph_store.STORE if root is None else DiskStore("graphs", graph_store.SIZE_LIMIT_BYTES, root)
        self.memory: dict[str, OpGraph] = {}
        self.failed: dict[str, Exception] = {}

    def graph(self, spec: Any) -> OpGraph:
        key = spec.to_key()
        if key in self.memory:
            return self.memory[key]
        store_key = graph_store.key(zoo_spec=key)
        graph = graph_store.read(store_key, self.store)
        if graph is not None:
            self.memory[key] = graph
            return graph
        if key in self.failed:
            raise self.failed[key]
        try:
            graph = _trace(spec)
        except Exception as err:
            self.failed[key] = err
            raise
        graph_store.write(store_key, graph, self.store)
        self.memory[key] = graph
        return graph


def _trace(spec: Any) -> OpGraph:
    import warnings

    import torch

    from perfpredict.compiler_hooks.capture import capture_graph

    torch._dynamo.reset()  # thousands of cached graphs slow every later trace down
    model = spec.build("meta")
    x, labels = spec.inputs("meta")
    kwargs = {"labels": labels} if spec.phase == "training" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # AOT's fake-tensor backward on meta warns about loss kernels
        return capture_graph(model, (x,), kwargs or {}, phase=spec.phase, dtype=None, name=spec.family, capture="meta")


def arrays_for(spec: Any, cache: GraphCache) -> CostArrays:
    """Batch-affine cost arrays for the spec's batch sweep, from one capture at ``ANCHOR_BATCH``."""
    return CostArrays.from_anchor(cache.graph(spec.with_batch(ANCHOR_BATCH)))


LATENCY_STATS = {"median": "latency_ms", "min": "latency_min_ms"}


def targets_of(row: Mapping[str, Any], latency_stat: str = "median") -> dict[str, float]:
    """The measured targets of one row (NaN where the collector could not measure one).

    ``latency_stat="min"`` learns the fastest timed run instead of the median: on a host shared with other jobs
    the minimum is the statistic contention disturbs least (DESIGN.md's measurement protocol).
    """

    def num(key: str) -> float:
        value = row.get(key)
        return float(value) if isinstance(value, (int, float)) and value is not None and value > 0 else math.nan

    batch = max(1, int(row.get("batch_size") or 1))
    energy = num("energy_j")
    return {
        "latency_ms": num(LATENCY_STATS[latency_stat]),
        "peak_memory_bytes": num("peak_memory_bytes"),
        "energy_per_sample_j": energy / batch,
        "avg_power_w": num("avg_power_w"),
    }


def device_for_rows(rows: Sequence[Mapping[str, Any]]) -> Any:
    """The catalog device the rows were measured on (the local CPU entry for CPU rows)."""
    from perfpredict.hardware.devices import get_device

    kinds = {r.get("device_type", "cpu") for r in rows}
    if kinds == {"cpu"}:
        return get_device("cpu")
    names = {r.get("env_device_name") or r.get("device_name") or r.get("device") for r in rows}
    if len(names) != 1:
        raise InvalidInputError(f"rows from several devices {sorted(map(str, names))!r}; train one device at a time")
    return get_device(str(names.pop()))


def _library_mismatches(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Rows measured under another transformers than the one tracing their graphs here. The model code decides
    what a GPU runs: transformers 5.17 handed SDPA T5's position bias as a strided view, which CUDA's fused
    kernels refuse, so T5 ran the math path; later releases pass it contiguous (data/README.md)."""
    from perfpredict.profiling.monitor import installed_version

    local = installed_version("transformers")
    if local is None:
        return []
    other = Counter(
        r["env_transformers_version"] for r in rows if r.get("env_transformers_version") not in (None, local)
    )
    return [
        f"{n} rows were measured with transformers {v} and are traced here with {local}: where the two differ in "
        f"how a model calls its kernels, the graph is not what ran"
        for v, n in sorted(other.items())
    ]


def load_training_set(
    folders: Iterable[str | os.PathLike[str]],
    *,
    families: Sequence[str] | None = None,
    max_rows: int | None = None,
    cache: GraphCache | None = None,
    progress: bool = False,
    latency_stat: str = "median",
    device: Any = None,
    include_busy_host: bool = False,
) -> TrainingSet:
    """Read measured rows, derive their graphs (cached), and build features and targets. ``device`` (a catalog
    Device) overrides the device the rows name, e.g. for rows of a GPU the catalog knows by another name.

    Rows measured on a busy host (see ``quiet_host``) are left out unless ``include_busy_host``: their latency
    measures the other jobs as much as the model, and a few of them taught xgboost over-predictions of 10-100x."""
    from perfpredict.predictors.base import RunConfig
    from perfpredict.profiling import zoo
    from perfpredict.profiling.dataset import load_dataset, quiet_host

    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for folder in folders:
        loaded = load_dataset(folder)
        if loaded.lost:
            problems.append(f"{folder}: {loaded.summary()}")
        rows += [
            r for r in loaded.rows if r.get("status") == "ok" and (families is None or r.get("family") in families)
        ]
    busy = [r for r in rows if not quiet_host(r)]
    if busy and not include_busy_host:
        problems.append(
            f"{len(busy)} rows measured on a busy host (load average above the core count, or not "
            "recorded on a CPU) left out; include_busy_host=True keeps them"
        )
        rows = [r for r in rows if quiet_host(r)]
    rows.sort(key=lambda r: (r["key"], r["device"]))
    if max_rows is not None:
        rows = rows[:max_rows]
    if not rows and busy and not include_busy_host:
        raise InvalidInputError(
            f"all {len(busy)} measured rows in {list(map(str, folders))!r} were taken on a busy "
            "host (load average above the core count, or not recorded on a CPU); measure on a "
            "quiet host, or keep them with --include-busy-host (include_busy_host=True)"
        )
    if not rows:
        raise InvalidInputError(
            f"no measured rows with status 'ok' in {list(map(str, folders))!r}; run `perfpredict collect` first"
        )
    device = device or device_for_rows(rows)
    problems += _library_mismatches(rows)
    cache = cache or GraphCache()
    feats, arrays, kept = [], [], []
    for row in Progress("features", len(rows), enabled=progress).track(rows):
        spec = zoo.ModelSpec.from_key(row["key"])
        try:
            arr = arrays_for(spec, cache)
        except Exception as err:  # noqa: BLE001 - one untraceable spec must not stop training
            problems.append(f"{row['key'][:80]}: {type(err).__name__}: {str(err)[:120]}")
            continue
        config = RunConfig(phase=spec.phase)
        feats.append(tabular_matrix(arr, device, config, np.array([spec.batch]))[0])
        arrays.append(arr)
        kept.append(row)
    if latency_stat not in LATENCY_STATS:
        raise InvalidInputError(f"latency_stat {latency_stat!r} is not one of {', '.join(LATENCY_STATS)}")
    y = {t: np.array([targets_of(r, latency_stat)[t] for r in kept]) for t in TARGETS}
    arch_ids = {k: i for i, k in enumerate(sorted({zoo.ModelSpec.from_key(r["key"]).arch_key() for r in kept}))}
    digest = hashlib.sha256("\n".join(json.dumps([r["key"], r["device"], r.get("latency_ms")]) for r in kept).encode())
    return TrainingSet(
        X=np.asarray(feats, dtype=float),
        y=y,
        families=np.array([r["family"] for r in kept]),
        keys=[r["key"] for r in kept],
        group_ids=np.array([arch_ids[zoo.ModelSpec.from_key(r["key"]).arch_key()] for r in kept]),
        devices=[device.name],
        rows=kept,
        arrays=arrays,
        data_hash=digest.hexdigest()[:16],
        problems=problems,
    )
