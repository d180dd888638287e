"""The sending ledger of an account on one machine: when each email went, whichever
process sent it, so that every process sending as the account spends one budget
(``limits:``; a provider counts the account, not the process) and ``emailmw doctor`` shows
the day's use.

A file per account and SMTP server under ``$XDG_STATE_HOME/emailmw/sent`` (default
``~/.local/state/emailmw/sent``; private: mode 600 in a 700 directory), one line per
email: its wall-clock send time. Lines are appended under an exclusive ``flock``, so
processes never interleave; a reader keeps its offset and reads only what was appended
since. The file is rewritten with the last day's lines only (atomically: a new file
renamed over it) when a process opens it and it has grown past 1 MB; a reader that finds
another file under the name reads it from the start, skipping what it has seen.

Only accounts with ``emails-per-minute`` or ``emails-per-day`` keep a ledger. Thread-safe
(one lock); safe across processes of one machine (not across machines: a shared
filesystem's ``flock`` may not lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

__all__ = ["SendLedger", "ledger_path", "sent_within"]

DAY: Final = 86_400.0
_COMPACT_AT: Final = 1 << 20


def ledger_path(username: str, server: str) -> Path:
    """Where the ledger of ``username`` on SMTP ``server`` lives."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    digest = hashlib.sha256(f"{username}\0{server}".encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "@.-_" else "_" for c in username)[:64]
    return Path(base) / "emailmw" / "sent" / f"{safe}-{digest}"


class SendLedger:
    """The ledger file at ``path`` (see the module)."""

    def __init__(self, path: Path, *, now: float) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._offset = 0
        self._inode: int | None = None
        self._last = float("-inf")  # the latest time read (to skip after a rewrite)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(OSError):
            os.chmod(path.parent, 0o700)
        with self._locked() as fd:
            if os.fstat(fd).st_size > _COMPACT_AT:
                self._compact(fd, now)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    def _compact(self, fd: int, now: float) -> None:
        """Keep the last day's lines: a new file renamed over this one (under its lock)."""
        with os.fdopen(os.dup(fd), "rb") as f:
            f.seek(0)
            kept = [t for t in _times(f.read()) if t > now - DAY]
        fresh = self.path.with_name(self.path.name + ".new")
        fresh.write_bytes(b"".join(b"%.3f\n" % t for t in kept))
        os.chmod(fresh, 0o600)
        os.replace(fresh, self.path)

    def record(self, when: float) -> None:
        """One email went at ``when`` (wall clock, seconds since the epoch)."""
        with self._lock, self._locked() as fd:
            os.write(fd, b"%.3f\n" % when)

    def read_new(self) -> list[float]:
        """The send times appended since the last call (every process's, this one's too),
        in file order; the first call reads the whole file."""
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return []
            with os.fdopen(fd, "rb") as f:
                inode = os.fstat(f.fileno()).st_ino
                rewritten = self._inode is not None and inode != self._inode
                self._inode = inode
                if rewritten:
                    self._offset = 0
                f.seek(self._offset)
                data = f.read()
            end = data.rfind(b"\n") + 1  # (a line being written is read next time)
            self._offset += end
            times = _times(data[:end])
            if rewritten:
                times = [t for t in times if t > self._last]
            if times:
                self._last = max(self._last, *times)
            return times


def sent_within(path: Path, now: float, seconds: float) -> int:
    """Emails the ledger at ``path`` says went in the ``seconds`` before ``now`` (0 when
    there is none); reads the whole file, creates nothing."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return sum(1 for t in _times(data) if now - seconds < t <= now)


def _times(data: bytes) -> list[float]:
    out = []
    for line in data.split(b"\n"):
        with contextlib.suppress(ValueError):
            if line:
                out.append(float(line))
    return out
