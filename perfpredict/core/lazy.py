"""Lazy package exports (PEP 562): a package names the modules of its public objects; each loads on first access.

This keeps ``import perfpredict`` (and ``perfpredict.profiling``, ``perfpredict.parallel``) light: torch and the
optional dependencies load only when a function that needs them is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, which exports the names ``exports[module]`` of each module.

    A resolved name is stored in the package's namespace, so later accesses do not come back here.
    """
    table = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's name)
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(vars(importlib.import_module(package))) | set(table))

    return __getattr__, __dir__, sorted(table)
