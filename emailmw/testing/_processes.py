"""The test servers' processes (``mailserver.py``, ``cyrus.py``): a daemon's pid file read,
whether a pid runs, waiting for it to end."""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["alive", "read_pid", "wait_gone"]


def alive(pid: int) -> bool:
    """Running and not a zombie (PID 1 here reaps orphans lazily)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def read_pid(path: Path) -> int | None:
    """The pid a pid file names (its first word), or None."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """Wait until ``pid`` no longer runs, at most ``timeout`` seconds; whether it ended."""
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
