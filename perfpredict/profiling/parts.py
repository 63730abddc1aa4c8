"""Part folders: where one shard's worker writes, so that the workers of a sharded collection never share a file.

A sharded collection (``perfpredict collect --shard I/N``, or ``--ray``) writes its rows, rounds and attempts to
``<out>/parts/shard-I-of-N/``, a dataset folder of its own; :func:`perfpredict.profiling.dataset.load_dataset`
reads the parts with the rest. Appends from several hosts to one file are not atomic on NFS, and a compaction
that empties a log while another process appends to it loses that row: one writer per file avoids both.

The worker holds an exclusive ``flock`` on its part's ``WRITER`` file while it runs. The kernel drops the lock when
the process dies, SIGKILL included, so a restarted worker takes it over at once. Two workers given the same shard
take turns instead of interleaving, and compaction folds a part only while it holds the lock itself: a live part is
left for a later compaction. Where the filesystem has no ``flock`` (Lustre mounted without ``-o flock``), writers
go on unlocked and compaction leaves every part alone: parts are then read, never emptied.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

PARTS_DIR = "parts"
WRITER_FILE = "WRITER"  # holds the live writer's pid and host: who to ask (or kill) about a part
COMPACT_LOCK = ".compact.lock"


def part_name(index: int, count: int) -> str:
    return f"shard-{index}-of-{count}"


def part_folders(root: Path) -> list[Path]:
    """The part folders of a dataset folder, in name order (the order rows are merged in)."""
    base = Path(root) / PARTS_DIR
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def _flock(f, flags: int) -> bool:
    """``flock`` the open file ``f``; False when another process holds it (non-blocking) or it is unsupported."""
    import fcntl

    try:
        fcntl.flock(f.fileno(), flags)
    except BlockingIOError:
        return False
    except OSError as err:  # ENOLCK, EOPNOTSUPP: a filesystem without flock
        logger.warning("no flock on %s (%s): parts will not be compacted", f.name, err)
        return False
    return True


@contextlib.contextmanager
def writer(folder: Path) -> Iterator[None]:
    """Be the one writer of part ``folder`` for the block: wait for its lock, then record pid and host in it."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / WRITER_FILE, "a+", encoding="utf-8") as f:
        if not _flock(f, fcntl.LOCK_EX):
            logger.warning("writing %s without a lock", folder)
        f.seek(0)
        f.truncate()  # only after the lock: the file names the live writer
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        f.write(f"pid {os.getpid()} host {socket.gethostname()} since {started}\n")
        f.flush()
        yield


def writer_pid(folder: Path) -> int | None:
    """The pid last recorded in a part's WRITER file (it may have exited since)."""
    try:
        return int((Path(folder) / WRITER_FILE).read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


@contextlib.contextmanager
def idle_parts(root: Path) -> Iterator[list[Path]]:
    """The part folders of ``root`` that no writer holds, each kept locked until the block ends (compaction).

    Also serialises compactions of ``root``: two would write the same temporary Parquet file."""
    import fcntl

    folders = part_folders(root)
    if not folders:
        yield []
        return
    with contextlib.ExitStack() as stack:
        lock = stack.enter_context(open(Path(root) / PARTS_DIR / COMPACT_LOCK, "a+", encoding="utf-8"))
        if not _flock(lock, fcntl.LOCK_EX):
            yield []
            return
        idle = []
        for folder in folders:
            f = stack.enter_context(open(folder / WRITER_FILE, "a+", encoding="utf-8"))
            if _flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB):
                idle.append(folder)
        yield idle
