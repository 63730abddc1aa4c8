"""OpGraph features of measured rows: each spec's graph summarised (nodes, edges, FLOPs, bytes, parameters).

The collector fills them per row (``graph_features="inline"``: traced exactly at batches 1, 2 and 4, affine in
the batch beyond, which is exact for per-op FLOPs and bytes) or later for a whole folder (:func:`fill_graph_features`,
``graph_features="deferred"``), into ``graph_features.jsonl``. Graphs themselves are never stored: the spec key
re-derives them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from perfpredict.profiling import dataset as ds
from perfpredict.profiling import zoo
from perfpredict.progress import Progress

GRAPH_COLUMNS = (
    "graph_nodes",
    "graph_edges",
    "graph_flops",
    "graph_bytes",
    "graph_param_count",
    "graph_param_bytes",
    "graph_input_bytes",
    "graph_coverage",
    "graph_subgraphs",
)


def spec_graph(spec: zoo.ModelSpec) -> Any:
    import torch

    from perfpredict.compiler_hooks.capture import capture_graph

    torch._dynamo.reset()  # thousands of cached graphs slow every later trace down
    model = spec.build("meta")
    x, labels = spec.inputs("meta")
    kwargs = {"labels": labels} if spec.phase == "training" else None
    return capture_graph(model, (x,), kwargs or {}, phase=spec.phase, dtype=None, name=spec.family, capture="meta")


def graph_summary(graph: Any) -> dict[str, Any]:
    return {
        "graph_nodes": len(graph.nodes),
        "graph_edges": len(graph.edges),
        "graph_flops": int(graph.total_flops),
        "graph_bytes": int(graph.total_bytes),
        "graph_param_count": int(graph.param_count),
        "graph_param_bytes": int(graph.param_bytes),
        "graph_input_bytes": int(graph.input_bytes),
        "graph_coverage": float(graph.coverage),
        "graph_subgraphs": int(graph.subgraphs),
    }


class GraphFeatureCache:
    """OpGraph summaries per spec: traced exactly at batches 1, 2 and 4; affine in the batch from 2 and 4 beyond.

    Batch 1 is traced on its own because dynamo specialises size-1 dimensions. Per-op FLOPs and bytes are affine
    in the batch (``perfpredict.predict_many`` relies on the same fact), and node and edge counts do not change.
    """

    EXACT = (1, 2, 4)

    def __init__(self) -> None:
        self._exact: dict[str, dict[int, dict[str, Any]]] = {}

    def features(self, spec: zoo.ModelSpec) -> dict[str, Any]:
        group = self._exact.setdefault(spec.group_key(), {})
        if spec.batch in group:
            return {**group[spec.batch], "graph_features_method": "exact"}
        anchors = sorted(b for b in group if b >= 2)
        if spec.batch not in self.EXACT and len(anchors) >= 2:
            b1, b2 = anchors[-2], anchors[-1]
            f1, f2 = group[b1], group[b2]
            if f1["graph_nodes"] == f2["graph_nodes"]:
                out = dict(f2)
                for k in ("graph_flops", "graph_bytes", "graph_input_bytes"):
                    slope = (f2[k] - f1[k]) / (b2 - b1)
                    out[k] = int(round(f2[k] + slope * (spec.batch - b2)))
                return {**out, "graph_features_method": f"affine_batch_{b1}_{b2}"}
        try:
            feats = graph_summary(spec_graph(spec))
        except Exception as err:  # noqa: BLE001 - a failed trace is recorded, never fatal to the row
            return {"graph_features_method": f"failed: {type(err).__name__}: {str(err)[:160]}"}
        group[spec.batch] = feats
        if len(self._exact) > 256:
            self._exact.pop(next(iter(self._exact)))
        return {**feats, "graph_features_method": "exact"}


def fill_graph_features(folder: str | Path, *, budget_minutes: float | None = None, progress: bool = True) -> int:
    """Trace every measured spec of a dataset folder into ``graph_features.jsonl`` (resumable); returns rows added.

    Graph features depend on the spec only, not the device, so one file serves every device's rows.
    """
    folder = Path(folder)
    loaded = ds.load_dataset(folder, join_features=False)
    have, _, _ = ds.read_jsonl(folder / ds.FEATURES_JSONL, required=("key",))
    done = {f["key"] for f in have}
    keys = sorted(
        {r["key"] for r in loaded.rows if r["key"] not in done},
        key=lambda k: (zoo.ModelSpec.from_key(k).group_key(), zoo.ModelSpec.from_key(k).batch),
    )
    cache = GraphFeatureCache()
    t0 = time.monotonic()
    added = 0
    budget_s = None if budget_minutes is None else 60.0 * budget_minutes
    with (
        Progress("graph features", len(keys), enabled=progress, budget_s=budget_s) as bar,
        ds.JsonlAppender(folder / ds.FEATURES_JSONL) as out,
    ):
        for key in keys:
            if budget_s is not None and time.monotonic() - t0 > budget_s:
                break
            out.append({"key": key, **cache.features(zoo.ModelSpec.from_key(key))})
            added += 1
            bar.advance()
    return added
