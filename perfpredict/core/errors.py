"""Every error perfpredict raises on purpose.

A message says what is wrong, shows the value with ``!r``, lists the valid choices where there are some, and
names the fix. Callers catch :class:`PerfPredictError` to tell our errors from bugs.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PerfPredictError(Exception):
    """Base class of all perfpredict errors."""


class UnknownDeviceError(PerfPredictError, KeyError):
    """A device name that the catalog does not hold."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnknownPredictorError(PerfPredictError, KeyError):
    """A predictor name that the registry does not hold."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownModelError(PerfPredictError):
    """A HuggingFace id with no shipped config, or a config that cannot be built."""


class InvalidInputError(PerfPredictError, ValueError):
    """A batch, sequence length, dtype or phase that makes no sense."""


class FrontendError(PerfPredictError):
    """A frontend could not turn a model into an OpGraph."""


class ArtifactError(PerfPredictError):
    """A shipped or user model artifact that is missing or does not match this version."""


class MissingDependencyError(PerfPredictError, ImportError):
    """An optional dependency is not installed."""


class NotFittedError(PerfPredictError, ValueError):
    """A learner asked to predict (or save) before it was fitted or loaded."""


def close_matches(value: str, choices: Iterable[str], n: int = 5, cutoff: float = 0.4, substrings: bool = True) -> str:
    """Render the closest choices to ``value`` for an error message ("" when none are close).

    ``cutoff`` is difflib's similarity floor; ``substrings`` also offers choices that contain ``value``. Over a
    long list of unrelated names (transformers' model types) use a high cutoff and no substrings, so that a typo
    gets its neighbours and a name that is not a typo gets no suggestion at all.
    """
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(value.lower(), list(lowered), n=n, cutoff=cutoff)
    if substrings:
        hits += [c for c in lowered if value.lower() in c and c not in hits]
    return ", ".join(lowered[h] for h in hits[:n])


def require(module: str, extra: str):
    """Import an optional dependency, or raise a MissingDependencyError that names the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingDependencyError(
            f'{module!r} is not installed; install it with: pip install "perfpredict[{extra}]"'
        ) from err
