"""The protocol-2 collector: each zoo spec measured in one synced window, resumably, into ``data/<device-slug>/``.

    perfpredict collect --protocol 2 --device cpu --budget-minutes 2 --out data/cpu-amd-epyc-2c/

- **Order**: a round-robin over families, each family architecture by architecture, batch-major (see
  :func:`perfpredict.profiling.zoo.sample_specs`), so a short budget spans every family and both phases.
- **One row, one window**: build, warm up and time the step with :class:`perfpredict.profiling.monitor.Monitor`
  (synced after every step); larger batches are skipped after a row slower than ``max_latency_ms``.
- Resume, crash safety, failures as rows, the budget, pausing and shards are the engine's
  (:mod:`perfpredict.profiling.collect_engine`), shared with the v3, ops and cluster collectors.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from perfpredict.profiling import dataset as ds
from perfpredict.profiling import zoo
from perfpredict.profiling.collect_engine import (
    CollectConfig,
    CollectSummary,
    Skips,
    TooSlow,
    attempt_counts,
    base_row,
    compact_quietly,
    failure,
    guarded,
    release,
    torch_flops,
    utc_now,
)
from perfpredict.profiling.graph_features import GraphFeatureCache
from perfpredict.profiling.sentinel import Sentinel
from perfpredict.progress import Progress

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())


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


def collect(cfg: CollectConfig) -> CollectSummary:
    """Run one collection (see the module docstring); returns what it did."""
    import torch

    from perfpredict.profiling.monitor import Monitor

    cfg.write_dir().mkdir(parents=True, exist_ok=True)
    label = cfg.label()
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
    budget = cfg.budget()
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
        "started_at": utc_now(),
    }
    (cfg.write_dir() / "collector.json").write_text(json.dumps(meta, indent=2) + "\n")
    # every_s=0: a reading next to each row; slow spells of a shared host last seconds (sentinel.py)
    sentinel = Sentinel(cfg.device, every_s=0.0) if cfg.sentinel else None
    try:
        with (
            Progress("collect", len(plan), enabled=cfg.progress, budget_s=budget.budget_s) as bar,
            ds.JsonlAppender(cfg.write_dir() / ds.ROWS_JSONL) as rows_out,
            ds.JsonlAppender(cfg.write_dir() / ds.ATTEMPTS_JSONL) as attempts_out,
        ):
            for spec in plan:
                if budget.exhausted():
                    summary.stopped_by = "budget"
                    break
                if cfg.max_rows is not None and rows_total >= cfg.max_rows:
                    summary.stopped_by = "max_rows"
                    break
                key = spec.to_key()
                if key in done:
                    summary.skipped_existing += 1
                    bar.advance(counted=False, note="skip")
                    continue
                if skips.skip(spec):
                    summary.skipped_larger += 1
                    bar.advance(counted=False, note="skip")
                    continue
                if attempts.get(key, 0) >= 2:
                    row = base_row(spec, label, cfg.device)
                    row.update(status="crashed", error=f"the process died {attempts[key]} times on this config")
                else:
                    attempts_out.append({"key": key, "device": label, "at": utc_now()})
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
                bar.advance(note=row["status"])
    finally:
        summary.seconds = budget.elapsed_s()
        summary.rows_total = rows_total
    if cfg.compact:
        compact_quietly(cfg.out)
    return summary
