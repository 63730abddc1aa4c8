"""The op collector: every distinct ATen op instance of the zoo's models, timed alone, in interleaved rounds.

    perfpredict collect --ops --device cpu --out data/v3/cpu-amd-epyc-2c --budget-minutes 10

Rows go to ``OUT/ops/`` (``rows.jsonl``, ``rounds.jsonl``, ``attempts.jsonl``), keyed by the op instance
(:class:`perfpredict.profiling.op_instances.OpInstance`), so ``OpInstance.from_key(row["key"]).build(device)``
rebuilds the exact op. The plan walks the same zoo specs as the model collector (``--families``, ``--batches``,
``--dtypes``, ``--phases``, ``--archs-per-family``), records each spec's ops on the meta device, and keeps the first
instance of each distinct key, plus ``variants`` sampled shapes around it (one dimension scaled by 0.5-2x, half of
them rounded to a multiple of 8), so the set also covers shapes no zoo model has.

Timing per round: on a GPU, CUDA-graph replay of the op alone between one event pair (``device_method="cuda_graph"``,
L2 warm: the replays reuse the same buffers, ``cache_state="warm"``); where capture fails, blocked eager timing with
one sync per block (``"blocked"``). On a CPU, blocked wall time (``"wall"``). Rounds, labels and resume work as for
model rows (:mod:`perfpredict.profiling.rounds`); an op's tensors are built once per block and reused across its
rounds.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from perfpredict.core.units import GIB, MIB
from perfpredict.profiling import collect_engine as engine
from perfpredict.profiling import cpu as cpu_probe
from perfpredict.profiling import dataset as ds
from perfpredict.profiling import rounds, timing
from perfpredict.profiling.op_instances import OpInstance, spec_ops, variants
from perfpredict.progress import Progress

OPS_FOLDER = "ops"
ROUNDS_JSONL = "rounds.jsonl"
#: the largest op (bytes of its tensor arguments) the collector builds, per device kind
MAX_OP_BYTES = {"cpu": 256 * MIB, "cuda": 4 * GIB}
OP_WINDOW_S = {"cpu": 0.01, "cuda": 0.005}  # per timing sample


def op_plan(cfg: engine.CollectConfig, n_variants: int, seed: int = 0) -> Iterator[tuple[OpInstance, str, bool]]:
    """``(op, source spec key, is_variant)`` for each distinct op of the plan's specs, in plan order."""
    seen: set[str] = set()
    rng = random.Random(seed)
    max_bytes = MAX_OP_BYTES["cpu" if cfg.device == "cpu" else "cuda"]
    for spec in cfg.plan():
        try:
            found = spec_ops(spec)
        except Exception as err:  # noqa: BLE001 - a spec that will not trace on meta is skipped, not fatal
            print(f"collect --ops: {spec.family} not traced on meta ({type(err).__name__}); skipped", file=sys.stderr)
            continue
        for op in found:
            key = op.to_key()
            if key in seen or op.io_bytes() > max_bytes:
                continue
            seen.add(key)
            yield op, spec.to_key(), False
            for var in variants(op, rng, n_variants, max_bytes):
                vkey = var.to_key()
                if vkey not in seen:
                    seen.add(vkey)
                    yield var, spec.to_key(), True


def key_id(key: str) -> str:
    """A short digest of an op key: what ``attempts.jsonl`` records (op keys run to kilobytes)."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _out_bytes(result: Any) -> int:
    import torch

    if isinstance(result, torch.Tensor):
        return result.numel() * result.element_size()
    if isinstance(result, (list, tuple)):
        return sum(_out_bytes(r) for r in result)
    return 0


def time_op(call: Any, device: str) -> dict[str, Any]:
    """One round of one op: per-call milliseconds and how they were taken."""
    sync = timing.synchronizer(device)
    window = OP_WINDOW_S["cpu" if device == "cpu" else "cuda"]
    if device != "cpu":
        try:
            samples, replays, _ = timing.graph_replay_ms(call, device, min_window_ms=1e3 * window, samples=3)
            return {
                "device_samples_ms": samples,
                "device_method": "cuda_graph",
                "graph_replays": replays,
                "cache_state": "warm",
            }
        except timing.CaptureFailed as err:
            samples, steps = timing.blocked_ms(call, sync, min_window_s=window, blocks=3)
            return {
                "device_samples_ms": samples,
                "device_method": "blocked",
                "eager_block_steps": steps,
                "capture_error": str(err),
                "cache_state": "warm",
            }
    call()  # first touch of fresh buffers
    samples, steps = timing.blocked_ms(call, sync, min_window_s=window, blocks=3)
    return {"device_samples_ms": samples, "device_method": "wall", "eager_block_steps": steps, "cache_state": "warm"}


def collect_ops(
    cfg: engine.CollectConfig,
    *,
    variants: int = 2,
    ops: list[OpInstance] | None = None,
    plan: Iterable[tuple[OpInstance, str, bool]] | None = None,
    build_on_device: bool = False,
) -> engine.CollectSummary:
    """Collect op rows into ``cfg.out / "ops"`` (resumable): the ops of the zoo plan, or ``ops`` when given (a
    re-measurement of chosen rows), or ``plan``'s ``(op, source, is_variant)`` in its order (a chosen plan such as
    :func:`perfpredict.profiling.op_plan.lease_plan`, whose ``source`` labels each row's group); returns what it
    did. ``build_on_device`` draws each op's random operands on the device (:meth:`OpInstance.materialize`)."""
    import statistics

    from perfpredict.profiling.host_record import record_host_cpu
    from perfpredict.profiling.monitor import Monitor

    folder = cfg.out / OPS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    record_host_cpu(cfg.out, cfg.device)  # the dataset's record; benchmarks read an ops folder's parent's
    label = cfg.label()
    summary = engine.CollectSummary(out=folder, device=label)
    done = {r["key"] for r in ds.load_dataset(folder, join_features=False).rows if r.get("device") == label}
    stored: dict[str, list[dict[str, Any]]] = {}
    recs, _, _ = ds.read_jsonl(folder / ROUNDS_JSONL, required=("key", "device", "round"))
    for r in sorted((r for r in recs if r["device"] == label), key=lambda r: r["round"]):
        stored.setdefault(r["key"], []).append(r)
    attempts = engine.attempt_counts(folder)
    env = Monitor(cfg.device, power_sample_interval_s=None)._static_env
    policy = rounds.RoundPolicy(cfg.min_rounds, cfg.max_rounds, cfg.max_spread)
    budget = cfg.budget(folder)
    info: dict[str, tuple[OpInstance, str, bool]] = {}
    built: dict[str, Any] = {}

    def stop() -> bool:
        if budget.exhausted():
            summary.stopped_by = "budget"
            return True
        if cfg.max_rows is not None and len(done) >= cfg.max_rows:
            summary.stopped_by = "max_rows"
            return True
        return False

    with (
        # the plan is a generator (its length unknown until drawn): a count and a rate, no bar
        Progress("collect --ops", enabled=cfg.progress, unit="op rows", budget_s=budget.budget_s) as bar,
        ds.JsonlAppender(folder / ds.ROWS_JSONL) as rows_out,
        ds.JsonlAppender(folder / ROUNDS_JSONL) as rounds_out,
        ds.JsonlAppender(folder / ds.ATTEMPTS_JSONL) as attempts_out,
    ):

        def measure(key: str, records: list[dict[str, Any]]) -> dict[str, Any]:
            op, index = info[key][0], len(records)
            rec: dict[str, Any] = {"key": key, "device": label, "round": index, "at": time.time(), "status": "ok"}
            kid = key_id(key)
            if attempts.get(kid, 0) - index >= 2:
                rec.update(status="crashed", error="the process died twice timing this op")
                rounds_out.append(rec)
                return rec
            attempts_out.append({"key": kid, "device": label, "round": index})
            attempts[kid] = attempts.get(kid, 0) + 1
            try:
                if key not in built:
                    built[key] = op.build(cfg.device, on_device=build_on_device)
                    if not any(r.get("out_bytes") is not None for r in records):
                        rec["out_bytes"] = _out_bytes(built[key]())
                        rec["flops"] = engine.torch_flops(built[key])
                rec.update(time_op(built[key], cfg.device))
                rec["device_ms"] = statistics.median(rec["device_samples_ms"])
            except Exception as err:  # noqa: BLE001 - failures are data
                rec.update(engine.failure(err))
            rec["load_avg_1m"] = cpu_probe.load_avg_1m()
            rounds_out.append(rec)
            return rec

        def finish(key: str, records: list[dict[str, Any]]) -> None:
            built.pop(key, None)
            op, source, is_variant = info[key]
            rows_out.append(op_row(op, records, label, cfg.device, source, is_variant, env, policy))
            done.add(key)
            summary.measured += 1
            summary.errors += records[-1].get("status") != "ok"
            bar.advance()

        chunk: list[str] = []
        finished = True
        if plan is None:
            plan = op_plan(cfg, variants, seed=cfg.seed) if ops is None else ((op, "", False) for op in ops)
        for op, source, is_variant in plan:
            key = op.to_key()
            if key in done:
                summary.skipped_existing += 1
                continue
            info[key] = (op, source, is_variant)
            chunk.append(key)
            if len(chunk) >= cfg.round_block:
                finished = rounds.interleave(chunk, stored, measure, finish, policy, block=len(chunk), stop=stop)
                chunk = []
                built.clear()
                if not finished:
                    break
        if chunk and finished:
            rounds.interleave(chunk, stored, measure, finish, policy, block=len(chunk), stop=stop)
    summary.seconds = budget.elapsed_s()
    summary.rows_total = len(done)
    if cfg.compact:
        engine.compact_quietly(folder)
    return summary


def op_row(
    op: OpInstance,
    records: list[dict[str, Any]],
    label: str,
    device: str,
    source: str,
    is_variant: bool,
    env: dict[str, Any],
    policy: rounds.RoundPolicy,
) -> dict[str, Any]:
    """The dataset row of one op: the median of its round medians, the spread, and what rebuilds it."""
    from perfpredict.profiling.protocol_v3 import PROTOCOL_VERSION

    ok = [r for r in records if r.get("status") == "ok"]
    row: dict[str, Any] = {
        "schema_version": ds.DATASET_SCHEMA_VERSION,
        "protocol_version": PROTOCOL_VERSION,
        "row_kind": "op",
        "key": op.to_key(),
        "device": label,
        "device_type": "cpu" if device == "cpu" else "cuda",
        "op": op.overload,
        "kind": op.kind,
        "dtype": op.dtype(),
        "in_bytes": op.io_bytes(),
        "source_key": source,
        "variant": is_variant,
        "rounds": len(records),
        "protocol_min_rounds": policy.min_rounds,
        "protocol_max_spread": policy.max_spread,
        "env_device_name": env.get("device_name"),
        "env_torch_version": env.get("torch_version"),
        "env_cpu_model": env.get("cpu_model"),
        "env_torch_threads": env.get("torch_threads"),
    }
    if not ok or len(ok) < len(records):
        bad = next(r for r in reversed(records) if r.get("status") != "ok")
        row.update(status=bad.get("status"), error=bad.get("error"))
        return row
    lab = rounds.label([r["device_ms"] for r in ok])
    row.update(
        status="ok",
        error=None,
        device_ms=lab.value,
        device_ms_round_spread=lab.spread,
        device_ms_rounds=list(lab.round_medians),
        device_method=ok[0].get("device_method"),
        cache_state=ok[0].get("cache_state"),
        capture_error=ok[0].get("capture_error"),
        flops=next((r["flops"] for r in ok if r.get("flops") is not None), None),
        out_bytes=next((r["out_bytes"] for r in ok if r.get("out_bytes") is not None), None),
        load_avg_1m=ok[-1].get("load_avg_1m"),
        remeasured=len(ok) > policy.min_rounds,
    )
    return row
