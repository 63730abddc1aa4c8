"""Trained-model artifacts: files plus a manifest, shipped in the package or trained by the user.

An artifact is a folder ``<predictor>-<device-slug>/`` holding model files (XGBoost UBJ, torch safetensors,
numpy arrays as safetensors; never pickle) and ``manifest.json``: predictor, version, device, feature-schema hash,
the physics versions behind the device's features (the GPU memory model), training-data hash, targets, metrics and
each file's sha256. Loading checks the schema hash, the physics versions and the file hashes and refuses a mismatch
with an :class:`ArtifactError` that says how to retrain. Shipped artifacts live in
``perfpredict/predictors/artifacts/``; ``$PERFPREDICT_ARTIFACTS`` adds a folder of the user's own, searched first.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perfpredict.core.errors import ArtifactError, PerfPredictError
from perfpredict.settings import settings

SHIPPED_DIR = Path(__file__).parent / "artifacts"
MANIFEST = "manifest.json"


@dataclass
class Manifest:
    predictor: str
    version: str
    device: str
    feature_schema_hash: str
    data_hash: str
    targets: list[str]
    metrics: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # file name -> sha256
    rows: int = 0
    created: str = ""
    perfpredict_version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    physics: dict[str, int] = field(default_factory=dict)  # memory_model.physics_versions of the device's kind


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def device_physics(device: str) -> dict[str, int] | None:
    """The physics versions a prediction for ``device`` computes its features with today (None: a device this
    perfpredict does not know, so there is nothing to record or compare)."""
    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors.memory_model import physics_versions

    try:
        return physics_versions(get_device(device).kind)
    except PerfPredictError:
        return None


def user_dir() -> Path:
    """Where ``perfpredict adapt`` registers artifacts by default ($XDG_DATA_HOME/perfpredict/artifacts)."""
    return settings().data_dir / "artifacts"


def search_dirs() -> list[Path]:
    """$PERFPREDICT_ARTIFACTS folders, then the user folder, then the shipped artifacts: the first match wins."""
    return [*settings().artifact_dirs, user_dir(), SHIPPED_DIR]


def artifact_path(predictor: str, device: str, root: Path | None = None) -> Path:
    return (root or SHIPPED_DIR) / f"{slug(predictor)}-{slug(device)}"


def save_artifact(folder: Path, manifest: Manifest, files: Mapping[str, bytes]) -> Path:
    """Write ``files`` and the manifest (with their hashes) into ``folder``, replacing what was there."""
    from perfpredict import __version__

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.is_file():
            old.unlink()
    manifest.files = {}
    for name, data in sorted(files.items()):
        (folder / name).write_bytes(data)
        manifest.files[name] = hashlib.sha256(data).hexdigest()
    manifest.physics = device_physics(manifest.device) or {}
    manifest.created = manifest.created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    manifest.perfpredict_version = __version__
    (folder / MANIFEST).write_text(json.dumps(asdict(manifest), indent=1, sort_keys=True) + "\n")
    return folder


def read_manifest(folder: Path) -> Manifest:
    path = Path(folder) / MANIFEST
    try:
        return Manifest(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as err:
        raise ArtifactError(
            f"cannot read artifact manifest {str(path)!r} ({err}); retrain with `perfpredict train`"
        ) from err


def load_files(folder: Path, expected_schema: str) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest and file contents of an artifact, after checking the schema and every file's hash."""
    manifest = read_manifest(folder)
    if manifest.feature_schema_hash != expected_schema:
        raise ArtifactError(
            f"artifact {str(folder)!r} was trained on feature schema {manifest.feature_schema_hash!r}, but this "
            f"perfpredict computes {expected_schema!r}; retrain it with `perfpredict train --device "
            f"{manifest.extra.get('dataset', manifest.device)} --predictor {manifest.predictor}`"
        )
    _check_physics(folder, manifest)
    files = {}
    for name, digest in manifest.files.items():
        try:
            data = (Path(folder) / name).read_bytes()
        except OSError as err:
            raise ArtifactError(f"artifact file {name!r} is missing from {str(folder)!r}; retrain") from err
        if hashlib.sha256(data).hexdigest() != digest:
            raise ArtifactError(
                f"artifact file {name!r} in {str(folder)!r} does not match its manifest hash; "
                "it was changed after training: retrain"
            )
        files[name] = data
    return manifest, files


def physics_change(manifest: Manifest) -> str:
    """How the physics ``manifest`` was trained under differ from today's ("" when they match). A manifest written
    before the physics were recorded counts as version 1 of each."""
    want = device_physics(manifest.device)
    if want is None:
        return ""
    have = {name: manifest.physics.get(name, 1) for name in want}
    return ", ".join(f"{name} {have[name]} (now {v})" for name, v in want.items() if have[name] != v)


def _check_physics(folder: Path, manifest: Manifest) -> None:
    changed = physics_change(manifest)
    if changed:
        raise ArtifactError(
            f"artifact {str(folder)!r} was trained under {changed}: its features for {manifest.device!r} are "
            f"computed differently now; retrain it with `perfpredict train --device "
            f"{manifest.extra.get('dataset', manifest.device)} --predictor {manifest.predictor}`"
        )


def find_artifact(predictor: str, device: str) -> Path | None:
    """The first folder (user folders first, then shipped) holding ``predictor`` trained for ``device`` under
    today's physics; failing that the first one at all, so that loading it says what to retrain."""
    found = [artifact_path(predictor, device, root) for root in search_dirs()]
    found = [folder for folder in found if (folder / MANIFEST).exists()]
    for folder in found:
        try:
            if not physics_change(read_manifest(folder)):
                return folder
        except ArtifactError:
            continue
    return found[0] if found else None


def list_manifests() -> list[tuple[Path, Manifest]]:
    out = []
    for root in search_dirs():
        if root.is_dir():
            for folder in sorted(root.iterdir()):
                if (folder / MANIFEST).exists():
                    try:
                        out.append((folder, read_manifest(folder)))
                    except ArtifactError:
                        continue
    return out


def best_predictor(
    device: str,
    metric: str = "random_5fold.latency_ms.mape",
    usable: Callable[[str], bool] | None = None,
    current_only: bool = True,
) -> str | None:
    """The evaluated predictor with the lowest ``metric`` for ``device``; an artifact without that metric (an
    adapted one, say) counts only when nothing evaluated exists. None: no artifact for the device.
    ``usable(name)`` filters out predictors that cannot run here (a missing optional dependency); ``current_only``
    leaves out artifacts trained under other physics, which loading would refuse."""
    best: tuple[float, str] | None = None
    for _, manifest in list_manifests():
        if manifest.device != device or (usable is not None and not usable(manifest.predictor)):
            continue
        if current_only and physics_change(manifest):
            continue
        value: Any = manifest.metrics
        for part in metric.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        score = float(value) if isinstance(value, (int, float)) else float("inf")
        if best is None or score < best[0]:
            best = (score, manifest.predictor)
    return best[1] if best else None
