"""The one graph cache: keyed by the capture code's digest, shared by the CLI and the training data."""

from __future__ import annotations

import pytest

from perfpredict.caching import graph_store
from perfpredict.caching.disk_store import DiskStore
from perfpredict.core.graph import graph_to_dict


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(DiskStore, "_open", {})
    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path / "cache"))


def test_the_code_digest_follows_the_zoo_builders_and_the_frontends(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    for name in ("core/graph.py", "core/ops.py", "api.py", "compiler_hooks/fx.py", "profiling/zoo_text.py"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(f"# {name}\n")
    (package / "profiling" / "monitor.py").write_text("# not capture code\n")
    monkeypatch.setattr(graph_store, "_PACKAGE", package)

    def digest() -> str:
        graph_store.code_digest.cache_clear()
        return graph_store.code_digest()

    first = digest()
    (package / "profiling" / "monitor.py").write_text("# edited, but it does not decide a graph\n")
    assert digest() == first
    (package / "profiling" / "zoo_text.py").write_text("# a builder edited: its graphs must be traced again\n")
    second = digest()
    assert second != first
    (package / "compiler_hooks" / "fx.py").write_text("# a frontend edited\n")
    assert digest() not in (first, second)
    graph_store.code_digest.cache_clear()


def test_the_training_data_and_the_cli_share_one_store(monkeypatch):
    from perfpredict.learning import training_data
    from perfpredict.profiling import zoo

    spec = zoo.ModelSpec("mlp", {"in_dim": 8, "width": 16, "layers": 1, "activation": "relu", "layernorm": False})
    graph = training_data.GraphCache().graph(spec)  # traced, and stored although the CLI's cache is off (conftest)
    assert len(graph_store.STORE) == 1

    def no_trace(spec):
        raise AssertionError("the stored graph should have answered")

    monkeypatch.setattr(training_data, "_trace", no_trace)
    again = training_data.GraphCache().graph(spec)  # a new process's cache: read from disk
    assert graph_to_dict(again) == graph_to_dict(graph)
    # the CLI's doors are off under PERFPREDICT_NO_GRAPH_CACHE=1, and on without it
    cli_key = graph_store.key(config={"model_type": "mlp"}, batch=1)
    graph_store.save(cli_key, graph)
    assert graph_store.load(cli_key) is None and len(graph_store.STORE) == 1
    monkeypatch.delenv("PERFPREDICT_NO_GRAPH_CACHE")
    graph_store.save(cli_key, graph)
    assert graph_store.load(cli_key) is not None and len(graph_store.STORE) == 2
