"""A collector run killed mid-write, for the resume tests: the crash a resume must survive is SIGKILL, which no
handler sees, taken while rows are being appended."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def kill_after_rows(cmd: list[str], log: Path, rows: int, *, poll_s: float = 0.02, timeout_s: float = 900) -> dict:
    """Run ``cmd``, SIGKILL it once ``log`` holds ``rows`` lines; returns the environment it ran with (to resume)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and log.read_bytes().count(b"\n") >= rows:
            break
        time.sleep(poll_s)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # it must still be writing when killed
    assert log.exists() and log.read_bytes().count(b"\n") >= rows, f"no {rows} rows in {timeout_s:.0f} s: hung?"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    return env
