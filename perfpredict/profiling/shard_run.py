"""Running one shard of a collection plan (:mod:`perfpredict.profiling.shards`) as its part folder's one writer.

``perfpredict collect --shard I/N`` (a SLURM array task) and each Ray worker (:mod:`.cluster`) run
:func:`run_shard`; without a shard it is the plain protocol-2/3 dispatch.
"""

from __future__ import annotations

import math
from dataclasses import replace

from perfpredict.profiling import dataset as ds
from perfpredict.profiling import parts
from perfpredict.profiling.collect_engine import CollectConfig, CollectSummary


def shard_max_rows(cfg: CollectConfig, label: str) -> int | None:
    """``max_rows`` (rows in the whole folder) as this shard's cap: the rows already there plus a 1/N share of the
    rest, so N workers stop near the total instead of each adding up to it."""
    if cfg.max_rows is None or cfg.shard_count == 1:
        return cfg.max_rows
    have = sum(r.get("device") == label for r in ds.load_dataset(cfg.out, join_features=False).rows)
    return have + math.ceil(max(0, cfg.max_rows - have) / cfg.shard_count)


def collect_plan(cfg: CollectConfig) -> CollectSummary:
    """Collect ``cfg.plan()`` with ``cfg``'s protocol (3: interleaved rounds; 2: one window per row)."""
    if cfg.protocol_version == 2:
        from perfpredict.profiling.collect_v2 import collect

        return collect(cfg)
    from perfpredict.profiling.collect_v3 import collect_rounds
    from perfpredict.profiling.rounds import RoundPolicy

    return collect_rounds(cfg, RoundPolicy(cfg.min_rounds, cfg.max_rounds, cfg.max_spread), cfg.round_block)


def run_shard(cfg: CollectConfig) -> CollectSummary:
    """Collect ``cfg``'s shard into its part folder, as its one writer (what ``--shard I/N`` and a Ray worker run).

    Waits for the part's writer lock first (a predecessor on the same shard may still be finishing), then reads
    the whole folder to resume: rows, rounds and attempts of every part count."""
    if cfg.shard_count == 1:
        return collect_plan(cfg)
    with parts.writer(cfg.write_dir()):
        return collect_plan(replace(cfg, max_rows=shard_max_rows(cfg, cfg.label())))
