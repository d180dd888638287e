"""The test servers' processes (``mailserver.py``, ``cyrus.py``): a daemon's pid file read,
whether a pid runs, waiting for it to end; the processes a test or benchmark started,
found by a variable in their environment."""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["alive", "marked", "read_pid", "wait_gone"]


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


def marked(variable: str, value: str) -> list[int]:
    """The live processes whose environment holds ``variable=value``: a command a test
    started with it and every process started under it (a JVM, its helpers, Python
    workers: each inherits it), whoever their parent is now."""
    needle = f"\0{variable}={value}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()  # (a zombie's is empty)
        except OSError:
            continue
        if needle in b"\0" + environ:
            found.append(int(entry.name))
    return found
