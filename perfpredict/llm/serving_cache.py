"""The on-disk answer cache for ``serve-sim`` and ``deploy``, as ``generate`` has one (``answer_cache``).

A serving answer costs the engine's step tables (most of a second per GPU configuration) and the simulation, a
deployment search one of each per configuration; the same question under the same code answers from the cache.
The key holds everything that decides the answer: the config's fields (and the draft model's), the device as the
catalog has it now, the host profile in use, a digest of perfpredict's files, the ``Serving`` value, the contents
of a lengths file, and for a search its grid and replica limit. A model given as an object (a config built in
Python) is never cached. ``PERFPREDICT_NO_GRAPH_CACHE=1`` turns it off with the others; ``--no-cache`` answers again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def key(kind: str, source: Any, serving, **extra: Any) -> str | None:
    """The cache key of a ``kind`` ("serving", "deploy") question, or None where it cannot be keyed."""
    from perfpredict.llm import answer_cache

    fields = _config(source)
    if fields is None:
        return None
    spec = serving.speculative
    draft = _config(spec.draft_model) if spec is not None and spec.draft_model else None
    lengths = serving.stream.lengths_file
    parts = {
        "kind": kind,
        "code": answer_cache.package_digest(),
        "config": fields,
        "draft": draft,
        "devices": [_device(name) for name in extra.pop("devices", (serving.device,))],
        "host": _host(serving),
        "serving": serving,
        "lengths_file": hashlib.sha256(Path(lengths).read_bytes()).hexdigest() if lengths else None,
        **extra,
    }
    text = json.dumps(answer_cache.canonical(parts), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cached(cache_key: str | None, compute: Callable[[], Any], restore: Callable[[dict], Any], use: bool = True):
    """``compute()``, or the answer stored under ``cache_key`` (``restore`` reads it back); stores a new one."""
    from perfpredict.caching import graph_store
    from perfpredict.llm.answer_cache import STORE

    on = cache_key is not None and graph_store.enabled()
    if on and use:
        data = STORE.get_json(cache_key)
        if data is not None:
            try:
                return restore(data)
            except (KeyError, TypeError, ValueError):
                pass  # a damaged or older entry: answer again, and overwrite it
    answer = compute()
    if on:
        STORE.put_json(cache_key, answer.to_dict())
    return answer


def _config(source: Any) -> Any:
    if isinstance(source, dict):
        return source
    if not isinstance(source, (str, os.PathLike)):
        return None
    from perfpredict.compiler_hooks.hf_frontend import raw_config

    return list(raw_config(source))


def _device(name: str) -> Any:
    from perfpredict.hardware.devices import get_device

    return get_device(name)


def _host(serving) -> Any:
    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors import host_model

    return host_model.load_profile(host=serving.host, kind=get_device(serving.device).kind)
