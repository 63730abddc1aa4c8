"""Where a benchmark result came from (the one line every results file's header starts with), and its writing.

It says how to rerun the result (the command), when and where it was taken (date, CPU, cores and the load at the
end: timings on a shared host stretch with its load), with what (python and package versions) and from which code
(the repository's commit), in the same words in every file.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def command(script: str | Path, argv: Sequence[str] | None = None) -> str:
    """How to rerun it: ``python benchmarks/NAME.py ARGS`` (``argv`` defaults to this process's arguments)."""
    path = Path(script).resolve()
    shown = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    return shlex.join(["python", shown, *(sys.argv[1:] if argv is None else argv)])


def utc_now() -> str:
    return f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"


def git_commit(cwd: Path | None = None) -> str | None:
    """The repository's HEAD, or None where there is no git or no repository (the device tool sends no .git)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def machine() -> str:
    from perfpredict.hardware.cpu_detection import cpu_model
    from perfpredict.profiling.cpu import cpu_count

    torch = sys.modules.get("torch")  # its thread count, where the benchmark uses torch
    threads = f", torch threads {torch.get_num_threads()}" if torch is not None else ""
    return f"{cpu_model()}, {cpu_count()} cores visible{threads}, load average {os.getloadavg()[0]:.1f} at the end"


def versions(packages: Sequence[str]) -> str:
    """``python X, torch Y, ...``: each package's ``__version__`` (the benchmark has imported them already)."""
    found = [f"{name} {getattr(importlib.import_module(name), '__version__', '?')}" for name in packages]
    return ", ".join([f"python {platform.python_version()}", *found])


def header(
    script: str | Path,
    argv: Sequence[str] | None = None,
    *,
    seconds: float | None = None,
    packages: Sequence[str] = ("torch",),
) -> str:
    """`command`, date[, seconds it took]; machine; versions; commit: one line for a results file's header."""
    took = f", {seconds:.0f} s" if seconds is not None else ""
    commit = git_commit(ROOT)
    return (
        f"`{command(script, argv)}`, {utc_now()}{took}; {machine()}; {versions(packages)}; "
        f"commit {commit[:12] if commit else 'unknown'}"
    )


def write_result(text: str, out: str | Path | None) -> None:
    """Show the result on stdout, and write it to ``out`` (its folder made) where one is given."""
    print(text)
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}", file=sys.stderr)
