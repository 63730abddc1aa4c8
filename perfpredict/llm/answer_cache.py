"""An on-disk cache of generation answers, so that a repeated ``perfpredict generate`` question answers in about a
second, as a repeated ``predict`` does (``graph_store``).

``predict`` caches its captured graph and predicts from it in milliseconds. A generation answer is many
predictions (the prefill, a few decode steps with every mode's timeline, a batch sweep at two kernels) that together
take seconds, and reading a config through transformers costs seconds more. So the whole answer is cached, keyed by
everything that decides it:

- the question: the config's fields (read without transformers), every option asked;
- the device as the catalog (and any user device file or measured ceilings) has it now;
- the host asked for (``host=``, ``--host``) and its profile's contents; without one, the profile in use now (a new
  ``calibrate-host`` misses the cache);
- a digest of perfpredict's own files (code, shipped data, trained artifacts) and the torch and transformers
  versions: an edited predictor never reads a stale answer.

Entries are gzipped JSON (``GenerationReport.to_dict``) in the same storage as the graph cache
(``disk_store.DiskStore``: atomic, size-limited), in ``answer-store`` next to it; a damaged one is ignored and
rewritten.
``PERFPREDICT_NO_GRAPH_CACHE=1`` turns both caches off; ``generate --no-cache`` answers again and refreshes it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfpredict.caching.disk_store import DiskStore
from perfpredict.llm.generation_report import BatchPoint, DecodePoint, GenerationReport

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

_PACKAGE = Path(__file__).resolve().parents[1]
# NB: an answer is a few kB gzipped; this holds tens of thousands
STORE = DiskStore("answer-store", 256 * 2**20)


@functools.lru_cache(maxsize=1)
def package_digest() -> str:
    """A digest of every file of the installed perfpredict (code, shipped data, artifacts), read once per process."""
    from perfpredict.caching import graph_store

    h = hashlib.sha256(graph_store.code_digest().encode())  # the capture code and the tracing libraries' versions
    for f in sorted(p for p in _PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(f.relative_to(_PACKAGE)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def key(source: Any, generation: Any = None, **options: Any) -> str | None:
    """The cache key of generating from ``source`` (a shipped id, alias or config path) as ``generation`` (a
    ``generation_options.Generation``, every option with its default where it was left out; or its fields as
    keywords) asks; None where the source is an object (a config or model built in Python), never cached."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    from perfpredict.llm.generation_options import Generation

    generation = generation.but(**options) if generation is not None else Generation.of(**options)
    from perfpredict.compiler_hooks.hf_frontend import raw_config
    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors import host_model

    fields, name = raw_config(source)
    dev = get_device(generation.device)
    parts = {
        "code": package_digest(),
        "config": fields,
        "name": name,
        "device": dev,
        "host": host_model.load_profile(host=generation.host, kind=dev.kind),  # the one asked, else the default now
        "question": generation,
    }
    text = json.dumps(canonical(parts), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def canonical(value: Any) -> Any:
    """``value`` as JSON that is the same in every process: dataclasses and mappings as dicts, sets sorted (a
    frozenset's order follows the string hash seed, which changes per process), anything else by its repr."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return repr(value)


def load(cache_key: str | None) -> GenerationReport | None:
    from perfpredict.caching import graph_store

    if cache_key is None or not graph_store.enabled():
        return None
    data = STORE.get_json(cache_key)
    if data is None:
        return None
    try:
        return report_from_dict(data)
    except (ValueError, KeyError, TypeError) as err:
        logger.warning("perfpredict: ignoring a damaged generation cache entry %s (%s)", cache_key, err)
        return None


def save(cache_key: str | None, report: GenerationReport) -> None:
    """Store ``report``; a cache that cannot be written is skipped, never an error."""
    from perfpredict.caching import graph_store

    if cache_key is None or not graph_store.enabled():
        return
    STORE.put_json(cache_key, report.to_dict())


def report_from_dict(data: dict[str, Any]) -> GenerationReport:
    """The GenerationReport that ``to_dict`` wrote."""
    names = {f.name for f in dataclasses.fields(GenerationReport)}
    fields = {k: v for k, v in data.items() if k in names}
    fields["decode_points"] = tuple(DecodePoint(**p) for p in data["decode_points"])
    fields["batch_sweep"] = tuple(BatchPoint(**p) for p in data["batch_sweep"])
    fields["warnings"] = tuple(data.get("warnings", ()))
    fields["notes"] = tuple(data.get("notes", ()))
    return GenerationReport(**fields)


def cached_generation(
    source: Any, generation: Any = None, *, use_cache: bool = True, **options: Any
) -> GenerationReport:
    """``predict_generation(source, generation, **options)``, answered from the cache where the same question was
    answered under the same code, device and host profile."""
    from perfpredict.llm.generation_options import Generation

    g = generation.but(**options) if generation is not None else Generation.of(**options)
    cache_key = key(source, g)
    report = load(cache_key) if use_cache else None
    if report is None:
        from perfpredict.llm.generation import predict_generation

        report = predict_generation(source, g)
        save(cache_key, report)
    return report
