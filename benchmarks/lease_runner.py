"""The GPU lease's stage runner: stages as child processes on a fixed schedule, each cut at its deadline, and the
results packed after every stage, so a window cut short still returns everything measured before the cut.

Schedule. Stage ``i`` must end by ``t0 + share_0 + ... + share_i`` (and every stage by ``t0 + total_s - reserve_s``,
the reserve being the final packing's). A stage that ends early leaves its time to the next; one that overruns is
sent SIGINT at its deadline (the collectors close their files on it) and SIGKILL ``kill_grace_s`` later, so the
stages after it keep their shares. A stage is told its budget (its deadline less its own ``exit_margin_s``, the time
its item in flight may take to finish, or less 40% of its window when that is shorter) and stops starting work by
itself before the runner has to cut it. A stage
whose window is under ``min_stage_s`` is skipped.

Headers. The run's manifest (``run.json``) lists every stage with status ``pending`` before the first starts, and
each stage's entry is rewritten when it starts and when it ends (``ok``, ``failed``, ``cut``, ``skipped: ...``), so
what did not run is as visible as what did.

Packing (:func:`pack`): ``<out>/lease.tgz`` holds ``lease/run.json``, ``lease/lease.log``, ``lease/env/`` and
``lease/data/v3/<slug>/...``: of each file under the work folder's dataset, what this lease added (the bytes past the
offset it had when it was seeded from the repository's committed rows; files not seeded come whole).
``<out>/lease.log`` and ``<out>/summary.txt`` sit beside it. Three files, no folders: within what the device tool
brings back from ``$OUT``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

PACK_NAME = "lease.tgz"
LOG_NAME = "lease.log"
SUMMARY_NAME = "summary.txt"
MANIFEST_NAME = "run.json"
SEED_NAME = "seed.json"
#: dataset files a lease seeds from the repository: the rows, so that measured keys are skipped
SEEDED_FILES = ("rows.jsonl", "rows.parquet", "ops/rows.jsonl", "ops/rows.parquet", "generation/rows.jsonl")


@dataclass
class Stage:
    """One stage: ``argv(budget_s)`` is its command, given the seconds it may use."""

    name: str
    share_s: float
    argv: Callable[[float], list[str]]
    exit_margin_s: float = 5.0


@dataclass
class StageResult:
    name: str
    share_s: float
    status: str = "pending"
    limit_s: float | None = None
    budget_s: float | None = None
    started_at: str | None = None
    seconds: float | None = None
    exit_code: int | None = None
    argv: list[str] = field(default_factory=list)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def run_child(argv: Sequence[str], limit_s: float, log: TextIO, kill_grace_s: float = 10.0) -> tuple[str, int | None]:
    """Run ``argv`` in its own process group with output to ``log``; SIGINT at ``limit_s``, SIGKILL
    ``kill_grace_s`` later. Returns (``ok`` | ``failed`` | ``cut``, exit code)."""
    log.flush()
    proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = proc.wait(timeout=max(limit_s, 0.0))
        return ("ok" if code == 0 else "failed"), code
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGINT)
    try:
        code = proc.wait(timeout=kill_grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        code = proc.wait()
    return "cut", code


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group this runner started for the stage
        os.killpg(proc.pid, sig)


def run_stages(
    stages: Sequence[Stage],
    *,
    total_s: float,
    reserve_s: float,
    manifest: dict[str, Any],
    manifest_path: Path,
    log_path: Path,
    after_stage: Callable[[], None] = lambda: None,
    skip: Callable[[Stage], str | None] = lambda stage: None,
    min_stage_s: float = 5.0,
    kill_grace_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> list[StageResult]:
    """Run ``stages`` on the schedule in the module docstring; ``skip(stage)`` may name a reason not to run one
    (a device that was not found). ``after_stage()`` runs after each (the packing). Returns every stage's result."""
    t0 = clock()
    results = [StageResult(s.name, s.share_s) for s in stages]
    manifest["stages"] = [asdict(r) for r in results]
    write_json(manifest_path, manifest)
    end_all = total_s - reserve_s
    cumulative = 0.0
    with open(log_path, "a") as log:
        for i, (stage, result) in enumerate(zip(stages, results)):
            cumulative += stage.share_s
            limit = min(cumulative, end_all) - (clock() - t0)
            reason = skip(stage)
            if reason is None and limit < min_stage_s:
                reason = f"no time left ({max(limit, 0):.0f} s)"
            if reason is not None:
                result.status = f"skipped: {reason}"
                _say(log, t0, clock, f"{stage.name}: {result.status}")
            else:
                result.limit_s = round(limit, 1)
                result.budget_s = round(max(limit - min(stage.exit_margin_s, 0.4 * limit), 1.0), 1)
                result.argv = stage.argv(result.budget_s)
                result.started_at = _now()
                result.status = "running"
                manifest["stages"][i] = asdict(result)
                write_json(manifest_path, manifest)
                _say(log, t0, clock, f"{stage.name}: start (limit {limit:.0f} s, budget {result.budget_s:.0f} s)")
                started = clock()
                try:
                    result.status, result.exit_code = run_child(result.argv, limit, log, kill_grace_s)
                except OSError as err:  # the command could not start: this stage's loss, not the run's
                    result.status = f"failed: {err}"
                result.seconds = round(clock() - started, 1)
                _say(log, t0, clock, f"{stage.name}: {result.status} (exit {result.exit_code}) in {result.seconds} s")
            manifest["stages"][i] = asdict(result)
            write_json(manifest_path, manifest)
            try:
                after_stage()
            except Exception as err:  # noqa: BLE001 - a failed packing must not stop the stages after it
                _say(log, t0, clock, f"after {stage.name}: {type(err).__name__}: {err}")
    return results


def _say(log: TextIO, t0: float, clock: Callable[[], float], text: str) -> None:
    line = f"[lease +{clock() - t0:.0f}s] {text}"
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()


# -- seeding and packing -------------------------------------------------------------------------------------------
def seed(work_slug: Path, committed_slug: Path) -> dict[str, int]:
    """Copy the committed rows of this device into the work folder once (so measured keys are skipped), and
    return each dataset file's byte offset at that moment (kept in ``seed.json``; later calls read it back)."""
    record = work_slug / SEED_NAME
    if record.is_file():
        return json.loads(record.read_text())
    work_slug.mkdir(parents=True, exist_ok=True)
    for rel in SEEDED_FILES:
        src = committed_slug / rel
        if src.is_file():
            (work_slug / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, work_slug / rel)
    offsets = {str(p.relative_to(work_slug)): p.stat().st_size for p in sorted(work_slug.rglob("*")) if p.is_file()}
    write_json(record, offsets)
    return offsets


def delta_files(work_slug: Path, offsets: dict[str, int]) -> dict[str, bytes]:
    """What the lease added under the work folder: each file's bytes past its seeded offset (parquet files, which
    only seeding writes, are left out)."""
    out = {}
    for path in sorted(work_slug.rglob("*")):
        rel = str(path.relative_to(work_slug))
        if not path.is_file() or rel == SEED_NAME or path.suffix in (".parquet", ".part"):
            continue
        data = path.read_bytes()[offsets.get(rel, 0) :]
        if data:
            out[rel] = data
    return out


def pack(out: Path, run_dir: Path, slug: str | None, work_slug: Path | None, offsets: dict[str, int]) -> Path:
    """Write ``<out>/lease.tgz`` (atomically), ``<out>/lease.log`` and ``<out>/summary.txt``."""
    out.mkdir(parents=True, exist_ok=True)
    part = out / (PACK_NAME + ".part")
    added = delta_files(work_slug, offsets) if work_slug is not None and work_slug.is_dir() else {}
    with tarfile.open(part, "w:gz") as tar:
        for path in sorted(run_dir.rglob("*")):
            if path.is_file() and not path.name.endswith(".part"):
                tar.add(path, arcname=f"lease/{path.relative_to(run_dir)}")
        for rel, data in added.items():
            info = tarfile.TarInfo(f"lease/data/v3/{slug}/{rel}")
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    os.replace(part, out / PACK_NAME)
    if (run_dir / LOG_NAME).is_file():
        shutil.copyfile(run_dir / LOG_NAME, out / LOG_NAME)
    (out / SUMMARY_NAME).write_text(summary_text(run_dir / MANIFEST_NAME, added))
    return out / PACK_NAME


def summary_text(manifest_path: Path, added: dict[str, bytes]) -> str:
    """A short human-readable account: the stages and the rows each dataset file gained."""
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    lines = [f"lease {manifest.get('lease_id')} on {manifest.get('device_name')} ({manifest.get('slug')})"]
    for s in manifest.get("stages", []):
        took = f" in {s['seconds']} s of {s['limit_s']} s" if s.get("seconds") is not None else ""
        lines.append(f"  {s['name']:<11} {s['status']}{took}")
    for rel, data in added.items():
        if rel.endswith(".jsonl"):
            count = data.count(b"\n")
            lines.append(f"  {rel}: +{count} lines")
    return "\n".join(lines) + "\n"
