"""Lazy package exports: a public name loads its module on first access, once; an unknown name fails clearly."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from perfpredict.core.lazy import lazy_exports


def _package(monkeypatch, table):
    pkg = types.ModuleType("fake_pkg")
    pkg.__getattr__, pkg.__dir__, pkg.__all__ = lazy_exports("fake_pkg", table)
    monkeypatch.setitem(sys.modules, "fake_pkg", pkg)
    return pkg


def test_a_name_resolves_from_its_module_and_is_kept(monkeypatch):
    pkg = _package(monkeypatch, {"json": ("dumps",), "math": ("sqrt", "pi")})
    import json

    assert pkg.dumps is json.dumps
    assert vars(pkg)["dumps"] is json.dumps  # stored: the next access does not call __getattr__
    assert "sqrt" not in vars(pkg)
    assert {"dumps", "sqrt"} <= set(dir(pkg)) and pkg.__all__ == ["dumps", "pi", "sqrt"]


def test_unknown_name_raises_attribute_error(monkeypatch):
    pkg = _package(monkeypatch, {"json": ("dumps",)})
    with pytest.raises(AttributeError, match="module 'fake_pkg' has no attribute 'loads'"):
        pkg.loads  # noqa: B018


@pytest.mark.parametrize("package", ["perfpredict", "perfpredict.profiling", "perfpredict.parallel"])
def test_packages_export_every_listed_name_without_importing_torch_first(package):
    code = (
        f"import importlib, sys; pkg = importlib.import_module({package!r}); "
        "assert 'torch' not in sys.modules, 'torch at import'; "
        "missing = [n for n in pkg.__all__ if getattr(pkg, n, None) is None]; print(missing)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
