"""The model-row collector under protocol v3: rounds interleaved across a block of rows, device and host apart.

    perfpredict collect --device cpu --out data/v3/cpu-amd-epyc-2c --budget-minutes 20

Per block of ``round_block`` specs, every spec gets one round (:func:`protocol_v3.measure_round`: built afresh,
warmed up, timed), then the next round, and so on: a row's rounds are as far apart as the block takes to go round,
and a slow spell of the host lands on one round of many rows, not on all rounds of one. Each round is appended to
``rounds.jsonl`` (fsynced, raw samples kept) before the next starts; after ``min_rounds`` a row whose round spread on
``device_ms`` is above ``max_spread`` gets another round, up to ``max_rounds``; then its row (the median of the round
medians per timing, and each timing's spread) goes to ``rows.jsonl``. A killed collector resumes from the rounds it
stored. Everything else (resume, OOM and too-slow skips, the budget, pause, crash accounting) is the collectors'
shared engine (:mod:`perfpredict.profiling.collect_engine`).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from perfpredict.profiling import collect_engine as engine
from perfpredict.profiling import dataset as ds
from perfpredict.profiling import protocol_v3, rounds, zoo
from perfpredict.profiling.graph_features import GraphFeatureCache
from perfpredict.profiling.host_record import record_host_cpu
from perfpredict.profiling.measurement import MEASUREMENT_SCHEMA_VERSION
from perfpredict.progress import Progress

ROUNDS_JSONL = "rounds.jsonl"
TIMINGS = ("device_ms", "eager_ms", "eager_sync_ms", "host_dispatch_ms")


def round_settings(cfg: engine.CollectConfig) -> protocol_v3.RoundSettings:
    """The round's windows from the collector's options: ``min_seconds`` is one round's timed time, a third synced
    steps and two thirds blocked (three samples)."""
    return protocol_v3.RoundSettings(
        warmup_min=cfg.warmup_min,
        warmup_max_s=cfg.warmup_max_s,
        sync_seconds=cfg.min_seconds / 3,
        sync_floor_runs=cfg.floor_runs,
        blocked_window_s=2 * cfg.min_seconds / 9,
    )


def load_rounds(folder: Any, device_label: str) -> dict[str, list[dict[str, Any]]]:
    """The stored rounds of ``device_label``, per key, in order (a torn last line is dropped by read_jsonl)."""
    recs, _, _ = ds.read_jsonl_all(folder, ROUNDS_JSONL, required=("key", "device", "round"))  # every shard's
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted((r for r in recs if r["device"] == device_label), key=lambda r: r["round"]):
        out.setdefault(r["key"], []).append(r)
    return out


def measure_one_round(
    spec: zoo.ModelSpec,
    index: int,
    records: list[dict[str, Any]],
    monitor: Any,
    energy_monitor: Any,
    cfg: engine.CollectConfig,
    policy: rounds.RoundPolicy,
    label: str,
) -> dict[str, Any]:
    """Build ``spec`` and take round ``index``; the round's record whatever happens (ok, oom, too_slow, error)."""
    rec: dict[str, Any] = {"key": spec.to_key(), "device": label, "round": index, "at": time.time(), "status": "ok"}
    model = step = x = labels = None
    monitor.begin_window("collect")
    try:
        model = spec.build(cfg.device)
        x, labels = spec.inputs(cfg.device)
        monitor.end_build("collect")
        step = zoo.make_step(model, x, labels, spec.phase, capturable=cfg.device != "cpu")
        if index == 0 or not any(r.get("param_count") for r in records):
            rec["param_count"] = sum(p.numel() for p in model.parameters())
            rec["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
            t0 = time.perf_counter()
            rec["torch_flops"] = engine.torch_flops(step)  # also the first (cold) call
            rec["probe_latency_ms"] = (time.perf_counter() - t0) * 1e3
        limit_ms = None if cfg.max_latency_ms is None else cfg.too_slow_factor * cfg.max_latency_ms
        if limit_ms is not None:
            step = engine.guarded(step, limit_ms)
        profiled = any(r.get("aten_op_count") is not None for r in records)
        m, replay = protocol_v3.measure_round(
            monitor, step, name="collect", batch_size=spec.batch, settings=round_settings(cfg), profile=not profiled
        )
        mrow = m.to_row(with_samples=True)
        mrow["torch_device"] = mrow.pop("device")
        mrow["measurement_schema_version"] = mrow.pop("schema_version")
        mrow.pop("name", None)
        rec.update(mrow)
        if energy_monitor is not None and not policy.wants_more([*records, rec]):
            rec.update(
                protocol_v3.energy_window(
                    energy_monitor,
                    replay.replay if replay else step,
                    batch_size=spec.batch,
                    min_s=protocol_v3.RoundSettings.energy_min_s,
                )
            )
    except Exception as err:  # noqa: BLE001 - failures are data
        monitor.abort_window("collect")
        rec.update(engine.failure(err))
    finally:
        del model, step, x, labels
        engine.release(cfg.device)
    return rec


def row_from_rounds(
    spec: zoo.ModelSpec,
    records: list[dict[str, Any]],
    cfg: engine.CollectConfig,
    label: str,
    policy: rounds.RoundPolicy,
) -> dict[str, Any]:
    """The dataset row of a spec: labels are the medians of the round medians; spreads and round medians kept."""
    row = engine.base_row(spec, label, cfg.device)
    row.update(
        zoo_profile=cfg.profile,
        protocol_version=protocol_v3.PROTOCOL_VERSION,
        measurement_schema_version=MEASUREMENT_SCHEMA_VERSION,
        rounds=len(records),
    )
    row.update({f"protocol_{k}": v for k, v in cfg.protocol().items()})
    row.update(
        protocol_min_rounds=policy.min_rounds,
        protocol_max_rounds=policy.max_rounds,
        protocol_max_spread=policy.max_spread,
    )
    ok = [r for r in records if r.get("status") == "ok"]
    if len(ok) < len(records):  # a failed round (the last one: it ends the row) makes the row a failure
        bad = next(r for r in reversed(records) if r.get("status") != "ok")
        row.update(status=bad.get("status", "error"), error=bad.get("error"))
        return row
    first, last = ok[0], ok[-1]
    for k in ("param_count", "param_bytes", "torch_flops", "probe_latency_ms"):
        row[k] = next((r[k] for r in ok if r.get(k) is not None), None)
    for metric in TIMINGS:
        values = [r[metric] for r in ok if r.get(metric) is not None]
        lab = rounds.label(values) if values else None  # host_dispatch_ms: None on a CPU, never a guess
        row.update(
            {
                metric: lab and lab.value,
                f"{metric}_round_spread": lab and lab.spread,
                f"{metric}_rounds": list(values) if values else None,
            }
        )
    eager_all = [v for r in ok for v in r.get("eager_samples_ms") or ()]
    medians = row["eager_ms_rounds"]
    row.update(
        latency_ms=row["eager_ms"],
        latency_min_ms=min(eager_all),
        latency_max_ms=max(eager_all),
        latency_mean_ms=statistics.fmean(eager_all),
        latency_std_ms=statistics.pstdev(eager_all),
        latency_cv=(statistics.pstdev(medians) / statistics.fmean(medians)) if len(medians) > 1 else None,
        throughput_per_s=spec.batch / (row["eager_ms"] / 1e3),
    )
    methods = {r.get("device_method") for r in ok}
    row["device_method"] = methods.pop() if len(methods) == 1 else "mixed"
    for k in ("kernel_count", "aten_op_count", "kernel_sum_ms", "device_busy_ms", "capture_error", "op_times_json"):
        row[k] = next((r[k] for r in ok if r.get(k) is not None), None)
    peaks = [r["peak_memory_bytes"] for r in ok if r.get("peak_memory_bytes") is not None]
    row["peak_memory_bytes"] = int(statistics.median(peaks)) if peaks else None
    for k in (
        "memory_method",
        "build_peak_memory_bytes",
        "step_peak_memory_bytes",
        "torch_max_allocated_bytes",
        "torch_max_reserved_bytes",
        "nvml_used_bytes",
        "rss_begin_bytes",
        "rss_peak_bytes",
        "runs",
        "warmup_runs",
        "warmup_stable",
        "timer",
        "window_s",
        "torch_device",
        "warnings",
    ):
        row[k] = first.get(k)
    for k in (
        "energy_j",
        "avg_power_w",
        "energy_method",
        "energy_window_s",
        "sampled_avg_power_w",
        "power_samples",
        "energy_runs",
    ):
        row[k] = last.get(k)
    row.update({k: v for k, v in last.items() if k.startswith("env_")})
    gaps = [b["at"] - a["at"] for a, b in zip(ok, ok[1:])]
    row["round_gap_s"] = round(statistics.median(gaps), 1) if gaps else None
    row["remeasured"] = len(ok) > policy.min_rounds
    row.update(status="ok", error=None)
    return row


def collect_rounds(
    cfg: engine.CollectConfig, policy: rounds.RoundPolicy, block: int, specs: list[zoo.ModelSpec] | None = None
) -> engine.CollectSummary:
    """Run one protocol-v3 collection (see the module docstring) of ``cfg.plan()``, or of ``specs`` when given
    (a re-measurement of chosen rows); returns what it did."""
    from perfpredict.profiling.monitor import Monitor
    from perfpredict.profiling.sentinel import Sentinel

    cfg.write_dir().mkdir(parents=True, exist_ok=True)
    label = cfg.label()
    summary = engine.CollectSummary(out=cfg.out, device=label)
    loaded = ds.load_dataset(cfg.out, join_features=False)
    summary.load_problems = loaded.problems
    done = {r["key"] for r in loaded.rows if r.get("device") == label}
    skips = engine.Skips(cfg.max_latency_ms)
    for r in loaded.rows:
        if r.get("device") == label:
            skips.note(r)
    stored = load_rounds(cfg.out, label)
    attempts = engine.attempt_counts(cfg.out)
    specs = {s.to_key(): s for s in (cfg.plan() if specs is None else specs)}
    keys = [k for k in specs if k not in done]
    summary.skipped_existing = len(specs) - len(keys)
    if cfg.max_rows is not None:  # rows finish a block at a time: plan only as many as are still wanted
        keys = keys[: max(0, cfg.max_rows - len(done))]
    monitor = Monitor(cfg.device, power_sample_interval_s=None)  # no sampling thread while latency is timed
    energy_monitor = Monitor(cfg.device, power_sample_interval_s=cfg.power_sample_interval_s or None)
    energy_monitor = energy_monitor if energy_monitor.energy_readable else None
    features = GraphFeatureCache() if cfg.graph_features == "inline" else None
    sentinel = Sentinel(cfg.device, every_s=0.0)  # protocol v3 always reads the host sentinel beside each round
    meta = {
        "device": label,
        "torch_device": cfg.device,
        "protocol_version": protocol_v3.PROTOCOL_VERSION,
        "cpu_model": monitor._static_env["cpu_model"],
        "device_name": monitor._static_env["device_name"],
        "protocol": cfg.protocol(),
        "rounds": {"min": policy.min_rounds, "max": policy.max_rounds, "max_spread": policy.max_spread, "block": block},
        "profile": cfg.profile,
        "seed": cfg.seed,
        "sentinel": True,
        "started_at": engine.utc_now(),
    }
    (cfg.write_dir() / "collector.json").write_text(json.dumps(meta, indent=2) + "\n")
    record_host_cpu(cfg.out, cfg.device)
    budget = cfg.budget()

    def stop() -> bool:
        if budget.exhausted():
            summary.stopped_by = "budget"
            return True
        return False

    with (
        Progress("collect v3", len(keys), enabled=cfg.progress, budget_s=budget.budget_s) as bar,
        ds.JsonlAppender(cfg.write_dir() / ds.ROWS_JSONL) as rows_out,
        ds.JsonlAppender(cfg.write_dir() / ROUNDS_JSONL) as rounds_out,
        ds.JsonlAppender(cfg.write_dir() / ds.ATTEMPTS_JSONL) as attempts_out,
    ):

        def measure(key: str, records: list[dict[str, Any]]) -> dict[str, Any]:
            spec, index = specs[key], len(records)
            if skips.skip(spec):
                return {"key": key, "device": label, "round": index, "status": "skipped"}
            if attempts.get(key, 0) - index >= 2:
                rec = {"status": "crashed", "error": f"the process died {attempts[key] - index} times in a round"}
            else:
                attempts_out.append({"key": key, "device": label, "round": index, "at": engine.utc_now()})
                attempts[key] = attempts.get(key, 0) + 1
                reading = sentinel.reading()
                rec = {
                    **measure_one_round(spec, index, records, monitor, energy_monitor, cfg, policy, label),
                    **reading,
                }
            rec.update(key=key, device=label, round=index)
            rounds_out.append(rec)
            skips.note({**rec, "batch_size": spec.batch})  # at once: larger batches of the block are next
            return rec

        def finish(key: str, records: list[dict[str, Any]]) -> None:
            if records and records[-1].get("status") == "skipped":
                summary.skipped_larger += 1
                bar.advance(counted=False, note="skip")
                return
            row = row_from_rounds(specs[key], records, cfg, label, policy)
            if features is not None and row["status"] == "ok":
                row.update(features.features(specs[key]))
            elif cfg.graph_features == "deferred":
                row["graph_features_method"] = "deferred"
            rows_out.append(row)
            done.add(key)
            skips.note(row)
            summary.measured += 1
            summary.oom += row["status"] == "oom"
            summary.errors += row["status"] in ("error", "crashed")
            bar.advance(note=row["status"])

        rounds.interleave(keys, stored, measure, finish, policy, block=block, stop=stop)
    if cfg.max_rows is not None and len(done) >= cfg.max_rows and summary.stopped_by == "plan done":
        summary.stopped_by = "max_rows"
    summary.seconds = budget.elapsed_s()
    summary.rows_total = len(done)
    if cfg.compact:
        engine.compact_quietly(cfg.out)
    return summary
