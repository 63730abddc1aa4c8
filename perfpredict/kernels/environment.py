"""What a ceilings file records about the machine and software that measured it (both suites write it)."""

from __future__ import annotations

import platform
import sys
from typing import Any


def environment() -> dict[str, Any]:
    import numpy as np

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "hostname_hash": hash(platform.node()) & 0xFFFF,
    }
    for mod in ("numba", "llvmlite", "torch", "cupy"):
        m = sys.modules.get(mod)
        if m is not None:
            env[mod] = getattr(m, "__version__", "?")
    return env
