"""Work a signal asks for, done outside the signal handler.

Python runs a signal handler on the main thread between two bytecodes of whatever that
thread was doing, possibly while it holds a lock: a handler that takes the same lock (setting
a :class:`threading.Event`, notifying a condition a wait set sleeps on) waits for itself for
ever, and so does every later signal's handler (the process then ends only by SIGKILL). So a
handler here only appends to a queue and writes one byte to a pipe, neither of which takes a
Python lock; a thread of its own (``emailmw-signals``, a daemon) does the work.

Thread-safety: :func:`call_soon` may be called from a signal handler and from any thread.
Fork-safe: a child process starts its own thread on first use.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import threading
from collections.abc import Callable

__all__ = ["call_soon", "set_on_signals"]

_pending: collections.deque[Callable[[], object]] = collections.deque()
_pipe: tuple[int, int] | None = None  # None: no thread in this process yet (or forked)
_start_lock = threading.Lock()


def _run(read_end: int) -> None:
    while True:
        try:
            if not os.read(read_end, 512):  # (EINTR is retried by os.read itself)
                return
        except OSError:
            return
        while _pending:
            work = _pending.popleft()
            try:
                work()
            except Exception:  # (one failing piece of work stops no other)
                import logging

                logging.getLogger("emailmw").exception("work a signal asked for failed")


def start() -> None:
    """Start the thread (done by whoever installs a handler that uses :func:`call_soon`,
    outside the handler: starting a thread takes locks). Idempotent."""
    global _pipe
    with _start_lock:
        if _pipe is not None:
            return
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        os.set_inheritable(read_end, False)
        os.set_inheritable(write_end, False)
        _pipe = (read_end, write_end)
        threading.Thread(target=_run, args=(read_end,), name="emailmw-signals", daemon=True).start()


def call_soon(work: Callable[[], object]) -> None:
    """Have ``work()`` run soon on the ``emailmw-signals`` thread; safe in a signal handler
    (takes no lock). :func:`start` must have run in this process."""
    _pending.append(work)
    if _pipe is None:
        return
    with contextlib.suppress(OSError):  # (a full pipe: the thread is about to run anyway)
        os.write(_pipe[1], b"\0")


def set_on_signals(event: threading.Event, signums: tuple[int, ...]) -> None:
    """Install handlers that set ``event`` when one of ``signums`` arrives, from the
    ``emailmw-signals`` thread (setting an event in the handler itself can deadlock, see
    above). Call on the main thread."""
    start()
    for signum in signums:
        signal.signal(signum, lambda *_: call_soon(event.set))


def _forked() -> None:
    global _pipe
    _pending.clear()
    _pipe = None  # (the child starts its own thread; the parent's descriptors stay its own)


os.register_at_fork(after_in_child=_forked)
