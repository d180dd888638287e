"""The connection budget of a process: how many IMAP connections emailmw holds open per
account, and its bound (``limits: max-connections``, 10 by default: Dovecot's
``mail_max_userip_connections``; provider profiles set theirs, Gmail's 15).

Servers count an account's connections and refuse one more (Dovecot: "Maximum number of
connections from user+IP exceeded"), whoever opens it. A process with a receiver, a few
group members, a gateway and a tool reaches Dovecot's default quickly, and the refusal
then hits whichever entity connects next, maybe after a network blip, far from the cause.
Every IMAP connection emailmw opens (native and curl receivers, group stores, the
pipeline's live IMAP reading, ``doctor``, the command line) therefore takes a slot of its
account here first and gives it back when it closes.

The budget holds across the processes of one machine too (servers count connections per
user and address: Dovecot's limit is per user+IP): each connection also holds one of
``max-connections`` lock files of its account in this user's runtime directory
(``$XDG_RUNTIME_DIR/emailmw``, ``/run/emailmw`` for root, else ``/tmp/emailmw-UID/emailmw``:
private, checked), locked with ``flock`` so that the kernel gives a slot back when its
process dies, however it dies. Where that directory cannot be used the budget counts this
process only (said once).

A slot that is not free within ``wait`` seconds (a short-lived connection, e.g. a tool's,
may give one back meanwhile) is a :class:`~emailmw.ConnectionLimitError` naming the budget:
one line, raised where the connection was asked for, and the receivers' backoff then waits
up to 30 s between tries (no login storm). Other clients of the account (a mail client,
another machine) count against the server's limit, not this one. Thread-safe.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Final

from .._core.config import DEFAULT_MAX_CONNECTIONS, Options
from .._core.errors import ConnectionLimitError
from .._core.runtime import make_private_directory, runtime_base

__all__ = ["DEFAULT_MAX_CONNECTIONS", "Slot", "in_use", "spare", "take_slot"]

_log = logging.getLogger("emailmw.transport")

#: seconds a connection waits for a slot another one may give back, at most
MAX_WAIT_S: Final = 10.0
#: how often a connection waiting for another process's slot looks again
_MACHINE_LOOK_S: Final = 0.05


@dataclass(slots=True)
class _Account:
    held: int = 0
    warned: bool = False
    freed: threading.Condition = field(default_factory=threading.Condition)


_LOCK: Final = threading.Lock()
_ACCOUNTS: dict[tuple[str, str], _Account] = {}


class Slot:
    """One held connection of an account; :meth:`release` gives it back (once: further
    calls do nothing), its machine-wide lock file too."""

    __slots__ = ("_account", "_file", "_lock")

    def __init__(self, account: _Account, file: int | None = None) -> None:
        self._account: _Account | None = account
        self._file = file
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            account, self._account = self._account, None
            file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                os.close(file)  # (the lock goes with it)
        if account is not None:
            with account.freed:
                account.held -= 1
                account.freed.notify()


_machine_warned = False


def _machine_slot(username: str, server: str, limit: int, deadline: float) -> int | None:
    """One of the account's ``limit`` lock files, locked (its descriptor); -1 when every
    one stays locked by other connections of this machine until ``deadline``; None when
    the runtime directory cannot be used (the budget then counts this process only)."""
    global _machine_warned
    try:
        directory = make_private_directory(runtime_base() / "emailmw")
    except OSError as exc:
        if not _machine_warned:
            _machine_warned = True
            _log.warning("max-connections counts this process only: %s", exc)
        return None
    digest = hashlib.sha256(f"{username}\0{server}".encode()).hexdigest()[:16]
    try:
        while True:
            for number in range(limit):
                fd = os.open(f"connection-{digest}-{number}.lock",
                             os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=directory)  # fmt: skip
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return fd
            if time.monotonic() >= deadline:
                return -1
            time.sleep(_MACHINE_LOOK_S)
    finally:
        os.close(directory)


def _account(username: str, server: str) -> _Account:
    with _LOCK:
        return _ACCOUNTS.setdefault((username, server), _Account())


def in_use(username: str, server: str) -> int:
    """How many connections this process holds to ``server`` as ``username`` now."""
    return _account(username, server).held


def spare(options: Options) -> bool:
    """Whether one more IMAP connection of the account of ``options`` fits its
    ``max-connections`` now (True for a transport without IMAP)."""
    user = options.user
    if user is None or user.imap.scheme not in ("imap", "imaps"):
        return True
    return in_use(user.username, user.imap.url) < options.limits.max_connections


def take_slot(username: str, server: str, limit: int, *, wait: float = MAX_WAIT_S) -> Slot:
    """A slot for one more connection to ``server`` as ``username``: at once when fewer
    than ``limit`` are held by this process and by the machine, else when one is given back
    within ``wait`` seconds (at most :data:`MAX_WAIT_S`); else
    :class:`~emailmw.ConnectionLimitError`."""
    account = _account(username, server)
    deadline = time.monotonic() + min(wait, MAX_WAIT_S)
    with account.freed:
        while account.held >= limit:
            if not account.warned:
                account.warned = True
                _log.warning(
                    "%s: this process holds %d IMAP connections for %s, its max-connections; "
                    "the next waits for one to close",
                    server, account.held, username,
                )  # fmt: skip
            left = deadline - time.monotonic()
            if left <= 0 or not account.freed.wait(left):
                if account.held < limit:
                    break
                error = ConnectionLimitError(
                    f"this process holds {account.held} IMAP connections for {username}, as "
                    f"many as its max-connections ({limit}) allow: use fewer group members "
                    "or nodes with their own context, or raise limits: max-connections (the "
                    "server's own limit permitting)",
                    server=server,
                )
                error.held_here = True
                raise error
        account.held += 1
        if account.held < limit:
            account.warned = False
    file = _machine_slot(username, server, limit, deadline)
    if file == -1:
        Slot(account).release()
        raise ConnectionLimitError(
            f"the processes of this machine hold {limit} IMAP connections for {username}, as "
            f"many as max-connections ({limit}) allow: wait for one to close, use fewer "
            "processes on this account, or raise limits: max-connections (the server's own "
            "limit permitting)",
            server=server,
        )
    return Slot(account, file)
