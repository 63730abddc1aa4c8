"""Archived logs: a JSONL log too large to keep as text in the repository (protocol v3's ``rounds.jsonl``, every
round's raw samples) is kept beside its live log as ``NAME.gz``.

The collector appends to the live ``NAME``, line by line and fsynced, as it does every log. :func:`archive` folds the
live log into ``NAME.gz``: the lines the archive does not hold yet (as a multiset: a line held twice is kept twice)
become one more gzip member, then the live log is removed. Compaction (``dataset.compact``) and the GPU lease import
archive; ``dataset.read_jsonl`` reads the archive, then the live log, so every reader sees one log whichever form
its lines are in. Members are written with no timestamp, so the same lines always give the same bytes.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections import Counter
from pathlib import Path

GZ = ".gz"
#: the logs kept archived (their names in a dataset folder)
ARCHIVED = ("rounds.jsonl",)


def archive_of(path: Path) -> Path:
    """``rounds.jsonl.gz`` for ``rounds.jsonl``."""
    return path.with_name(path.name + GZ)


def exists(path: Path) -> bool:
    """Whether the log ``path`` holds anything: its live file or its archive."""
    return path.is_file() or archive_of(path).is_file()


def read_archive(path: Path) -> tuple[bytes, str | None]:
    """The decompressed lines of ``path``'s archive (b"" without one), and what was lost to damage, if any: the
    lines before the damage are kept, up to the last whole one."""
    gz = archive_of(path)
    if not gz.is_file():
        return b"", None
    data = gz.read_bytes()
    out = bytearray()
    while data:
        member = zlib.decompressobj(wbits=31)  # one gzip member
        try:
            out += member.decompress(data)
        except zlib.error as err:
            return _cut(out, gz, f"zlib: {str(err)[:80]}")
        if not member.eof:
            return _cut(out, gz, "a member cut short")
        data = member.unused_data
    return bytes(out), None


def _cut(out: bytearray, gz: Path, why: str) -> tuple[bytes, str]:
    kept = bytes(out[: out.rfind(b"\n") + 1])
    lines = kept.count(b"\n")
    return kept, f"{gz.name} damaged after {lines} lines ({why}); the rest is lost"


def archive(path: Path) -> int:
    """Fold the live log ``path`` into its archive and remove it; returns the lines added to the archive. A torn
    last line (a write a crash cut) is dropped, as a reader drops it. Run again after a crash, it adds nothing twice."""
    if not path.is_file():
        return 0
    live = path.read_bytes()
    held, _ = read_archive(path)
    have = Counter(_canonical(line) for line in held.split(b"\n") if line.strip())
    new = []
    for line in live[: live.rfind(b"\n") + 1].split(b"\n"):
        if not line.strip():
            continue
        key = _canonical(line)
        if have[key] > 0:
            have[key] -= 1
        else:
            new.append(line)
    if new:
        member = gzip.compress(b"\n".join(new) + b"\n", compresslevel=9, mtime=0)
        with open(archive_of(path), "ab") as f:
            f.write(member)
            f.flush()
            os.fsync(f.fileno())
    path.unlink()
    return len(new)


def archive_folder(folder: Path) -> dict[str, int]:
    """:func:`archive` each of ``ARCHIVED`` in ``folder``; lines added per log."""
    return {name: archive(folder / name) for name in ARCHIVED if (folder / name).is_file()}


def _canonical(line: bytes) -> bytes:
    """A line's JSON with sorted keys (two writings of one record are one line), or the line itself."""
    try:
        return json.dumps(json.loads(line), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        return line.strip()
