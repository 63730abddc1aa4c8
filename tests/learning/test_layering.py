"""Answering never reaches training code: the predictors (and every module the registry loads by name) import
neither ``perfpredict.learning`` nor ``perfpredict.api``, counting lazy imports and TYPE_CHECKING ones."""

import networkx as nx
from test_architecture import import_graph

from perfpredict.learning.train import LEARNERS
from perfpredict.predictors import registry


def _reached(graph: nx.DiGraph, start: str) -> set[str]:
    return nx.descendants(graph, start) | {start}


def test_predictors_never_import_learning_or_the_api():
    graph = import_graph()
    bad = sorted(
        f"{a} -> {b}"
        for a, b in graph.edges
        if a.startswith("perfpredict.predictors") and (b.startswith("perfpredict.learning") or b == "perfpredict.api")
    )
    assert bad == []


def test_the_registry_string_modules_reach_no_training_code():
    graph = import_graph()
    for module in registry._BUILTIN_MODULES:
        reached = _reached(graph, module)
        assert not any(m.startswith("perfpredict.learning") or m == "perfpredict.api" for m in reached), module


def test_training_data_does_not_import_the_api():
    assert "perfpredict.api" not in _reached(import_graph(), "perfpredict.learning.training_data")


def test_every_trainable_learner_module_exists():
    import importlib

    for module, cls in LEARNERS.values():
        assert hasattr(importlib.import_module(module), cls)
