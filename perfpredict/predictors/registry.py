"""Predictor registry, in the style of torch._dynamo.backends.registry.

``register_predictor(name)`` decorates a factory; ``get_predictor(name)`` builds (once) and returns it; an unknown
name raises with the list of what is available. Built-in predictors register on first lookup, so importing
perfpredict stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from perfpredict.errors import InvalidInputError, UnknownPredictorError, close_matches
from perfpredict.predictors.base import Predictor

_FACTORIES: dict[str, Callable[[], Predictor]] = {}
_INSTANCES: dict[str, Predictor] = {}
# Modules that register built-in predictors when imported.
_BUILTIN_MODULES = ("perfpredict.predictors.analytical",)


def register_predictor(name: str) -> Callable[[Callable[[], Predictor]], Callable[[], Predictor]]:
    """Register a predictor factory under ``name``. Registering a taken name raises."""

    def decorator(factory: Callable[[], Predictor]) -> Callable[[], Predictor]:
        if name in _FACTORIES and _FACTORIES[name] is not factory:
            raise InvalidInputError(f"a predictor named {name!r} is already registered; pick another name")
        _FACTORIES[name] = factory
        return factory

    return decorator


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def list_predictors() -> list[str]:
    _load_builtins()
    return sorted(_FACTORIES)


def get_predictor(name: str) -> Predictor:
    """The predictor registered as ``name``; raises UnknownPredictorError listing the registered ones."""
    _load_builtins()
    if name not in _FACTORIES:
        close = close_matches(name, _FACTORIES)
        hint = f" (did you mean {close}?)" if close else ""
        raise UnknownPredictorError(
            f"unknown predictor {name!r}{hint}; available: {', '.join(sorted(_FACTORIES))}")
    if name not in _INSTANCES:
        _INSTANCES[name] = _FACTORIES[name]()
    return _INSTANCES[name]
