"""Where a benchmark result came from (the one line every results file's header starts with), and its writing.

It says how to rerun the result (the command), when and where it was taken (date, CPU, cores and the load at the
end: timings on a shared host stretch with its load), with what (python and package versions) and from which code:
the repository's commit, and the digest of every input the figures depend on (:mod:`benchmarks.inputs_digest`:
``perfpredict``, the script, the data it declares), which ``python -m benchmarks stale`` checks against today's.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import inputs_digest

ROOT = Path(__file__).resolve().parents[1]
#: how a result names its inputs' digest: ``inputs digest <hex> (perfpredict, benchmarks/x.py, data/...)``;
#: ``mixed`` where a report joins runs made from different code (``benchmarks/accuracy.py``)
DIGEST_LINE = re.compile(rf"inputs digest (?P<digest>[0-9a-f]{{{inputs_digest.LENGTH}}}|mixed) \((?P<inputs>[^)]*)\)")
MIXED = "mixed"


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


def inputs_of(script: str | Path, inputs: Sequence[str | Path] = ()) -> tuple[str, ...]:
    """What a benchmark's figures depend on: ``perfpredict``, the script itself and the ``inputs`` it declares (the
    data it reads, helper modules). A declared input that does not exist is a mistake in the benchmark."""
    names = inputs_digest.normalise([_in_repository(p) for p in (script, *inputs)])
    missing = [n for n in names if not (ROOT / n).exists()]
    if missing:
        raise FileNotFoundError(f"benchmark inputs {missing!r} do not exist under {ROOT}; declare existing paths")
    return names


def _in_repository(path: str | Path) -> str:
    """``path`` relative to ROOT: an absolute path, a path relative to ROOT (a benchmark's constant) or else to the
    working directory (a command line's argument)."""
    full = (ROOT / path) if not Path(path).is_absolute() and (ROOT / path).exists() else Path(path).resolve()
    if not full.is_relative_to(ROOT):
        raise ValueError(
            f"benchmark input {str(path)!r} is outside the repository {ROOT}; only its files can be digested"
        )
    return full.relative_to(ROOT).as_posix()


def digest_text(names: Sequence[str], digest: str | None = None) -> str:
    """``inputs digest <hex> (perfpredict, ...)``: today's digest of ``names``, or the ``digest`` given (the runs a
    report was built from)."""
    value = inputs_digest.digest(names, ROOT) if digest is None else digest
    return f"inputs digest {value} ({', '.join(names)})"


def header(
    script: str | Path,
    argv: Sequence[str] | None = None,
    *,
    seconds: float | None = None,
    packages: Sequence[str] = ("torch",),
    inputs: Sequence[str | Path] = (),
    digest: str | None = None,
) -> str:
    """`command`, date[, seconds it took]; machine; versions; commit; inputs digest: one line for a results file's
    header. ``inputs``: what the benchmark reads beyond ``perfpredict`` and its script (``data/...``); ``digest``:
    the inputs' digest when the figures were computed earlier (stored runs), else today's."""
    took = f", {seconds:.0f} s" if seconds is not None else ""
    commit = git_commit(ROOT)
    return (
        f"`{command(script, argv)}`, {utc_now()}{took}; {machine()}; {versions(packages)}; "
        f"commit {commit[:12] if commit else 'unknown'}; {digest_text(inputs_of(script, inputs), digest)}"
    )


def write_result(text: str, out: str | Path | None) -> None:
    """Show the result on stdout, and write it to ``out`` (its folder made) where one is given."""
    print(text)
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}", file=sys.stderr)
