"""The command line, one module per command; :mod:`perfpredict.cli.entry` joins them into ``perfpredict``.

No library module imports this package: the CLI calls the library, never the other way round.
"""

from __future__ import annotations

from perfpredict.cli.entry import main

__all__ = ["main"]
