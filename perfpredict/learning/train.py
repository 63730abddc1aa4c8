"""``perfpredict train``: fit a learned predictor on a measured dataset and write its artifact.

Deterministic: rows are sorted, folds and models are seeded, so the same dataset gives the same artifact. The
manifest carries the random 5-fold metrics, which ``predictor="auto"`` uses to pick the best predictor per device.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError, close_matches
from perfpredict.learning.training_data import load_training_set
from perfpredict.predictors.artifacts import Manifest, artifact_path, save_artifact
from perfpredict.predictors.feature_rows import TARGETS
from perfpredict.progress import shown_in_fits

LEARNERS = {
    "xgboost": ("perfpredict.learning.xgboost_learner", "XGBoostLearner"),
    "xgboost_static": ("perfpredict.learning.xgboost_learner", "XGBoostStaticLearner"),
    "graphsage": ("perfpredict.learning.graphsage_learner", "GraphSAGELearner"),
    "gae_gnn": ("perfpredict.learning.gae_learner", "GAEGNNLearner"),
    "gnn_llm": ("perfpredict.learning.gnn_llm_learner", "GNNLLMLearner"),
}


def learner_class(name: str) -> Any:
    if name not in LEARNERS:
        close = close_matches(name, LEARNERS)
        raise InvalidInputError(
            f"no trainable predictor {name!r}{f' (did you mean {close}?)' if close else ''}; "
            f"choose one of {', '.join(LEARNERS)}"
        )
    module, cls = LEARNERS[name]
    return getattr(importlib.import_module(module), cls)


def dataset_folder(device: str, data_root: Path = Path("data")) -> Path:
    """``data/<slug>`` for a device slug, or the path itself when it is a dataset folder."""
    path = Path(device)
    if path.is_dir():
        return path
    candidate = data_root / device
    if candidate.is_dir():
        return candidate
    found = sorted(p.name for p in data_root.iterdir() if p.is_dir()) if data_root.is_dir() else []
    raise InvalidInputError(
        f"no dataset folder for {device!r} under {str(data_root)!r}; found: "
        f"{', '.join(found) or 'none'}; collect one with `perfpredict collect`"
    )


def train(
    device: str,
    predictor: str,
    *,
    out_root: Path | None = None,
    seed: int = 0,
    max_rows: int | None = None,
    evaluate: bool = True,
    data_root: Path = Path("data"),
    progress: bool = False,
    latency_stat: str = "median",
    hyper: dict[str, Any] | None = None,
    include_busy_host: bool = False,
) -> Path:
    """Train ``predictor`` on the dataset of ``device`` and write the artifact; returns its folder. ``hyper``
    overrides the learner's defaults (e.g. ``{"base_lm": PATH}`` for gnn_llm)."""
    from functools import partial

    from perfpredict.learning.evaluation import cross_validate, random_folds, report

    cls = partial(learner_class(predictor), **(hyper or {}))
    folder = dataset_folder(device, data_root)
    data = load_training_set(
        [folder], max_rows=max_rows, progress=progress, latency_stat=latency_stat, include_busy_host=include_busy_host
    )
    metrics: dict[str, Any] = {}
    learner = cls()
    with shown_in_fits(progress):
        if evaluate:
            oof = cross_validate(cls, data, TARGETS, random_folds(data, 5, seed), seed)
            metrics["random_5fold"] = {t: v["overall"] for t, v in report(data, oof, TARGETS).items()}
        t0 = time.monotonic()
        learner.fit(data, TARGETS, seed)
        fit_seconds = time.monotonic() - t0
    manifest = Manifest(
        predictor=learner.name,
        version=learner.version,
        device=data.devices[0],
        feature_schema_hash=learner.schema,
        data_hash=data.data_hash,
        targets=list(learner.targets),
        metrics=metrics,
        rows=len(data.keys),
        extra={
            "dataset": folder.name,
            "seed": seed,
            "latency_stat": latency_stat,
            "hyper": hyper or {},
            "include_busy_host": include_busy_host,
            "fit_seconds": round(fit_seconds, 1),
            "host_threads": _threads(),
            "families": sorted(set(data.families.tolist())),
            "problems": data.problems[:20],
            **_host(data),
        },
    )
    return save_artifact(artifact_path(learner.name, data.devices[0], out_root), manifest, learner.to_files())


def _threads() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _host(data: Any) -> dict[str, Any]:
    """The CPU model of CPU rows, so a CPU artifact can tell when it runs on another machine."""
    models = {r.get("env_cpu_model") or r.get("cpu_model") for r in data.rows} - {None}
    return {"cpu_model": sorted(models)[0]} if len(models) == 1 and data.rows[0].get("device_type") == "cpu" else {}
