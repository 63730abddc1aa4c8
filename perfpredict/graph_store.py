"""A persistent on-disk cache of captured OpGraphs, so that a repeated CLI question answers in well under a second.

Capturing a HuggingFace model costs seconds (importing transformers, building the model on the meta device,
dynamo's trace); predicting from the captured graph costs milliseconds. The CLI keys each capture by everything
that decides the graph: the config's fields, batch, sequence length, phase and dtype, the versions of torch and
transformers, and a digest of perfpredict's own capture code (so an edited frontend never reads a stale graph).
Entries are gzipped JSON (``graph_to_dict``), written atomically; a damaged one is ignored and rewritten.

Where: ``$PERFPREDICT_CACHE_DIR/cli-graphs``, else ``$XDG_CACHE_HOME/perfpredict/cli-graphs``, else
``~/.cache/perfpredict/cli-graphs``. ``PERFPREDICT_NO_GRAPH_CACHE=1`` turns it off; the CLI's ``--no-cache``
captures again and refreshes the entry.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import logging
import os
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from perfpredict.core.graph import OpGraph, graph_from_dict, graph_to_dict

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

_PACKAGE = Path(__file__).resolve().parent
# the code that turns a model into an OpGraph: a change to any of it must miss the cache
_CAPTURE_CODE = (
    "core/graph.py",
    "core/ops.py",
    "api.py",
    "compiler_hooks",
    "data/hf_configs/index.json",
    "llm/decode_trace.py",
)


def store_dir() -> Path:
    from perfpredict.settings import settings

    env = settings()
    return (env.cache_dir or env.user_cache_dir) / "cli-graphs"


def enabled() -> bool:
    from perfpredict.settings import settings

    return settings().graph_cache


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of perfpredict's capture code and the libraries that trace (read once per process)."""
    h = hashlib.sha256()
    for name in _CAPTURE_CODE:
        path = _PACKAGE / name
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


def load(cache_key: str) -> OpGraph | None:
    if not enabled():
        return None
    path = store_dir() / f"{cache_key}.json.gz"
    if not path.exists():
        return None
    try:
        return graph_from_dict(json.loads(gzip.decompress(path.read_bytes())))
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError) as err:
        logger.warning("perfpredict: ignoring a damaged graph cache entry %s (%s)", path, err)
        return None


def save(cache_key: str, graph: OpGraph) -> None:
    """Store ``graph``; a cache that cannot be written (read-only home, full disk) is skipped, never an error."""
    if not enabled():
        return
    path = store_dir() / f"{cache_key}.json.gz"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")  # the web page's threads too
        tmp.write_bytes(gzip.compress(json.dumps(graph_to_dict(graph)).encode(), compresslevel=3))
        tmp.replace(path)
    except OSError as err:
        logger.warning("perfpredict: could not write the graph cache %s (%s)", path, err)
