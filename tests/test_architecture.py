"""The rules that keep the package walkable (docs/architecture.md).

The import rules (the layers, no cycles, lazy, TYPE_CHECKING and string imports included) are import-linter
contracts in pyproject.toml, which ``make test`` runs with ``lint-imports``; these tests show the contract type sees
what a plain import graph cannot (imports made from strings) and that a break is reported. The size rule is here.
"""

from __future__ import annotations

import copy
from pathlib import Path

import grimp
import import_contracts
import pytest
from import_contracts import LayersWithStringImports, NoModuleCycles, string_imports

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "perfpredict"
MAX_LINES = 600


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("perfpredict", include_external_packages=False)


def test_string_imports_are_imports(graph):
    found = {(a, b) for a, b, _ in string_imports(ROOT, set(graph.modules))}
    assert ("perfpredict.predictors.registry", "perfpredict.predictors.gae") in found  # the registry's built-ins
    assert ("perfpredict.kernels.suite", "perfpredict.kernels.gpu_suite") in found  # a dispatch table
    assert not any(a == "perfpredict" for a, _ in found)  # the public-name table loads nothing until asked


def _layers(graph, low: str, high: str):
    contract = LayersWithStringImports(
        name="test", session_options={"root_packages": ["perfpredict"]}, contract_options={"layers": [high, low]}
    )
    return contract.check(copy.deepcopy(graph), verbose=False)  # a check adds the string imports to its graph


def test_a_string_import_upwards_breaks_the_layers(graph, monkeypatch):
    assert _layers(graph, "perfpredict.core", "perfpredict.cli").kept
    real = import_contracts.string_imports
    monkeypatch.setattr(
        import_contracts,
        "string_imports",
        lambda root, modules: [*real(root, modules), ("perfpredict.core.graph", "perfpredict.cli.entry", 1)],
    )
    assert not _layers(graph, "perfpredict.core", "perfpredict.cli").kept


def test_a_cycle_is_reported(graph):
    graph = copy.deepcopy(graph)
    contract = NoModuleCycles(
        name="t", session_options={"root_packages": ["perfpredict"]}, contract_options={"package": "perfpredict"}
    )
    assert contract.check(copy.deepcopy(graph), verbose=False).kept
    graph.add_import(
        importer="perfpredict.core.ops", imported="perfpredict.core.graph", line_number=1, line_contents="x"
    )
    broken = contract.check(graph, verbose=False)
    assert not broken.kept and any("perfpredict.core.ops" in c for c in broken.metadata["cycles"])


def test_no_module_over_600_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, "split these by concept: " + ", ".join(f"{k} ({v} lines)" for k, v in long.items())
