"""The one on-disk cache of captured OpGraphs, so that a repeated question answers in well under a second and a
second training run traces nothing.

Capturing a HuggingFace model costs seconds (importing transformers, building the model on the meta device,
dynamo's trace); predicting from the captured graph costs milliseconds. Each capture is keyed by everything that
decides the graph (``key(**parts)``: for the CLI the config's fields, batch, sequence length, phase and dtype; for
the training data the zoo spec's key) plus a digest of perfpredict's own capture code (the frontends, the op
vocabulary, the model zoo's builders) and the versions of torch and transformers: an edited frontend never reads a
stale graph, and no version number is bumped by hand. Entries are gzipped JSON (``graph_to_dict``) in a
size-limited ``disk_store.DiskStore`` (atomic under concurrent writers); a damaged one is ignored and rewritten.

Where: ``graph-store`` under ``disk_store.cache_root()`` (``$PERFPREDICT_CACHE_DIR``, else
``$XDG_CACHE_HOME/perfpredict``, else ``~/.cache/perfpredict``). ``PERFPREDICT_NO_GRAPH_CACHE=1`` turns it off
for the CLI, the web page and generation (``load``/``save``); the CLI's ``--no-cache`` captures again and
refreshes the entry. The training data's traces (``training_data.GraphCache``) always use it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from importlib import metadata
from pathlib import Path
from typing import Any

from perfpredict.caching.disk_store import DiskStore
from perfpredict.core.graph import OpGraph, graph_from_dict, graph_to_dict
from perfpredict.core.units import GIB

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

_PACKAGE = Path(__file__).resolve().parents[1]
# the code that turns a model into an OpGraph: a change to any of it must miss the cache (globs: the zoo's builders
# decide the training data's graphs, however its files are split)
_CAPTURE_CODE = (
    "core/graph.py",
    "core/ops.py",
    "core/op_kinds",
    "api.py",
    "compiler_hooks",
    "data/hf_configs/index.json",
    "llm/decode_trace.py",
    "learning/training_data.py",  # how a zoo spec is traced for the training data (_trace)
    "profiling/zoo*",
)
# NB: a training set's traces take about 20 MB today; the limit leaves room for a few code versions' worth
SIZE_LIMIT_BYTES = 2 * GIB
STORE = DiskStore("graph-store", SIZE_LIMIT_BYTES)


def enabled() -> bool:
    from perfpredict.settings import settings

    return settings().graph_cache


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of perfpredict's capture code and the libraries that trace (read once per process)."""
    h = hashlib.sha256()
    for pattern in _CAPTURE_CODE:
        for path in sorted(_PACKAGE.glob(pattern)):
            for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:  # code, and the shipped configs' index
                h.update(f.name.encode())
                h.update(f.read_bytes())
    for lib in ("torch", "transformers"):
        try:
            h.update(f"{lib}={metadata.version(lib)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=none".encode())
    return h.hexdigest()[:16]


def key(**parts: Any) -> str:
    """The cache key of a capture described by ``parts`` (JSON-serialisable), under today's code."""
    text = json.dumps({"code": code_digest(), **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def read(cache_key: str, store: DiskStore = STORE) -> OpGraph | None:
    """The graph stored under ``cache_key``, whatever ``enabled()`` says (the training data's door)."""
    data = store.get_json(cache_key)
    if data is None:
        return None
    try:
        return graph_from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        logger.warning("perfpredict: ignoring a damaged graph cache entry %s (%s)", cache_key, err)
        return None


def write(cache_key: str, graph: OpGraph, store: DiskStore = STORE) -> None:
    """Store ``graph``, whatever ``enabled()`` says; a cache that cannot be written is skipped, never an error."""
    store.put_json(cache_key, graph_to_dict(graph))


def load(cache_key: str) -> OpGraph | None:
    """The cached graph for the CLI, the web page and generation; None when the cache is off."""
    return read(cache_key) if enabled() else None


def save(cache_key: str, graph: OpGraph) -> None:
    if enabled():
        write(cache_key, graph)
