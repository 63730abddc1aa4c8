"""The dataset collector: measure zoo specs on one device, resumably, into ``data/<device-slug>/``.

    perfpredict collect --device cpu --budget-minutes 2 --out data/cpu-amd-epyc-2c/

- **Order**: a round-robin over families, each family architecture by architecture, batch-major (see
  :func:`perfpredict.profiling.zoo.sample_specs`), so a short budget spans every family and both phases.
- **Resumable**: rows already in the folder are skipped (by spec key and device). **Crash-safe**: each row is
  appended to ``rows.jsonl`` and fsynced before the next config starts, so ``kill -9`` loses at most the config in
  flight. A config that crashed the process twice gets a ``status="crashed"`` row instead of a third try.
- **Failures are data**: out-of-memory gives a ``status="oom"`` row, and larger batches of the same (architecture,
  phase, seq, dtype) group are skipped; so are larger batches after a row slower than ``max_latency_ms``
  (a time cap for small hosts). Any other exception gives a ``status="error"`` row with the message.
- **Features**: every row stores the parameter count and torch's FLOP count (``torch.utils.flop_counter``, one
  extra call) of the measured work. OpGraph features from ``perfpredict.featurize`` on the meta device (``graph_*``
  columns) cost 2-5 s per trace on a 2-core host, more than the measurement, so ``graph_features="inline"``
  computes them per row (exact at batches 1, 2 and 4, affine in the batch beyond, which is exact for per-op FLOPs and
  bytes) and ``"deferred"`` leaves them to :func:`perfpredict.profiling.graph_features.fill_graph_features`, which writes ``graph_features.jsonl``
  (joined on load). Graphs themselves are never stored: the spec key re-derives them.
- **Shards**: ``shard_index``/``shard_count`` keep one of N disjoint parts of the plan (whole batch sweeps, see
  :mod:`perfpredict.profiling.shards`), written to ``<out>/parts/shard-I-of-N/``; resume reads the whole folder.
- **Sharing the host**: ``touch <out>/PAUSE`` pauses the collector between rows (it writes ``<out>/PAUSED`` while
  it waits, so no row is in flight); remove the file to resume. Paused time does not count against the budget.
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
from perfpredict.profiling import dataset as ds
from perfpredict.profiling import parts, shards, zoo
from perfpredict.profiling.graph_features import GraphFeatureCache
from perfpredict.profiling.sentinel import Sentinel

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

GRAPH_FEATURE_MODES = ("inline", "deferred", "none")


def device_slug(device: str) -> str:
    """A folder-friendly device name: ``cpu-amd-epyc-2c`` or ``nvidia-h100-80gb-hbm3``."""
    from perfpredict.profiling import cpu as cpu_probe

    if device == "cpu":
        name = f"cpu-{cpu_probe.cpu_model()}-{cpu_probe.cpu_count()}c"
    else:
        import torch

        index = int(device.split(":")[1]) if ":" in device else 0
        name = torch.cuda.get_device_name(index)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return re.sub(r"-(r|tm)-", "-", slug)


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
        return {
            "warmup_min": self.warmup_min,
            "min_runs": self.min_runs,
            "min_seconds": self.min_seconds,
            "floor_runs": self.floor_runs,
            "max_seconds": self.max_seconds,
            "warmup_max_s": self.warmup_max_s,
            "freeze_gc": self.freeze_gc,
        }

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
def _now() -> str:
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
        "started_at": _now(),
    }


def measure_spec(
    spec: zoo.ModelSpec, monitor: Any, cfg: CollectConfig, device_label: str, features: GraphFeatureCache | None = None
) -> dict[str, Any]:
    """Build, warm up and measure one spec; a row dict whatever happens (ok, oom or error)."""
    row = base_row(spec, device_label, cfg.device)
    row["zoo_profile"] = cfg.profile
    row["protocol_version"] = 2
    t0 = time.perf_counter()
    name = "collect"
    model = step = x = labels = None
    monitor.begin_window(name)
    try:
        model = spec.build(cfg.device)
        x, labels = spec.inputs(cfg.device)
        monitor.end_build(name)  # the float32 build and its cast peak apart from the step (measurement.py)
        step = zoo.make_step(model, x, labels, spec.phase)
        row["param_count"] = sum(p.numel() for p in model.parameters())
        row["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        t_probe = time.perf_counter()
        row["torch_flops"] = torch_flops(step)  # also the first (cold) call
        probe_ms = (time.perf_counter() - t_probe) * 1e3
        row["probe_latency_ms"] = probe_ms
        limit_ms = None if cfg.max_latency_ms is None else cfg.too_slow_factor * cfg.max_latency_ms
        if limit_ms is not None and limit_ms < probe_ms < 3 * limit_ms:
            t_probe = time.perf_counter()  # the first call pays one-time costs (AdamW state, lazy init): retry warm
            step()
            probe_ms = (time.perf_counter() - t_probe) * 1e3
            row["probe_latency_ms"] = probe_ms
        if limit_ms is not None and probe_ms > limit_ms:
            raise TooSlow(f"one cold call took {probe_ms:.0f} ms, over {cfg.too_slow_factor:g} x max_latency_ms")
        if limit_ms is not None:
            step = guarded(step, limit_ms)
        m = monitor.measure(step, name=name, begin=False, batch_size=spec.batch, **cfg.protocol())
        mrow = m.to_row()
        mrow["torch_device"] = mrow.pop("device")
        mrow.pop("name", None)
        mrow["measurement_schema_version"] = mrow.pop("schema_version")
        row.update(mrow)
        row["status"] = "ok"
        row["error"] = None
    except Exception as err:  # noqa: BLE001 - failures are data: every config ends as a row
        monitor.abort_window(name)
        row.update(failure(err))
    finally:
        del model, step, x, labels
        release(cfg.device)
    row.update({f"protocol_{k}": v for k, v in cfg.protocol().items()})
    if features is not None and row["status"] == "ok":
        row.update(features.features(spec))
    elif cfg.graph_features == "deferred":
        row["graph_features_method"] = "deferred"
    row["row_seconds"] = round(time.perf_counter() - t0, 3)
    return row


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
    (folder / "PAUSED").write_text(_now() + "\n")
    try:
        while flag.exists():
            time.sleep(0.5)
    finally:
        (folder / "PAUSED").unlink(missing_ok=True)
    return time.monotonic() - t0


def attempt_counts(folder: Path) -> dict[str, int]:
    rows, _, _ = ds.read_jsonl_all(folder, ds.ATTEMPTS_JSONL, required=("key",))  # every shard's
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["key"]] = counts.get(r["key"], 0) + 1
    return counts


class Progress:
    """A rich progress bar with ETA on a terminal; a plain line every 25 rows otherwise (logs, nohup)."""

    def __init__(self, enabled: bool, total: int, budget_s: float | None) -> None:
        self.enabled = enabled
        self.total = total
        self.budget_s = budget_s
        self.t0 = time.monotonic()
        self.live = None
        self.count = 0
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.live = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.rows_task = self.live.add_task("configs", total=total)
            self.budget_task = self.live.add_task("budget (s)", total=int(budget_s)) if budget_s else None
            self.live.start()

    def advance(self, what: str, measured: int) -> None:
        self.count += 1
        if self.live is not None:
            self.live.update(self.rows_task, advance=1, description=f"configs ({what})")
            if self.budget_task is not None:
                self.live.update(self.budget_task, completed=min(self.budget_s, time.monotonic() - self.t0))
        elif self.enabled and what != "skip" and measured % 25 == 0 and measured:
            elapsed = time.monotonic() - self.t0
            rate = measured / elapsed if elapsed > 0 else 0
            left = self.total - self.count
            eta = left / rate if rate else float("inf")
            if self.budget_s:
                eta = min(eta, max(0.0, self.budget_s - elapsed))
            print(
                f"collect: {measured} rows measured, {self.count}/{self.total} configs, {elapsed:.0f} s elapsed, "
                f"{60 * rate:.1f} rows/min, ETA {eta:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


def collect(cfg: CollectConfig) -> CollectSummary:
    """Run one collection (see the module docstring); returns what it did."""
    import torch

    from perfpredict.profiling.monitor import Monitor

    cfg.write_dir().mkdir(parents=True, exist_ok=True)
    label = cfg.device_label or device_slug(cfg.device)
    summary = CollectSummary(out=cfg.out, device=label)
    loaded = ds.load_dataset(cfg.out, join_features=False)
    summary.load_problems = loaded.problems
    if loaded.lost or loaded.problems:
        print(f"collect: existing data in {cfg.out}: {loaded.summary()}", file=sys.stderr)
    done = {r["key"] for r in loaded.rows if r.get("device") == label}
    skips = Skips(cfg.max_latency_ms)
    for r in loaded.rows:
        if r.get("device") == label:
            skips.note(r)
    attempts = attempt_counts(cfg.out)
    plan = cfg.plan()
    rows_total = len(done)
    monitor = Monitor(cfg.device, power_sample_interval_s=cfg.power_sample_interval_s or None)
    features = GraphFeatureCache() if cfg.graph_features == "inline" else None
    budget_s = None if cfg.budget_minutes is None else 60.0 * cfg.budget_minutes
    bar = Progress(cfg.progress, len(plan), budget_s)
    t0 = time.monotonic()
    meta = {
        "device": label,
        "torch_device": cfg.device,
        "cpu_model": monitor._static_env["cpu_model"],
        "device_name": monitor._static_env["device_name"],
        "torch_version": torch.__version__,
        "protocol": cfg.protocol(),
        "profile": cfg.profile,
        "seed": cfg.seed,
        "sentinel": cfg.sentinel,
        "started_at": _now(),
    }
    (cfg.write_dir() / "collector.json").write_text(json.dumps(meta, indent=2) + "\n")
    # every_s=0: a reading next to each row; slow spells of a shared host last seconds (sentinel.py)
    sentinel = Sentinel(cfg.device, every_s=0.0) if cfg.sentinel else None
    try:
        with (
            ds.JsonlAppender(cfg.write_dir() / ds.ROWS_JSONL) as rows_out,
            ds.JsonlAppender(cfg.write_dir() / ds.ATTEMPTS_JSONL) as attempts_out,
        ):
            paused_s = 0.0
            for spec in plan:
                paused_s += wait_while_paused(cfg.out)
                if budget_s is not None and time.monotonic() - t0 - paused_s >= budget_s:
                    summary.stopped_by = "budget"
                    break
                if cfg.max_rows is not None and rows_total >= cfg.max_rows:
                    summary.stopped_by = "max_rows"
                    break
                key = spec.to_key()
                if key in done:
                    summary.skipped_existing += 1
                    bar.advance("skip", summary.measured)
                    continue
                if skips.skip(spec):
                    summary.skipped_larger += 1
                    bar.advance("skip", summary.measured)
                    continue
                if attempts.get(key, 0) >= 2:
                    row = base_row(spec, label, cfg.device)
                    row.update(status="crashed", error=f"the process died {attempts[key]} times on this config")
                else:
                    attempts_out.append({"key": key, "device": label, "at": _now()})
                    attempts[key] = attempts.get(key, 0) + 1
                    reading = sentinel.reading() if sentinel is not None else {}
                    row = measure_spec(spec, monitor, cfg, label, features)
                    row.update(reading)
                rows_out.append(row)
                done.add(key)
                skips.note(row)
                rows_total += 1
                summary.measured += 1
                summary.oom += row["status"] == "oom"
                summary.errors += row["status"] in ("error", "crashed")
                if row["status"] == "error":
                    logger.warning("config failed: %s: %s", key, row["error"])
                bar.advance(row["status"], summary.measured)
    finally:
        bar.close()
        summary.seconds = time.monotonic() - t0
        summary.rows_total = rows_total
    if cfg.compact:
        compact_quietly(cfg.out)
    return summary


def compact_quietly(folder: Path) -> None:
    """Fold the folder's JSONL rows into Parquet; a failure (no pyarrow) only says so: the log is complete."""
    try:
        ds.compact(folder)
    except Exception as err:  # noqa: BLE001 - the JSONL log is complete; compaction can run again later
        print(f"collect: rows kept in {folder / ds.ROWS_JSONL}; compaction to Parquet skipped ({err})", file=sys.stderr)
