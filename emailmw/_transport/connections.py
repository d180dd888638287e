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

A slot that is not free within ``wait`` seconds (a short-lived connection, e.g. a tool's,
may give one back meanwhile) is a :class:`~emailmw.ConnectionLimitError` naming the budget:
one line, raised where the connection was asked for, and the receivers' backoff then waits
up to 30 s between tries (no login storm). The budget counts one process; other clients of
the account (a mail client, another process) count against the server's limit, not this
one. Thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Final

from .._core.config import DEFAULT_MAX_CONNECTIONS, Options
from .._core.errors import ConnectionLimitError

__all__ = ["DEFAULT_MAX_CONNECTIONS", "Slot", "in_use", "spare", "take_slot"]

_log = logging.getLogger("emailmw.transport")

#: seconds a connection waits for a slot another one may give back, at most
MAX_WAIT_S: Final = 10.0


@dataclass(slots=True)
class _Account:
    held: int = 0
    warned: bool = False
    freed: threading.Condition = field(default_factory=threading.Condition)


_LOCK: Final = threading.Lock()
_ACCOUNTS: dict[tuple[str, str], _Account] = {}


class Slot:
    """One held connection of an account; :meth:`release` gives it back (once: further
    calls do nothing)."""

    __slots__ = ("_account", "_lock")

    def __init__(self, account: _Account) -> None:
        self._account: _Account | None = account
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            account, self._account = self._account, None
        if account is not None:
            with account.freed:
                account.held -= 1
                account.freed.notify()


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
    than ``limit`` are held, else when one is given back within ``wait`` seconds (at most
    :data:`MAX_WAIT_S`); else :class:`~emailmw.ConnectionLimitError`."""
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
                raise ConnectionLimitError(
                    f"this process holds {account.held} IMAP connections for {username}, as "
                    f"many as its max-connections ({limit}) allow: use fewer group members "
                    "or nodes with their own context, or raise limits: max-connections (the "
                    "server's own limit permitting)",
                    server=server,
                )
        account.held += 1
        if account.held < limit:
            account.warned = False
    return Slot(account)
