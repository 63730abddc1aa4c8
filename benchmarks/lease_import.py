"""File what a GPU lease brought back under ``data/v3/<gpu-slug>/``, the way data/README.md describes datasets.

    python benchmarks/gpu_lease.py import <files_at>      # the device tool's files_at folder, or a lease.tgz

From ``lease.tgz`` (:mod:`benchmarks.lease_runner`):

- the rows (``rows.jsonl`` of the model rows, ``ops/`` and ``generation/``) are appended to the device's folder,
  each row once: a row whose (key, device) the folder already holds is left out, so importing the same lease twice,
  or a second run that repeats the first run's rows, adds nothing;
- ``rounds.jsonl`` and ``attempts.jsonl`` lines are appended as a multiset: a line the folder already holds as often
  is left out, a repeated attempt (a crash retried) is kept; the rounds then go into ``rounds.jsonl.gz``
  (:mod:`perfpredict.profiling.log_archive`: they are most of a device's bytes, and the device tool carries 64 MiB);
- ``collector.json`` (the model collector's last settings) replaces the folder's;
- the run's manifest (``run.json``: the command, every stage's command, status and times), its log, the environment
  snapshots and the stages' plan headers go to ``leases/<lease-id>/``, with ``import.json`` (when, from where, and
  this repository's commit at the import: the device tool sends no ``.git``, so the lease may not know its own);
- the model and op folders are compacted into ``rows.parquet`` (``perfpredict[data]``).
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.provenance import git_commit
from perfpredict.core.errors import InvalidInputError
from perfpredict.profiling import log_archive

ROW_FILES = ("rows.jsonl", "ops/rows.jsonl", "generation/rows.jsonl")
LOG_FILES = ("rounds.jsonl", "attempts.jsonl", "ops/rounds.jsonl", "ops/attempts.jsonl")
REPLACED = ("collector.json",)
LEASES = "leases"


@dataclass
class ImportSummary:
    slug: str
    lease_id: str
    dest: Path
    added: dict[str, int] = field(default_factory=dict)  # file -> lines appended
    kept_aside: list[str] = field(default_factory=list)  # files filed under leases/<id>/
    compacted: dict[str, int] = field(default_factory=dict)  # folder -> rows in rows.parquet

    def text(self) -> str:
        lines = [f"lease {self.lease_id} ({self.slug}) filed into {self.dest}"]
        lines += [f"  {name}: +{n} lines" for name, n in self.added.items()]
        lines += [f"  {name}/rows.parquet: {n} rows in all" for name, n in self.compacted.items()]
        lines.append(f"  {LEASES}/{self.lease_id}/: {', '.join(self.kept_aside)}")
        lines.append(f"commit with: git add {self.dest} && git commit -m 'GPU lease {self.lease_id} ({self.slug})'")
        return "\n".join(lines)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _pack_path(source: Path) -> Path:
    path = source / "lease.tgz" if source.is_dir() else source
    if not path.is_file():
        raise InvalidInputError(
            f"no lease.tgz at {str(source)!r}: pass the files_at folder the device tool returned, or the lease.tgz"
        )
    return path


def _extract(pack: Path, into: Path) -> Path:
    with tarfile.open(pack, "r:gz") as tar:
        bad = [m.name for m in tar.getmembers() if m.name.startswith(("/", "..")) or ".." in Path(m.name).parts]
        if bad:
            raise InvalidInputError(f"{str(pack)!r} holds paths outside its folder ({bad[0]!r}); not a lease pack")
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+/3.11.4+: refuse links and devices too
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)
    lease = into / "lease"
    if not (lease / "run.json").is_file():
        raise InvalidInputError(f"{str(pack)!r} has no lease/run.json: not a pack written by gpu_lease.py run")
    return lease


def _records(path: Path) -> list[dict[str, Any]]:
    """The log's records: its archive (``rounds.jsonl.gz``) and its live lines."""
    from perfpredict.profiling import dataset as ds

    return ds.read_jsonl(path, required=())[0]


def _canonical(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _append(path: Path, records: list[dict[str, Any]]) -> None:
    from perfpredict.profiling import dataset as ds

    path.parent.mkdir(parents=True, exist_ok=True)
    ds.repair_tail(path)
    with open(path, "a", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, separators=(",", ":"), allow_nan=True) + "\n")


def _existing_row_ids(dest: Path, rel: str) -> set[tuple[str, str]]:
    from perfpredict.profiling import dataset as ds

    folder = (dest / rel).parent
    if rel.startswith("generation/"):
        return {ds.row_id(r) for r in _records(dest / rel)}
    if not folder.is_dir():
        return set()
    return {ds.row_id(r) for r in ds.load_dataset(folder, join_features=False).rows}


def merge_rows(src: Path, dest: Path, rel: str) -> int:
    """Append the rows of ``src/rel`` whose (key, device) ``dest`` does not hold yet; returns how many."""
    from perfpredict.profiling import dataset as ds

    have = _existing_row_ids(dest, rel)
    new = []
    for rec in _records(src / rel):
        rid = ds.row_id(rec)
        if rid not in have:
            have.add(rid)
            new.append(rec)
    if new:
        _append(dest / rel, new)
    return len(new)


def merge_log(src: Path, dest: Path, rel: str) -> int:
    """Append the lines of ``src/rel`` beyond those ``dest/rel`` already holds (as a multiset); returns how many."""
    have = Counter(_canonical(r) for r in _records(dest / rel))
    new = []
    for rec in _records(src / rel):
        line = _canonical(rec)
        if have[line] > 0:
            have[line] -= 1
        else:
            new.append(rec)
    if new:
        _append(dest / rel, new)
    return len(new)


def import_lease(source: Path, data_root: Path, compact: bool = True) -> ImportSummary:
    """File the lease pack at ``source`` (a files_at folder or a lease.tgz) under ``data_root/v3/<slug>/``."""
    pack = _pack_path(source)
    with tempfile.TemporaryDirectory(prefix="lease-import-") as tmp:
        lease = _extract(pack, Path(tmp))
        manifest = json.loads((lease / "run.json").read_text())
        slug, lease_id = manifest.get("slug"), manifest.get("lease_id", "unknown")
        if not slug:
            raise InvalidInputError(
                f"lease {lease_id} found no device (run.json has no slug), so it measured nothing; see its lease.log"
            )
        dest = data_root / "v3" / slug
        src = lease / "data" / "v3" / slug
        summary = ImportSummary(slug, lease_id, dest)
        for rel in ROW_FILES:
            if (src / rel).is_file():
                summary.added[rel] = merge_rows(src, dest, rel)
        for rel in LOG_FILES:
            if log_archive.exists(src / rel):
                summary.added[rel] = merge_log(src, dest, rel)
            if Path(rel).name in log_archive.ARCHIVED:
                log_archive.archive(dest / rel)  # the repository keeps the rounds gzipped
        for rel in REPLACED:
            if (src / rel).is_file():
                shutil.copyfile(src / rel, dest / rel)
        aside = dest / LEASES / lease_id
        aside.mkdir(parents=True, exist_ok=True)
        for path in sorted(lease.rglob("*")):
            rel = path.relative_to(lease)
            if path.is_file() and rel.parts[0] != "data":
                (aside / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, aside / rel)
                summary.kept_aside.append(str(rel))
        for plan in sorted(src.rglob("plan.json")) if src.is_dir() else []:
            name = f"{plan.parent.relative_to(src)}-plan.json".replace("/", "-").lstrip(".-")
            shutil.copyfile(plan, aside / name)
            summary.kept_aside.append(name)
        imported = {"imported_at": _now(), "from": str(pack), "repo_commit_at_import": git_commit(data_root)}
        (aside / "import.json").write_text(json.dumps(imported, indent=1) + "\n")
        summary.kept_aside.append("import.json")
    if compact:
        summary.compacted = _compact(dest, summary.added)
    return summary


def _compact(dest: Path, added: dict[str, int]) -> dict[str, int]:
    """Fold the model and op folders that gained rows into their ``rows.parquet``."""
    from perfpredict.profiling import dataset as ds

    out = {}
    for rel, name in (("rows.jsonl", "."), ("ops/rows.jsonl", "ops")):
        if added.get(rel):
            out[name] = ds.compact(dest / name)
    return out
