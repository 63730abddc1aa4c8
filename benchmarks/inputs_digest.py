"""A digest of what a benchmark's figures depend on: the ``perfpredict`` package (its code and its shipped data and
artifacts), the benchmark's own script, and the data the benchmark reads (``data/...``, which it declares).

The digest is of file contents only, so two checkouts of the same code on two machines agree, whatever their
mtimes, git state or line endings: each file is hashed under its path relative to the repository root (posix
separators, sorted), a text file (no NUL byte, git's own test) with CRLF read as LF. Caches and compiled files
(``__pycache__``, ``*.pyc``) and hidden files are not inputs. A results file or a test changes nothing here: neither
is an input of any benchmark.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "perfpredict"  # every benchmark's first input
LENGTH = 16  # hex digits written into a result (64 bits)
_SKIPPED_DIRS = frozenset({"__pycache__"})
_SKIPPED_SUFFIXES = frozenset({".pyc", ".pyo"})
_TEXT_PROBE = 8000  # bytes read for a NUL, as git decides text from binary


def normalise(inputs: Iterable[str]) -> tuple[str, ...]:
    """``perfpredict`` first, then each other input (a posix path relative to the root) once, in the order given:
    the order a result lists them in."""
    out = [PACKAGE]
    for item in inputs:
        name = Path(item).as_posix().rstrip("/")
        if name not in out:
            out.append(name)
    return tuple(out)


def files(inputs: Sequence[str], root: Path = ROOT) -> list[str]:
    """Every file the inputs name (a file, or every file under a folder), relative to ``root``, sorted."""
    found: set[str] = set()
    for name in inputs:
        path = root / name
        candidates = [path] if path.is_file() else path.rglob("*") if path.is_dir() else []
        for f in candidates:
            rel = f.relative_to(root)
            if f.is_file() and _is_input(rel):
                found.add(rel.as_posix())
    return sorted(found)


def _is_input(rel: Path) -> bool:
    hidden = any(part.startswith(".") for part in rel.parts)
    return not hidden and not _SKIPPED_DIRS.intersection(rel.parts) and rel.suffix not in _SKIPPED_SUFFIXES


def content(path: Path) -> bytes:
    """A file's bytes, line endings normalised for text (a checkout with CRLF gives the LF checkout's digest)."""
    data = path.read_bytes()
    return data if b"\0" in data[:_TEXT_PROBE] else data.replace(b"\r\n", b"\n")


def digest(inputs: Iterable[str] = (), root: Path = ROOT) -> str:
    """The digest (LENGTH hex digits of a sha256) of ``perfpredict`` and ``inputs``, from their contents. An input
    that does not exist is hashed as missing, so a result that read it no longer matches."""
    names = normalise(inputs)
    h = hashlib.sha256()
    for name in names:
        if not (root / name).exists():
            h.update(b"missing\0" + name.encode() + b"\0")
    for rel in files(names, root):
        body = content(root / rel)
        h.update(rel.encode() + b"\0" + len(body).to_bytes(8, "little"))
        h.update(body)
    return h.hexdigest()[:LENGTH]
