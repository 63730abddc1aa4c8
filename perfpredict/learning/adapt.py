"""Few-shot adaptation: fine-tune a trained GNN predictor (``gnn_llm`` by default) on a handful of rows measured
on a new device, and register the result as that device's artifact.

The shots are drawn deterministically (seeded), round-robin over families so 32 rows span the architectures
present. Every row not drawn is held out: the result reports the MAPE on those rows before adapting (the source
artifact used zero-shot, with the new device's features and prompt) and after, so the user sees what adaptation
bought. The adapted artifact's manifest records where it came from, the shot keys and those figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.core.errors import ArtifactError, InvalidInputError
from perfpredict.predictors.artifacts import (
    Manifest,
    artifact_path,
    list_manifests,
    load_files,
    physics_change,
    save_artifact,
    user_dir,
)
from perfpredict.predictors.feature_rows import TrainingSet
from perfpredict.progress import shown_in_fits

ADAPTABLE = ("gnn_llm", "graphsage", "gae_gnn")


@dataclass
class AdaptResult:
    folder: Path | None
    shots: int
    held_out: int
    before: dict[str, float] = field(default_factory=dict)  # target -> MAPE % on the held-out rows, zero-shot
    after: dict[str, float] = field(default_factory=dict)  # the same after adapting
    info: dict[str, Any] = field(default_factory=dict)


def pick_shots(data: TrainingSet, shots: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices of ``shots`` rows, round-robin over families in a seeded order, and of the rest."""
    if shots < 1:
        raise InvalidInputError(f"--shots must be at least 1 (got {shots})")
    if shots >= len(data.keys):
        raise InvalidInputError(
            f"{len(data.keys)} rows cannot give {shots} shots and leave rows to check "
            "the adaptation on; measure more rows or ask for fewer shots"
        )
    rng = np.random.default_rng(seed)
    by_family: dict[str, list[int]] = {}
    for i in rng.permutation(len(data.keys)):
        by_family.setdefault(str(data.families[i]), []).append(int(i))
    order = [f for f in rng.permutation(sorted(by_family))]
    picked: list[int] = []
    while len(picked) < shots:
        for f in order:
            if by_family[f] and len(picked) < shots:
                picked.append(by_family[f].pop())
    chosen = np.sort(np.array(picked))
    return chosen, np.setdiff1d(np.arange(len(data.keys)), chosen)


def source_learner(predictor: str, from_device: str | None, kind: str) -> tuple[Any, Manifest]:
    """The learner to start from: the artifact for ``from_device``, else the first one of a device of ``kind``."""
    from perfpredict.hardware.devices import get_device
    from perfpredict.learning.train import learner_class

    if predictor not in ADAPTABLE:
        raise InvalidInputError(f"only {', '.join(ADAPTABLE)} can adapt from a few rows (got {predictor!r})")
    cls = learner_class(predictor)
    found = [
        (f, m)
        for f, m in list_manifests()
        if m.predictor == predictor and (from_device is None or m.device == from_device)
    ]
    if from_device is None:
        found.sort(key=lambda fm: get_device(fm[1].device).kind != kind)  # same kind (gpu/cpu) first
    found.sort(key=lambda fm: bool(physics_change(fm[1])))  # current physics first: loading refuses the rest
    if not found:
        raise ArtifactError(
            f"no {predictor!r} artifact{f' for {from_device!r}' if from_device else ''} to adapt "
            f"from; train one first: perfpredict train --device <dataset> --predictor {predictor}"
        )
    folder, manifest = found[0]
    _, files = load_files(folder, cls.schema)
    return cls.from_files(manifest, files), manifest


def heldout_mape(learner: Any, data: TrainingSet) -> dict[str, float]:
    from perfpredict.learning.evaluation import metrics

    pred = learner.predict(data)
    out = {}
    for t in learner.targets:
        y = data.y[t]
        if np.isfinite(y).sum():
            out[t] = float(metrics(y, pred[t].value)["mape"])
    return out


def adapt(
    device: str,
    data_path: str | Path,
    *,
    predictor: str = "gnn_llm",
    shots: int = 32,
    seed: int = 0,
    steps: int = 100,
    lr_scale: float = 3.0,
    from_device: str | None = None,
    out_root: Path | None = None,
    latency_stat: str = "median",
    save: bool = True,
    progress: bool = False,
    include_busy_host: bool = False,
) -> AdaptResult:
    """Fine-tune ``predictor`` on ``shots`` rows of ``data_path`` measured on ``device``; write its artifact."""
    from perfpredict.hardware.devices import get_device
    from perfpredict.learning.training_data import load_training_set

    target = get_device(device)
    data = load_training_set(
        [data_path], latency_stat=latency_stat, device=target, progress=progress, include_busy_host=include_busy_host
    )
    learner, source = source_learner(predictor, from_device, target.kind)
    shot_idx, rest_idx = pick_shots(data, shots, seed)
    rest = data.subset(rest_idx)
    before = heldout_mape(learner, rest)
    with shown_in_fits(progress):
        info = learner.fine_tune(data.subset(shot_idx), steps=steps, lr_scale=lr_scale, seed=seed)
    after = heldout_mape(learner, rest)
    folder = None
    if save:
        manifest = Manifest(
            predictor=learner.name,
            version=learner.version,
            device=target.name,
            feature_schema_hash=learner.schema,
            data_hash=data.data_hash,
            targets=list(learner.targets),
            rows=len(shot_idx),
            metrics={
                "adaptation_heldout": {t: {"mape_before": before.get(t), "mape_after": v} for t, v in after.items()}
            },
            extra={
                "adapted_from": {"device": source.device, "data_hash": source.data_hash, "rows": source.rows},
                "shots": int(len(shot_idx)),
                "seed": seed,
                "steps": steps,
                "lr_scale": lr_scale,
                "shot_keys": [data.keys[i] for i in shot_idx],
                "held_out_rows": int(len(rest_idx)),
            },
        )
        folder = save_artifact(
            artifact_path(learner.name, target.name, out_root or user_dir()), manifest, learner.to_files()
        )
    return AdaptResult(folder, int(len(shot_idx)), int(len(rest_idx)), before, after, info)
