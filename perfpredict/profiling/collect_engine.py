"""The engine every collector shares: what a run is asked (``CollectConfig``), what it did (``CollectSummary``), and
the pieces each collector loop is built from.

The collectors are ``collect_v2`` (protocol 2: one synced window per row), ``collect_v3`` (interleaved rounds,
device and host apart), ``collect_ops`` (single ops) and ``cluster`` (one collector per GPU of a Ray cluster).
What they share, and this module holds:

- **Resumable**: rows already in the folder are skipped (by spec key and device); ``attempt_counts`` counts the
  configs each process started, so a config that crashed the process twice gets a ``status="crashed"`` row
  instead of a third try. Rows are appended and fsynced (``dataset.JsonlAppender``) before the next starts.
- **Failures are data**: ``failure`` turns out-of-memory, too-slow (``TooSlow``, from ``guarded``) and any other
  exception into a row's ``status`` and ``error``; ``Skips`` skips the larger batches of a group after an OOM or a
  too-slow row.
- **Budget and sharing the host**: ``Budget`` stops a run after ``budget_minutes`` of collecting;
  ``touch <out>/PAUSE`` pauses it between rows (``<out>/PAUSED`` exists while it waits, so no row is in flight),
  and paused time does not count.
- **Shards**: ``shard_index``/``shard_count`` keep one of N disjoint parts of the plan (whole batch sweeps, see
  :mod:`perfpredict.profiling.shards`), written to ``<out>/parts/shard-I-of-N/``; resume reads the whole folder.
- **Features**: every row stores the parameter count and torch's FLOP count (``torch_flops``) of the measured
  work; OpGraph features (``graph_*`` columns) are computed per row (``graph_features="inline"``), or left to
  :func:`perfpredict.profiling.graph_features.fill_graph_features` (``"deferred"``). Graphs themselves are never
  stored: the spec key re-derives them.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import logging
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.hardware import cpu_detection
from perfpredict.profiling import dataset as ds
from perfpredict.profiling import parts, shards, zoo

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

GRAPH_FEATURE_MODES = ("inline", "deferred", "none")


def device_slug(device: str) -> str:
    """A folder-friendly device name: ``cpu-amd-epyc-2c`` or ``nvidia-h100-80gb-hbm3``."""
    from perfpredict.profiling import cpu as cpu_probe

    if device == "cpu":
        name = f"cpu-{cpu_detection.cpu_model()}-{cpu_probe.cpu_count()}c"
    else:
        import torch

        index = int(device.split(":")[1]) if ":" in device else 0
        name = torch.cuda.get_device_name(index)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return re.sub(r"-(r|tm)-", "-", slug)


#: the CollectConfig fields that are the timing protocol (``Monitor.measure``'s keywords), in the rows' order
PROTOCOL_FIELDS = ("warmup_min", "min_runs", "min_seconds", "floor_runs", "max_seconds", "warmup_max_s", "freeze_gc")


@dataclass
class CollectConfig:
    """Everything one collection run needs. ``profile`` defaults to "cpu" on CPU and "gpu" on CUDA."""

    out: Path
    device: str = "cpu"
    families: Sequence[str] | None = None
    budget_minutes: float | None = None
    max_rows: int | None = None
    seed: int = 0
    profile: str | None = None
    archs_per_family: int = 50
    arch_block: int = 5
    phases: Sequence[str] = zoo.PHASES
    dtypes: Sequence[str] | None = None
    batches: Sequence[int] | None = None
    warmup_min: int = 5
    min_runs: int = 30
    min_seconds: float = 1.0
    floor_runs: int = 5
    max_seconds: float = 60.0
    warmup_max_s: float = 5.0
    freeze_gc: bool = True
    max_latency_ms: float | None = None
    too_slow_factor: float = 10.0
    power_sample_interval_s: float | None = 0.1
    graph_features: str = "inline"
    sentinel: bool = False  # time the host-speed sentinel right before each row (profiling/sentinel.py)
    progress: bool = True
    compact: bool = True
    device_label: str | None = None
    protocol_version: int = 3  # 3: rounds, device and host apart (collect_v3.py); 2: one synced window per row
    min_rounds: int = 3
    max_rounds: int = 5
    max_spread: float = 0.03
    round_block: int = 12
    shard_index: int = 0  # which of shard_count disjoint parts of the plan this run measures (shards.py)
    shard_count: int = 1

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        shards.check_shard(self.shard_index, self.shard_count)
        if self.device == "cuda":
            self.device = "cuda:0"
        if self.device != "cpu" and not re.fullmatch(r"cuda:\d+", self.device):
            raise InvalidInputError(f"device {self.device!r} is not 'cpu', 'cuda' or 'cuda:N'")
        if self.profile is None:
            self.profile = "cpu" if self.device == "cpu" else "gpu"
        if self.graph_features not in GRAPH_FEATURE_MODES:
            raise InvalidInputError(
                f"graph_features {self.graph_features!r} is not one of {', '.join(GRAPH_FEATURE_MODES)}"
            )
        for name in self.families or ():
            zoo.get_family(name)
        dtypes = self.dtypes or zoo.DEVICE_DTYPES["cpu" if self.device == "cpu" else "cuda"]
        bad = [d for d in dtypes if d not in zoo.DEVICE_DTYPES["cpu" if self.device == "cpu" else "cuda"]]
        if bad:
            raise InvalidInputError(
                f"dtype(s) {bad!r} are not measured on {self.device}; choose from "
                f"{', '.join(zoo.DEVICE_DTYPES['cpu' if self.device == 'cpu' else 'cuda'])}"
            )
        self.dtypes = tuple(dtypes)
        if self.protocol_version not in (2, 3):
            raise InvalidInputError(f"protocol {self.protocol_version!r} is not 2 or 3")
        for b in self.batches or ():
            if not zoo.BATCH_RANGE[0] <= b <= zoo.BATCH_RANGE[1]:
                raise InvalidInputError(f"batch {b} is outside {zoo.BATCH_RANGE}")

    def protocol(self) -> dict[str, Any]:
        """The timing protocol's settings, as ``Monitor.measure`` takes them and each row records them."""
        return {name: getattr(self, name) for name in PROTOCOL_FIELDS}

    def plan(self) -> list[zoo.ModelSpec]:
        specs = list(
            zoo.sample_specs(
                self.families,
                seed=self.seed,
                profile=self.profile,
                device=self.device,
                archs=self.archs_per_family,
                phases=self.phases,
                dtypes=self.dtypes,
                batches=self.batches,
                arch_block=self.arch_block,
            )
        )
        return shards.select(specs, self.shard_index, self.shard_count)

    def label(self) -> str:
        """The device's name in rows and folders: ``device_label``, else the device's slug."""
        return self.device_label or device_slug(self.device)

    def budget(self, folder: Path | None = None) -> Budget:
        """This run's time budget, paused while ``folder`` (default ``out``) has a PAUSE file."""
        return Budget(self.out if folder is None else folder, self.budget_minutes)

    def write_dir(self) -> Path:
        """Where this run appends: ``out`` itself, or its shard's part folder (one writer per file)."""
        if self.shard_count == 1:
            return self.out
        return self.out / parts.PARTS_DIR / parts.part_name(self.shard_index, self.shard_count)


@dataclass
class CollectSummary:
    out: Path
    device: str
    measured: int = 0
    oom: int = 0
    errors: int = 0
    skipped_existing: int = 0
    skipped_larger: int = 0
    rows_total: int = 0
    seconds: float = 0.0
    stopped_by: str = "plan done"
    load_problems: list[str] = field(default_factory=list)

    @property
    def rows_per_minute(self) -> float:
        return 60 * self.measured / self.seconds if self.seconds > 0 else 0.0


def is_oom(err: BaseException) -> bool:
    """Out of memory on GPU (torch.OutOfMemoryError) or CPU (the default allocator's RuntimeError)."""
    import torch

    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err)
    return isinstance(err, (RuntimeError, MemoryError)) and (
        "out of memory" in text.lower() or "can't allocate memory" in text or isinstance(err, MemoryError)
    )


def torch_flops(step: Any) -> int | None:
    """torch's FLOP count (matmuls, convolutions, attention) of one call of ``step``."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with FlopCounterMode(display=False) as counter:
            step()
        return int(counter.get_total_flops())
    except Exception as err:  # noqa: BLE001 - a counting failure must not lose the measurement
        logger.debug("flop counting failed: %s", err)
        return None


class TooSlow(Exception):
    """A config whose first call already blows the time cap: recorded as status="too_slow", larger batches skipped."""


def failure(err: BaseException) -> dict[str, str]:
    """A failed config's ``status`` (too_slow, oom or error) and one-line ``error``: failures are data."""
    status = "too_slow" if isinstance(err, TooSlow) else "oom" if is_oom(err) else "error"
    return {"status": status, "error": f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"}


def release(device: str) -> None:
    """Give a freed model's memory back before the next config (the CUDA caching allocator's too)."""
    gc.collect()
    if device != "cpu":
        import torch

        torch.cuda.empty_cache()


def guarded(step: Any, limit_ms: float, strikes: int = 2) -> Any:
    """``step`` that raises TooSlow on its ``strikes``-th call slower than ``limit_ms`` (one outlier is allowed)."""
    slow = [0]

    def call() -> Any:
        t0 = time.perf_counter()
        out = step()
        ms = (time.perf_counter() - t0) * 1e3
        if ms > limit_ms:
            slow[0] += 1
            if slow[0] >= strikes:
                raise TooSlow(f"{slow[0]} calls slower than {limit_ms:.0f} ms (the last took {ms:.0f} ms)")
        return out

    return call


# -- one row ------------------------------------------------------------------------------------------------
def utc_now() -> str:
    """Now, as the rows' ``started_at`` and ``at`` fields spell it (UTC, to the second)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def base_row(spec: zoo.ModelSpec, device_label: str, device: str) -> dict[str, Any]:
    return {
        "schema_version": ds.DATASET_SCHEMA_VERSION,
        "zoo_version": zoo.ZOO_VERSION,
        "key": spec.to_key(),
        "arch_key": spec.arch_key(),
        "family": spec.family,
        "phase": spec.phase,
        "batch_size": spec.batch,
        "seq_len": spec.seq,
        "dtype": spec.dtype,
        "params_json": json.dumps(dict(spec.params), sort_keys=True),
        "device": device_label,
        "device_type": "cpu" if device == "cpu" else "cuda",
        "started_at": utc_now(),
    }


# -- the run ------------------------------------------------------------------------------------------------
class Skips:
    """Which larger batches to skip, per group, after an OOM or a too-slow row (rebuilt from rows on resume)."""

    def __init__(self, max_latency_ms: float | None) -> None:
        self.max_latency_ms = max_latency_ms
        self.limit: dict[str, int] = {}

    def note(self, row: dict[str, Any]) -> None:
        slow = (
            self.max_latency_ms is not None
            and row.get("status") == "ok"
            and (row.get("latency_ms") or 0) > self.max_latency_ms
        )
        if row.get("status") in ("oom", "too_slow") or slow:
            try:
                group = zoo.ModelSpec.from_key(row["key"]).group_key()
            except Exception:  # noqa: BLE001 - a row from an older zoo: nothing to skip
                return
            b = int(row.get("batch_size") or 0)
            self.limit[group] = min(self.limit.get(group, b), b)

    def skip(self, spec: zoo.ModelSpec) -> bool:
        limit = self.limit.get(spec.group_key())
        return limit is not None and spec.batch > limit


PAUSE_FILE = "PAUSE"


def wait_while_paused(folder: Path) -> float:
    """While ``<out>/PAUSE`` exists, wait between rows (so other work on the host cannot disturb a measurement).

    Writes ``<out>/PAUSED`` while waiting, so whoever paused it knows no row is in flight. Paused time does not
    count against the budget; returns it.
    """
    flag = folder / PAUSE_FILE
    if not flag.exists():
        return 0.0
    t0 = time.monotonic()
    (folder / "PAUSED").write_text(utc_now() + "\n")
    try:
        while flag.exists():
            time.sleep(0.5)
    finally:
        (folder / "PAUSED").unlink(missing_ok=True)
    return time.monotonic() - t0


class Budget:
    """A run's time budget: ``exhausted()`` first waits while the folder is paused (``wait_while_paused``), then
    says whether ``budget_minutes`` of collecting, paused time left out, are spent (never, without a budget)."""

    def __init__(self, folder: Path, budget_minutes: float | None) -> None:
        self.folder = folder
        self.budget_s = None if budget_minutes is None else 60.0 * budget_minutes
        self.t0 = time.monotonic()
        self.paused_s = 0.0

    def elapsed_s(self) -> float:
        """Seconds since the run started, paused time included (a summary's ``seconds``)."""
        return time.monotonic() - self.t0

    def exhausted(self) -> bool:
        self.paused_s += wait_while_paused(self.folder)
        return self.budget_s is not None and self.elapsed_s() - self.paused_s >= self.budget_s


def attempt_counts(folder: Path) -> dict[str, int]:
    rows, _, _ = ds.read_jsonl_all(folder, ds.ATTEMPTS_JSONL, required=("key",))  # every shard's
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["key"]] = counts.get(r["key"], 0) + 1
    return counts


def compact_quietly(folder: Path) -> None:
    """Fold the folder's JSONL rows into Parquet; a failure (no pyarrow) only says so: the log is complete."""
    try:
        ds.compact(folder)
    except Exception as err:  # noqa: BLE001 - the JSONL log is complete; compaction can run again later
        print(f"collect: rows kept in {folder / ds.ROWS_JSONL}; compaction to Parquet skipped ({err})", file=sys.stderr)
