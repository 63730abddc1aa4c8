"""An import-linter contract type that also sees the imports made from strings (``make test`` runs ``lint-imports``).

A registry that loads its modules by name (``importlib.import_module("perfpredict.predictors.gae")``), a lazy name
table (``perfpredict/__init__.py``) or a dispatch table of module paths imports those modules as surely as an
``import`` statement does, but no import statement shows it. Every string literal in a perfpredict module that names
another perfpredict module (``"perfpredict.x.y"`` or ``"perfpredict.x.y:attr"``) counts here as an import of it, so
the layers hold for string-loaded modules too, and a new registry entry is declared to the linter by being written.
The one exception is the package's own lazy table of public names (``perfpredict/__init__.py``): it names what a
user may ask for, and loads nothing until they do.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
from importlinter.application import output
from importlinter.contracts.layers import LayersContract
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

PACKAGE = "perfpredict"


def string_imports(root: Path, modules: set[str]) -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every string literal naming a module of ``modules``."""
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        importer = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                target = node.value.partition(":")[0]
                if target in modules and target not in (importer, PACKAGE) and importer != PACKAGE:
                    found.append((importer, target, node.lineno))
    return found


def _with_string_imports(graph):
    root = Path(__file__).resolve().parents[1]
    for importer, imported, line in string_imports(root, set(graph.modules)):
        graph.add_import(
            importer=importer, imported=imported, line_number=line, line_contents=f'"{imported}" (string import)'
        )
    return graph


class LayersWithStringImports(LayersContract):
    """``layers``, checked on the import graph plus the imports made from strings."""

    type_name = "layers_with_string_imports"

    def check(self, graph, verbose):
        return super().check(_with_string_imports(graph), verbose)


class NoModuleCycles(Contract):
    """No import cycle between any two modules of ``package`` (its lazy, TYPE_CHECKING and string imports included).

    A cycle is broken at its cause, never by making one of its imports lazy: a lazy import is still an import here.
    """

    type_name = "no_module_cycles"
    package = fields.StringField()

    def check(self, graph, verbose):
        graph = _with_string_imports(graph)
        edges = nx.DiGraph()
        for module in graph.modules:
            if module.startswith(f"{self.package}."):
                edges.add_edges_from(
                    (module, m) for m in graph.find_modules_directly_imported_by(module) if m != self.package
                )
        cycles = [c for c in nx.strongly_connected_components(edges) if len(c) > 1]
        return ContractCheck(kept=not cycles, metadata={"cycles": [sorted(c) for c in cycles]})

    def render_broken_contract(self, check):
        for modules in check.metadata["cycles"]:
            output.print_error(f"these modules import each other in a cycle: {', '.join(modules)}")
