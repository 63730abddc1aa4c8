"""The rules that keep the package walkable (docs/architecture.md): no import cycles, counting lazy imports and
imports under TYPE_CHECKING; libraries never import the CLI; no module over 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "perfpredict"
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported(node: ast.AST, package: str) -> list[str]:
    """The dotted names one import statement asks for (``from a import b`` asks for ``a.b``, a module or not)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: climb from the importing module's package
        parents = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join([*parents, base] if base else parents)
    return [f"{base}.{a.name}" for a in node.names]


def import_graph() -> nx.DiGraph:
    """Module -> module edges for every import anywhere in a file (top level, in functions, under TYPE_CHECKING)."""
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _imported(node, package):
                target = resolve(name)
                if target is not None and target != module and target != "perfpredict":
                    graph.add_edge(module, target)
    return graph


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    # the torch.compile backend reaches the report pipeline only inside a function
    assert graph.has_edge("perfpredict.backends.torch_backend", "perfpredict.pipeline")
    assert graph.has_edge("perfpredict.cli.entry", "perfpredict.cli.predict")


def test_no_import_cycles():
    cycles = sorted(" -> ".join(c) for c in nx.simple_cycles(import_graph()))
    assert cycles == [], "break each cycle at its cause (docs/architecture.md):\n" + "\n".join(cycles)


def test_libraries_never_import_the_cli():
    graph = import_graph()
    bad = sorted(
        f"{a} -> {b}"
        for a, b in graph.edges
        if b.startswith("perfpredict.cli") and not a.startswith("perfpredict.cli") and a != "perfpredict.__main__"
    )
    assert bad == []


def test_no_module_over_600_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, "split these by concept: " + ", ".join(f"{k} ({v} lines)" for k, v in long.items())
