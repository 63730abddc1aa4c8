"""Prediction speed of every learned predictor on a BERT-base graph: featurize-plus-predict and predict-only.

    python benchmarks/speed_learned.py [--device cpu] [--out benchmarks/results/speed_learned.md]

The BERT-base graph (token ids 8 x 128, built on the meta device) is traced once; that trace is the compile-time
cost perfpredict's backend pays anyway and is reported on its own line. Then, for each predictor whose artifact
exists for ``--device`` (shipped or in $PERFPREDICT_ARTIFACTS):

- featurize + predict: OpGraph -> features (cost arrays, tabular row, node matrix) -> prediction for one
  configuration, median of 20 calls on a warm predictor (the artifact loaded once, as a compile session does);
- predict-only: 1,000 configurations (batch 1..1,000 of the same graph) as one feature batch, median of 3,
  reported as configurations per second.

The research reports trees about 268x faster than a GNN; the last column gives our ratio against xgboost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import perfpredict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header

ORDER = ("xgboost", "xgboost_static", "graphsage", "gae_gnn", "gnn_llm")


def bert_graph():
    from transformers import BertConfig, BertModel

    with torch.device("meta"):
        model = BertModel(BertConfig()).eval()
    ids = torch.randint(0, 1000, (8, 128), device="meta")
    t = time.perf_counter()
    graph = perfpredict.featurize(model, (ids,), name="bert")
    return graph, time.perf_counter() - t


def many_rows(graph, device, n: int):
    """The graph at batch 1..n as one TrainingSet (one row per configuration)."""
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.cost_arrays import CostArrays
    from perfpredict.predictors.feature_rows import TARGETS, TrainingSet
    from perfpredict.predictors.features import tabular_matrix

    arrays = CostArrays.from_graph(graph)
    batches = np.arange(1, n + 1, dtype=float)
    X = tabular_matrix(arrays, device, RunConfig(), batches)
    rows = [{"batch_size": int(b), "family": "bert", "key": f"bert|{int(b)}"} for b in batches]
    return TrainingSet(
        X=X,
        y={t: np.full(n, np.nan) for t in TARGETS},
        families=np.array(["bert"] * n),
        keys=[r["key"] for r in rows],
        group_ids=np.zeros(n, dtype=int),
        devices=[device.name],
        rows=rows,
        arrays=[arrays] * n,
    )


def measure(name: str, graph, device) -> dict | None:
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.feature_rows import single_row_set
    from perfpredict.predictors.registry import get_predictor

    try:
        predictor = get_predictor(name)
        learner = predictor.learner_for(device)
    except Exception as err:  # noqa: BLE001 - a predictor without an artifact is reported, not fatal
        print(f"skip {name}: {err}", file=sys.stderr)
        return None
    config = RunConfig()
    learner.predict(single_row_set(graph, device, config))  # warm: lazy imports, first-call allocations
    singles = []
    for _ in range(20):
        t = time.perf_counter()
        learner.predict(single_row_set(graph, device, config))
        singles.append(time.perf_counter() - t)
    batch = many_rows(graph, device, 1000)
    sweeps = []
    for _ in range(3):
        t = time.perf_counter()
        learner.predict(batch)
        sweeps.append(time.perf_counter() - t)
    return {"single_ms": statistics.median(singles) * 1e3, "rate": 1000 / statistics.median(sweeps)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="a device with learned artifacts (default: the local cpu)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "speed_learned.md"))
    args = ap.parse_args()
    device = perfpredict.get_device(args.device)
    graph, trace_s = bert_graph()
    results = {n: r for n in ORDER if (r := measure(n, graph, device)) is not None}
    base = results.get("xgboost", {}).get("rate")
    lines = [
        "# perfpredict speed: learned predictors",
        "",
        f"- {header(__file__)}",
        f"- model: BERT-base (`BertModel(BertConfig())` on meta, ids 8 x 128), {len(graph.nodes)} ops; tracing "
        f"it through dynamo (done once per compile, by every predictor alike): {trace_s:.1f} s",
        "",
        "| predictor | featurize + predict, 1 config (median of 20) | predict-only, 1,000 configs | "
        "xgboost's rate / this |",
        "|---|---:|---:|---:|",
    ]
    for name, r in results.items():
        ratio = f"{base / r['rate']:.0f}x" if base else "-"
        lines.append(f"| {name} | {r['single_ms']:.1f} ms | {r['rate']:,.0f} configs/s | {ratio} |")
    lines += ["", "Targets (issue 5): xgboost featurize + predict under 50 ms; predict-only over 10,000 configs/s."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
