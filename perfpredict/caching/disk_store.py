"""The storage under perfpredict's on-disk caches: gzipped JSON entries by key, in a size-limited ``diskcache``.

Two caches stand on it: captured graphs (``graph_store``: the CLI, the web page, generation's traces and the
training data's traces) and whole generation answers (``llm/answer_cache.py``). Each decides its keys (a digest of
the code that made the entry, so an edited frontend or predictor never reads a stale one); this module only keeps
the bytes.

Why ``diskcache`` (SQLite plus files): writes are atomic and safe under concurrency (several processes or the web
page's threads writing the same key leave one whole entry), and the store is culled to ``size_limit_bytes``
(oldest stored first) instead of growing without bound. Keys are strings and values bytes, which diskcache keeps
raw: nothing is pickled.

Where: ``$PERFPREDICT_CACHE_DIR/<name>``, else ``$XDG_CACHE_HOME/perfpredict/<name>``, else
``~/.cache/perfpredict/<name>``. A cache that cannot be opened, read or written (a read-only home, a full disk) is
skipped with a warning, never an error; a damaged entry reads as missing and is rewritten.
"""

from __future__ import annotations

import gzip
import json
import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

# NB: entries are gzipped JSON at level 3: a graph of a 7B model's decode step is about 100 kB
_COMPRESS_LEVEL = 3
# diskcache's own errors are sqlite3's (a locked or read-only database) and the OS's (the value files)
_STORE_ERRORS = (OSError, sqlite3.Error)


def _store_errors() -> tuple[type[BaseException], ...]:
    """What a cache that cannot be used raises: the OS's and sqlite3's errors, and diskcache's Timeout (a writer
    that held the database's lock past sqlite's timeout), which is a plain Exception."""
    from diskcache import Timeout

    return (*_STORE_ERRORS, Timeout)


def cache_root() -> Path:
    """The folder that holds every perfpredict cache (and the GNN+LLM stage-1 states next to them)."""
    from perfpredict.settings import settings

    env = settings()
    return env.cache_dir or env.user_cache_dir


class DiskStore:
    """gzipped-JSON entries by key under ``cache_root() / name``, at most ``size_limit_bytes`` on disk.

    The folder is resolved on each call (the environment decides it), and its diskcache opened once per folder
    and process: opening costs a few milliseconds, a read well under one.
    """

    _open: dict[Path, Any] = {}
    _lock = threading.Lock()

    def __init__(self, name: str, size_limit_bytes: int, root: Path | None = None) -> None:
        self.name = name
        self.size_limit_bytes = size_limit_bytes
        self.root = Path(root) if root is not None else None

    def directory(self) -> Path:
        return self.root if self.root is not None else cache_root() / self.name

    def _cache(self) -> Any:
        import diskcache

        folder = self.directory()
        with self._lock:
            cache = self._open.get(folder)
            if cache is None:
                cache = diskcache.Cache(str(folder), size_limit=self.size_limit_bytes)
                self._open[folder] = cache
        return cache

    def get_json(self, key: str) -> Any | None:
        """The JSON stored under ``key``; None where there is none, or it cannot be read."""
        try:
            blob = self._cache().get(key)
        except _store_errors() as err:
            logger.warning("perfpredict: could not read the cache %s (%s)", self.directory(), err)
            return None
        if blob is None:
            return None
        try:
            return json.loads(gzip.decompress(blob))
        except (OSError, EOFError, ValueError, TypeError) as err:  # gzip's BadGzipFile is an OSError
            logger.warning("perfpredict: ignoring a damaged entry %s of the cache %s (%s)", key, self.directory(), err)
            return None

    def put_json(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON-serialisable) under ``key``; a cache that cannot be written is skipped."""
        self.put_bytes(key, gzip.compress(json.dumps(value).encode(), compresslevel=_COMPRESS_LEVEL))

    def put_bytes(self, key: str, blob: bytes) -> None:
        """Store raw ``blob`` under ``key`` (``put_json`` is the usual door; tests damage entries with this)."""
        try:
            self._cache().set(key, blob)
        except _store_errors() as err:
            logger.warning("perfpredict: could not write the cache %s (%s)", self.directory(), err)

    def __contains__(self, key: str) -> bool:
        try:
            return key in self._cache()
        except _store_errors():
            return False

    def __len__(self) -> int:
        try:
            return len(self._cache())
        except _store_errors():
            return 0
