"""Collection on a Ray cluster: one collector actor per GPU (or per host for a CPU target), one shard each.

    perfpredict collect --ray auto --device cuda --out /shared/data/v3/nvidia-h100-80gb-hbm3

Each actor runs :func:`perfpredict.profiling.shard_run.run_shard` on shard ``i`` of ``N``: it writes only to
``<out>/parts/shard-i-of-N/`` (one writer per file, see :mod:`perfpredict.profiling.parts`) and resumes from
whatever the whole folder holds. Ray restarts an actor that dies (SIGKILL, a node lost) up to ``max_restarts``
times and re-runs its shard, which resumes from its own rows; a row already written stays, and a config that
killed its worker twice becomes a ``status="crashed"`` row, as on one host. When every actor is done the driver
compacts the folder once. ``out`` must be on a filesystem every node shares: each actor checks before it starts.

Ray is imported here only, when a cluster run starts (``pip install "perfpredict[cluster]"``).
"""

from __future__ import annotations

import logging
import time
import uuid
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError, MissingDependencyError, PerfPredictError
from perfpredict.profiling import collect_engine as engine
from perfpredict.profiling import dataset as ds
from perfpredict.profiling import parts, shard_run
from perfpredict.progress import Progress

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

PROGRESS_EVERY_S = 30.0
DEFAULT_MAX_RESTARTS = 3
START_TIMEOUT_S = 600.0  # a worker imports torch and, on a GPU, creates a CUDA context before it answers


def _ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise MissingDependencyError(
            'collecting on a Ray cluster needs ray, which is not installed; pip install "perfpredict[cluster]"'
        ) from err
    return ray


class ShardWorker:
    """The body of one Ray actor: collects one shard of the plan (a plain class, made remote in :func:`_start`)."""

    def __init__(self, cfg: engine.CollectConfig) -> None:
        self.cfg = cfg

    def check(self, token: Path) -> str:
        """This worker's device label, once it has seen the driver's token file in ``out`` (a shared folder)."""
        import socket

        if not Path(token).exists():
            raise InvalidInputError(
                f"--out {str(self.cfg.out)!r} is not shared with host {socket.gethostname()!r}: "
                "put the dataset folder on a filesystem every Ray node mounts at the same path"
            )
        return self.cfg.label()

    def run(self) -> engine.CollectSummary:
        return shard_run.run_shard(self.cfg)


def worker_count(ray: Any, device: str, workers: int | None) -> int:
    """``workers``, or one per GPU of the cluster (per alive node for a CPU target); checked against what it has."""
    kind = "CPU" if device == "cpu" else "GPU"
    have = int(ray.cluster_resources().get(kind, 0))
    hosts = sum(1 for n in ray.nodes() if n.get("Alive"))
    if workers is None:
        workers = hosts if kind == "CPU" else have
    if have == 0:
        raise InvalidInputError(
            f"the Ray cluster has no {kind}: start its nodes with `ray start --num-gpus N`, or "
            "collect with --device cpu"
        )
    if not 1 <= workers <= have:
        raise InvalidInputError(
            f"--workers {workers}: each worker takes one {kind} and the Ray cluster has {have}; choose 1 to {have}"
        )
    if kind == "CPU" and workers > hosts:
        warnings.warn(
            f"{workers} CPU workers share {hosts} host(s): they time their rows on the same cores and "
            f"disturb each other's labels; one worker per host (--workers {hosts}) gives clean ones",
            stacklevel=3,
        )
    return workers


def shard_config(cfg: engine.CollectConfig, index: int, count: int) -> engine.CollectConfig:
    """Worker ``index``'s config: its shard, its one GPU (Ray sets CUDA_VISIBLE_DEVICES), no bar, no compaction
    (the driver compacts once at the end)."""
    device = "cpu" if cfg.device == "cpu" else "cuda:0"
    return replace(cfg, device=device, shard_index=index, shard_count=count, progress=False, compact=False)


def _start(ray: Any, cfg: engine.CollectConfig, count: int, max_restarts: int) -> list[Any]:
    cpu = cfg.device == "cpu"
    actor = ray.remote(ShardWorker).options(
        num_cpus=1,
        num_gpus=0 if cpu else 1,
        max_restarts=max_restarts,
        max_task_retries=max_restarts,
        scheduling_strategy="SPREAD" if cpu else "DEFAULT",
    )  # CPU workers on separate hosts where there are some
    return [actor.remote(shard_config(cfg, i, count)) for i in range(count)]


def _check(ray: Any, actors: list[Any], out: Path) -> str:
    """The one device label all workers share; raises when ``out`` is not shared or the devices differ."""
    token = out / parts.PARTS_DIR / f".driver-{uuid.uuid4().hex}"
    token.parent.mkdir(parents=True, exist_ok=True)
    token.write_text("the driver of a cluster collection was here\n")
    try:
        labels = ray.get([a.check.remote(token) for a in actors], timeout=START_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError as err:
        raise InvalidInputError(
            f"{len(actors)} workers did not start within {START_TIMEOUT_S:.0f} s: the Ray "
            "cluster has too few free GPUs or CPUs (another job holds them?); see `ray status`, "
            "or ask for fewer with --workers"
        ) from err
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, PerfPredictError):
            raise cause from None  # the worker's own error (out not shared, ...): one line for the CLI
        raise
    finally:
        token.unlink(missing_ok=True)
    if len(set(labels)) > 1:
        raise InvalidInputError(
            f"the workers see different devices ({', '.join(sorted(set(labels)))}); collect "
            "one device per run: a Ray cluster of one GPU model, or --workers on one host"
        )
    return labels[0]


def _one_line(err: BaseException) -> str:
    cause = getattr(err, "cause", None) or err
    first = (str(cause).strip().splitlines() or [""])[0]
    return f"{type(cause).__name__}: {first[:200]}"


def _rows_written(out: Path) -> int:
    return sum(
        (f / ds.ROWS_JSONL).read_bytes().count(b"\n") for f in parts.part_folders(out) if (f / ds.ROWS_JSONL).exists()
    )


def _wait(ray: Any, actors: list[Any], cfg: engine.CollectConfig) -> tuple[list[engine.CollectSummary], dict[int, str]]:
    """Run every worker's shard; (the summaries of those that finished, {worker: error} of those that failed)."""
    pending = {a.run.remote(): i for i, a in enumerate(actors)}
    done: list[engine.CollectSummary] = []
    failed: dict[int, str] = {}
    # the workers' own bars are in processes with no terminal: the driver counts the rows their parts gain
    with Progress("collect --ray", enabled=cfg.progress) as bar:
        written = _rows_written(cfg.out) if bar.shown else 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=PROGRESS_EVERY_S)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    done.append(ray.get(ref))
                except ray.exceptions.RayError as err:
                    failed[i] = _one_line(err)
                    logger.warning("collect worker %d failed: %s", i, failed[i])
            if bar.shown:  # reading every part's rows costs a little: only for a display
                now = _rows_written(cfg.out)
                bar.advance(max(0, now - written), note=f"{len(pending)} workers running")
                written = now
    return done, failed


def _keys(out: Path, label: str) -> set[str]:
    return {r["key"] for r in ds.load_dataset(out, join_features=False).rows if r.get("device") == label}


def _merge(
    summaries: list[engine.CollectSummary], cfg: engine.CollectConfig, label: str, before: set[str], seconds: float
) -> engine.CollectSummary:
    """One summary of the run. Row counts come from the folder, not the workers: a restarted worker's summary
    covers its last life only, and a failed one returns none."""
    total = engine.CollectSummary(out=cfg.out, device=label, seconds=seconds)
    for s in summaries:
        total.skipped_existing += s.skipped_existing
        total.skipped_larger += s.skipped_larger
        total.load_problems += [p for p in s.load_problems if p not in total.load_problems]
    new = [
        r
        for r in ds.load_dataset(cfg.out, join_features=False).rows
        if r.get("device") == label and r["key"] not in before
    ]
    total.measured = len(new)
    total.oom = sum(r.get("status") == "oom" for r in new)
    total.errors = sum(r.get("status") in ("error", "crashed") for r in new)
    total.rows_total = len(before) + len(new)
    stops = sorted({s.stopped_by for s in summaries} - {"plan done"})
    total.stopped_by = ", ".join(stops) or "plan done"
    return total


def run_cluster(
    cfg: engine.CollectConfig,
    address: str | None = None,
    workers: int | None = None,
    *,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
) -> engine.CollectSummary:
    """Collect ``cfg``'s plan on a Ray cluster, ``workers`` shards in parallel; returns the merged summary.

    ``address``: "auto" or "ray://host:10001" joins a running cluster; None starts a local instance (or joins
    ``RAY_ADDRESS``). A Ray already initialised in this process is used as it is. A worker that still fails after
    ``max_restarts`` restarts raises :class:`PerfPredictError` once the others are done; its rows are kept, and
    running the same command again finishes its shard."""
    if cfg.shard_count != 1:
        raise InvalidInputError(
            f"shard {cfg.shard_index}/{cfg.shard_count} given to a Ray run, which shards the plan itself: drop --shard"
        )
    ray = _ray()
    started = not ray.is_initialized()
    if started:  # no dashboard for a local instance we start; a running cluster keeps its own settings
        ray.init(address=address, **({"include_dashboard": False} if address is None else {}))
    t0 = time.monotonic()
    actors: list[Any] = []
    try:
        count = worker_count(ray, cfg.device, workers)
        actors = _start(ray, cfg, count, max_restarts)
        label = _check(ray, actors, cfg.out)
        before = _keys(cfg.out, label)
        summaries, failed = _wait(ray, actors, cfg)
    finally:
        for actor in actors:  # at once, not when the handles are collected: each holds a GPU (or CPU) until then
            ray.kill(actor, no_restart=True)
        if started:
            ray.shutdown()
    if cfg.compact:
        engine.compact_quietly(cfg.out)
    summary = _merge(summaries, cfg, label, before, time.monotonic() - t0)
    if failed:
        which = "; ".join(f"worker {i} (shard {i}/{count}): {e}" for i, e in sorted(failed.items()))
        raise PerfPredictError(
            f"collect --ray: {len(failed)} of {count} workers failed after {max_restarts} "
            f"restarts ({which}); {summary.rows_total} rows are in {cfg.out}, theirs included: "
            "run the same command again to finish their shards"
        )
    return summary
