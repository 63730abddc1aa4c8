"""Dataset files: an append-only JSONL log, compacted into Parquet, read back with damage reported, never fatal.

One folder per device (``data/<device-slug>/``) holds:

- ``rows.jsonl``: the live log. The collector appends one JSON object per line, then flushes and fsyncs, so a
  ``kill -9`` loses at most the row in flight. A torn last line (no newline) is cut off before the next append.
- ``rows.parquet``: the compacted rows (row groups of ``ROW_GROUP_ROWS``), written by :func:`compact` to a temporary
  file, fsynced, and renamed over the old one; only then is ``rows.jsonl`` emptied. A crash between the two leaves a
  row in both files, and :func:`load_dataset` keeps one (rows are unique by ``(key, device)``).
- ``attempts.jsonl``: one line per config started; a config that was started twice without a row (it crashed the
  process twice) gets a ``status="crashed"`` row instead of a third try.
- ``graph_features.jsonl`` (optional): OpGraph features per spec key, filled by a separate pass; joined on load.
- ``rounds.jsonl`` (protocol v3): every round of every row, appended live; compaction folds it into
  ``rounds.jsonl.gz`` (:mod:`perfpredict.profiling.log_archive`), and :func:`read_jsonl` reads both as one log.
- ``parts/shard-I-of-N/`` (optional): the logs of one shard's worker (:mod:`perfpredict.profiling.parts`), read
  with the rest; compaction folds a part's rows into ``rows.parquet`` once no worker holds it.

Parquet needs ``pyarrow`` (``pip install "perfpredict[data]"``); without it the JSONL log alone is read and written.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfpredict.core.errors import MissingDependencyError
from perfpredict.profiling import log_archive as _log_archive
from perfpredict.profiling import parts as _parts

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

DATASET_SCHEMA_VERSION = 2  # 2: protocol v3 rows (protocol_version, device_ms, eager_ms, rounds); op rows
#: rows written before protocol v3 carry no protocol_version: they were measured with protocol v2 (one synced window)
LEGACY_PROTOCOL_VERSION = 2
ROWS_JSONL = "rows.jsonl"
ROWS_PARQUET = "rows.parquet"
ATTEMPTS_JSONL = "attempts.jsonl"
FEATURES_JSONL = "graph_features.jsonl"
REQUIRED = ("schema_version", "key", "device", "status")
ROW_GROUP_ROWS = 256


@dataclass
class LoadResult:
    """Rows read from a dataset folder, with what was kept and what was lost (and why)."""

    rows: list[dict[str, Any]]
    kept: int
    lost: int
    duplicates: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.kept} rows kept, {self.lost} lost"
        if self.duplicates:
            text += f", {self.duplicates} duplicates dropped"
        return text + (": " + "; ".join(self.problems) if self.problems else "")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class JsonlAppender:
    """Append JSON lines durably: each write is flushed and fsynced before :meth:`append` returns."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired = repair_tail(self.path)
        self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open for the collector's lifetime

    def append(self, row: dict[str, Any]) -> None:
        self._f.write(json.dumps(row, separators=(",", ":"), allow_nan=True) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def repair_tail(path: Path) -> bool:
    """Cut a torn last line (a write interrupted by a crash) so the next append starts on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return False
        data = path.read_bytes()
        cut = data.rfind(b"\n") + 1
        f.truncate(cut)
        f.flush()
        os.fsync(f.fileno())
    logger.warning("cut a torn last line from %s (%d bytes)", path, len(data) - cut)
    return True


def read_jsonl(path: Path, required: Iterable[str] = REQUIRED) -> tuple[list[dict[str, Any]], int, list[str]]:
    """Rows of a JSONL file, its archive (``NAME.gz``, :mod:`perfpredict.profiling.log_archive`) first where it has
    one; ``(rows, lost, problems)``: bad lines are counted and described, never raised."""
    path = Path(path)
    held, damage = _log_archive.read_archive(path)
    rows, lost, problems = _parse_lines(held, _log_archive.archive_of(path).name, required) if held else ([], 0, [])
    if damage:
        problems.append(damage)
    if path.exists():
        with open(path, "rb") as f:
            live = _parse_lines(f.read(), path.name, required)
        rows, lost, problems = rows + live[0], lost + live[1], problems + live[2]
    return rows, lost, problems


def _parse_lines(data: bytes, name: str, required: Iterable[str]) -> tuple[list[dict[str, Any]], int, list[str]]:
    rows: list[dict[str, Any]] = []
    lost = 0
    problems: list[str] = []
    required = tuple(required)
    lines = data.split(b"\n")
    torn = lines[-1] != b""
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
            missing = [k for k in required if k not in row]
            if missing:
                raise ValueError(f"missing {missing}")
        except (ValueError, UnicodeDecodeError) as err:
            lost += 1
            where = "torn last line" if (torn and i == len(lines)) else f"line {i}"
            if len(problems) < 20:
                problems.append(f"{name} {where}: {str(err)[:80]}")
            continue
        rows.append(row)
    return rows, lost, problems


def read_jsonl_all(
    folder: Path, name: str, required: Iterable[str] = REQUIRED, part_folders: Iterable[Path] | None = None
) -> tuple[list[dict[str, Any]], int, list[str]]:
    """:func:`read_jsonl` of ``folder/name`` and then of the same file in each part folder (default: all)."""
    folders = [folder, *(_parts.part_folders(folder) if part_folders is None else part_folders)]
    rows: list[dict[str, Any]] = []
    lost = 0
    problems: list[str] = []
    for f in folders:
        r, n, p = read_jsonl(f / name, required)
        rows += r
        lost += n
        problems += [f"{f.name}/{x}" if f != folder else x for x in p]
    return rows, lost, problems


def _pyarrow():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet as pq
    except ImportError as err:
        raise MissingDependencyError('pyarrow is needed for Parquet files; pip install "perfpredict[data]"') from err
    return pq


def read_parquet(path: Path) -> tuple[list[dict[str, Any]], int, list[str]]:
    """Rows of a Parquet file, row group by row group: a damaged group loses its rows only."""
    if not path.exists():
        return [], 0, []
    try:
        pq = _pyarrow()
    except MissingDependencyError as err:
        return [], 0, [f"{path.name} not read: {err}"]
    try:
        pf = pq.ParquetFile(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises ArrowInvalid/OSError variants for damage
        return (
            [],
            0,
            [
                f"{path.name} unreadable ({type(err).__name__}: {str(err)[:80]}); its rows are lost "
                "(count unknown: the footer is damaged)"
            ],
        )
    rows: list[dict[str, Any]] = []
    lost = 0
    problems: list[str] = []
    for g in range(pf.num_row_groups):
        try:
            rows.extend(pf.read_row_group(g).to_pylist())
        except Exception as err:  # noqa: BLE001 - a damaged page: lose this group, keep the rest
            n = pf.metadata.row_group(g).num_rows
            lost += n
            problems.append(f"{path.name} row group {g} ({n} rows) unreadable: {str(err)[:80]}")
    return rows, lost, problems


def row_id(row: dict[str, Any]) -> tuple[str, str]:
    return str(row.get("key")), str(row.get("device"))


def load_dataset(
    folder: str | os.PathLike[str], *, join_features: bool = True, part_folders: Iterable[Path] | None = None
) -> LoadResult:
    """Every row of a dataset folder (Parquet, then the JSONL log, then the part folders' logs: default all), or of
    one such file, unique by (key, device), damage reported.

    ``problems`` lists what was lost and where. ``graph_features.jsonl`` is joined in by key when present.
    """
    folder = Path(folder)
    if folder.is_file():  # one rows file (e.g. `perfpredict adapt --data rows.parquet`)
        reader = read_parquet if folder.suffix == ".parquet" else read_jsonl
        rows_pq, lost_pq, probs_pq = reader(folder)
        rows_js, lost_js, probs_js = [], 0, []
        folder = folder.parent
    else:
        # the logs before the Parquet file: compaction replaces that file before it empties the logs, so a
        # compaction between the two reads shows a row twice (one is dropped), never not at all
        rows_js, lost_js, probs_js = read_jsonl_all(folder, ROWS_JSONL, part_folders=part_folders)
        rows_pq, lost_pq, probs_pq = read_parquet(folder / ROWS_PARQUET)
    seen: set[tuple[str, str]] = set()
    rows: list[dict[str, Any]] = []
    dup = 0
    for row in rows_pq + rows_js:
        if row.get("protocol_version") is None:
            row["protocol_version"] = LEGACY_PROTOCOL_VERSION
        rid = row_id(row)
        if rid in seen:
            dup += 1
            continue
        seen.add(rid)
        rows.append(row)
    problems = probs_pq + probs_js
    if join_features and (folder / FEATURES_JSONL).exists():
        feats, lost_f, probs_f = read_jsonl(folder / FEATURES_JSONL, required=("key",))
        problems += probs_f
        by_key = {f["key"]: f for f in feats}
        for row in rows:
            f = by_key.get(row["key"])
            if f is not None:
                row.update({k: v for k, v in f.items() if k != "key" and row.get(k) is None})
    result = LoadResult(rows, kept=len(rows), lost=lost_pq + lost_js, duplicates=dup, problems=problems)
    if result.lost or problems:
        logger.warning("dataset %s: %s", folder, result.summary())
    return result


def compact(folder: str | os.PathLike[str]) -> int:
    """Fold ``rows.jsonl`` and the idle parts' logs into ``rows.parquet`` (atomic replace, then empty the logs), and
    the folder's rounds log into its archive (``rounds.jsonl.gz``); returns the row count."""
    pq = _pyarrow()
    folder = Path(folder)
    with _parts.idle_parts(folder) as idle:  # a part whose worker still runs keeps its log
        _log_archive.archive_folder(folder)  # the rounds log, as rows.jsonl is folded: no worker writes it now
        result = load_dataset(folder, join_features=False, part_folders=idle)
        if not result.rows:
            return 0
        _write_parquet(pq, folder, result.rows)
        for log in [folder / ROWS_JSONL, *(f / ROWS_JSONL for f in idle)]:
            if log.exists():
                with open(log, "r+b") as f:
                    f.truncate(0)
                    os.fsync(f.fileno())
    return len(result.rows)


def _write_parquet(pq: Any, folder: Path, rows: list[dict[str, Any]]) -> None:
    """Replace ``rows.parquet`` atomically: a temporary file, fsynced, renamed over the old one."""
    import pyarrow as pa

    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    table = pa.Table.from_pylist(_uniform([{c: row.get(c) for c in columns} for row in rows]))
    tmp = folder / (ROWS_PARQUET + ".tmp")
    pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS, compression="zstd")
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, folder / ROWS_PARQUET)
    _fsync_dir(folder)


def _uniform(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Make each column one type for Arrow: a column holding ints and floats becomes float."""
    mixed = set()
    if rows:
        for c in rows[0]:
            kinds = {type(r[c]) for r in rows if r[c] is not None}
            if float in kinds and int in kinds:
                mixed.add(c)
    for r in rows:
        for c in mixed:
            if isinstance(r[c], int) and not isinstance(r[c], bool):
                r[c] = float(r[c])
    return rows


QUIET_MAX_LATENCY_CV = 0.10


def quiet_host(row: dict[str, Any]) -> bool:
    """Whether a row was measured with no more runnable work than cores (its 1-minute load average before).

    A CPU row with no recorded load is not known to be quiet: on the committed CPU dataset those are the earliest
    rows, taken while other jobs shared the host (median CV 19%, against 6% for the rest). A GPU row without one is
    accepted, since host load barely moves a GPU kernel's time and imported GPU rows often lack the field."""
    load = row.get("env_load_avg_1m_before")
    if load is None:
        return (row.get("device_type") or row.get("env_device_kind") or "cpu") != "cpu"
    return load <= (row.get("env_cpu_count") or 1)


def trusted_label(row: dict[str, Any], max_cv: float = QUIET_MAX_LATENCY_CV) -> bool:
    """A latency label to judge a predictor by: a quiet host and timed runs that agree (CV below ``max_cv``).
    Noisier rows still train models; scoring on them mixes measurement noise into the model's error."""
    cv = row.get("latency_cv")
    return quiet_host(row) and cv is not None and cv < max_cv


def batch_sweeps(rows: list[dict[str, Any]], latency_key: str = "latency_ms") -> list[dict[int, float]]:
    """The dataset's batch sweeps: one architecture, phase, dtype and sequence length at several batch sizes, as
    {batch: latency} for its ok rows."""
    sweeps: dict[tuple[Any, ...], dict[int, float]] = {}
    for r in rows:
        if r.get("status") == "ok" and all(isinstance(r.get(k), (int, float)) for k in (latency_key, "batch_size")):
            key = (r.get("device"), r.get("arch_key"), r.get("phase"), r.get("seq_len"), r.get("dtype"))
            sweeps.setdefault(key, {})[int(r["batch_size"])] = float(r[latency_key])
    return list(sweeps.values())


def batch_sweep_inversions(
    rows: list[dict[str, Any]], drop: float = 0.10, latency_key: str = "latency_ms"
) -> tuple[int, int]:
    """(batch sweeps with an inversion, batch sweeps of two or more ok rows).

    An inversion is a larger batch measured more than ``drop`` faster than a smaller one. More work does not take
    much less time, so an inversion is label noise that no predictor can learn: a dataset-level check the row's own
    CV can miss, since a whole timed window can be slowed evenly."""
    sweeps = batch_sweeps(rows, latency_key)
    inverted = 0
    for curve in sweeps:
        times = [curve[b] for b in sorted(curve)]
        inverted += any(later < earlier * (1 - drop) for i, earlier in enumerate(times) for later in times[i + 1 :])
    return inverted, sum(len(curve) > 1 for curve in sweeps)


def sweep_bumps(curve: dict[int, float]) -> dict[int, float]:
    """{batch: measured / predicted} for each interior point of one sweep, predicted linearly in the batch from its
    two measured neighbours. 1.0 on a sweep that is affine in the batch (a fixed cost plus a per-sample cost)."""
    batches = sorted(curve)
    out = {}
    for lo, b, hi in zip(batches, batches[1:], batches[2:]):
        predicted = curve[lo] + (curve[hi] - curve[lo]) * (b - lo) / (hi - lo)
        if predicted > 0 and curve[b] > 0:
            out[b] = curve[b] / predicted
    return out


def neighbour_oracle_mape(rows: list[dict[str, Any]], latency_key: str = "latency_ms") -> tuple[float, int]:
    """(MAPE % of the neighbour oracle, interior rows it scored): every interior row of every batch sweep predicted
    from its two measured neighbours, which no split lets a learner see. A yardstick, not a bound: its error holds
    the row's noise, half its neighbours' (through the line) and the curvature the line misses, so independent
    noise of s per label shows as about 1.2 s. ``studies/sweep_recheck.py`` measures whether the bumps are
    real."""
    return curves_oracle_mape(batch_sweeps(rows, latency_key))


def curves_oracle_mape(curves: list[dict[int, float]]) -> tuple[float, int]:
    """:func:`neighbour_oracle_mape` over sweeps already given as {batch: latency}."""
    errors = [abs(1 / bump - 1) for curve in curves for bump in sweep_bumps(curve).values()]
    return (100 * sum(errors) / len(errors) if errors else float("nan")), len(errors)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a dataset holds and its noise floor (median latency CV of the ok rows), for data/README.md."""
    import statistics

    ok = [r for r in rows if r.get("status") == "ok"]
    cvs = sorted(r["latency_cv"] for r in ok if r.get("latency_cv") is not None)

    def count(key: str, subset: list[dict[str, Any]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in subset:
            out[str(r.get(key))] = out.get(str(r.get(key)), 0) + 1
        return dict(sorted(out.items()))

    quiet = [r["latency_cv"] for r in ok if r.get("latency_cv") is not None and quiet_host(r)]
    return {
        "rows": len(rows),
        "ok_rows": len(ok),
        "status": count("status", rows),
        "families": len({r.get("family") for r in ok}),
        "by_family": count("family", ok),
        "by_phase": count("phase", ok),
        "by_dtype": count("dtype", ok),
        "by_batch": count("batch_size", ok),
        "devices": count("device", rows),
        "cpu_models": count("env_cpu_model", ok),
        "median_latency_cv": statistics.median(cvs) if cvs else None,
        "p90_latency_cv": cvs[int(0.9 * (len(cvs) - 1))] if cvs else None,
        "median_latency_cv_quiet_host": statistics.median(quiet) if quiet else None,
        "quiet_rows": len(quiet),
        "median_latency_ms": statistics.median(r["latency_ms"] for r in ok) if ok else None,
        "batch_sweeps_inverted_over_10pct": "{} of {}".format(*batch_sweep_inversions(ok)),
        "batch_sweeps_inverted_over_10pct_quiet_host": "{} of {}".format(
            *batch_sweep_inversions([r for r in ok if quiet_host(r)])
        ),
        "neighbour_oracle_latency_mape_pct_quiet_host": round(
            neighbour_oracle_mape([r for r in ok if quiet_host(r)])[0], 1
        ),
    }


if __name__ == "__main__":  # python -m perfpredict.profiling.dataset data/<device>/
    import sys

    for arg in sys.argv[1:]:
        loaded = load_dataset(arg)
        print(json.dumps({"folder": arg, "load": loaded.summary(), **summarize(loaded.rows)}, indent=2))
