"""The storage under the graph and answer caches: where it lives, atomic under concurrent writers, size-limited."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from perfpredict.caching.disk_store import DiskStore, cache_root


def test_the_cache_root_follows_perfpredict_cache_dir_then_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "mine"
    assert DiskStore("graph-store", 2**20).directory() == tmp_path / "mine" / "graph-store"
    monkeypatch.delenv("PERFPREDICT_CACHE_DIR")
    assert cache_root() == tmp_path / "xdg" / "perfpredict"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "perfpredict"


def test_an_entry_reads_back_and_a_damaged_one_reads_as_missing(tmp_path):
    store = DiskStore("x", 2**20, root=tmp_path)
    assert store.get_json("k") is None and "k" not in store
    store.put_json("k", {"nodes": [1, 2, 3], "name": "mlp"})
    assert store.get_json("k") == {"nodes": [1, 2, 3], "name": "mlp"} and len(store) == 1
    store.put_bytes("k", b"not gzip")
    assert store.get_json("k") is None
    store.put_json("k", [4])  # rewritten
    assert store.get_json("k") == [4]


def _write_many(folder: str, key: str, writer: int, count: int) -> None:
    store = DiskStore("x", 2**30, root=Path(folder))
    for i in range(count):
        store.put_json(key, {"writer": writer, "i": i, "pad": [writer] * 2000})


def test_processes_writing_the_same_key_leave_one_whole_entry(tmp_path):
    # the old stores wrote <key>.tmp and renamed it: two writers of one key could interleave on the same tmp file
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(str(tmp_path), "same", w, 20)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    entry = DiskStore("x", 2**30, root=tmp_path).get_json("same")
    assert entry["i"] == 19 and entry["pad"] == [entry["writer"]] * 2000  # one writer's last write, whole


def test_threads_writing_the_same_key_leave_one_whole_entry(tmp_path):
    threads = [threading.Thread(target=_write_many, args=(str(tmp_path), "same", w, 20)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entry = DiskStore("x", 2**30, root=tmp_path).get_json("same")
    assert entry["i"] == 19 and entry["pad"] == [entry["writer"]] * 2000


def test_the_store_is_culled_to_its_size_limit(tmp_path):
    import os

    store = DiskStore("x", 200_000, root=tmp_path)
    for i in range(60):
        store.put_json(f"k{i}", list(os.urandom(4_000)))  # incompressible: about 9 kB gzipped, 540 kB in all
    assert store._cache().volume() < 300_000  # the limit, plus what diskcache culls on the next write
    assert 10 < len(store) < 60
    assert store.get_json("k59") is not None and store.get_json("k0") is None  # the oldest stored went first


def test_a_cache_that_cannot_be_written_is_skipped_with_a_warning(tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder should be")
    store = DiskStore("x", 2**20, root=blocked / "sub")
    store.put_json("k", 1)  # no error
    assert store.get_json("k") is None and len(store) == 0
    assert "could not" in caplog.text


def test_a_writer_holding_the_lock_too_long_is_skipped_with_a_warning(tmp_path, caplog):
    import sqlite3

    import diskcache

    store = DiskStore("x", 2**20, root=tmp_path / "c")
    store.put_json("k", 1)
    # a short sqlite timeout, so the blocked write gives up at once (diskcache raises its own Timeout then)
    DiskStore._open[store.directory()] = diskcache.Cache(str(store.directory()), timeout=0.05)
    other = sqlite3.connect(str(store.directory() / "cache.db"), timeout=0.05, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's writer, holding the lock
    try:
        store.put_json("k", 2)  # no error
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert "could not write" in caplog.text and store.get_json("k") == 1


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    """Each test opens its own folders (DiskStore keeps one open diskcache per folder and process)."""
    monkeypatch.setattr(DiskStore, "_open", {})
