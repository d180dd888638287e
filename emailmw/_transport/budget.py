"""The receive budget: how much received mail a context holds that is not settled yet, in
bytes and in emails, and its bounds (``queue-bytes``, ``queue-limit``).

Every receiver of a context (its main receiver, each group member's) reserves an email's
size before it downloads it and releases it when the email is settled (acknowledged, left,
quarantined) or given back (a group claim another member took over). A reservation that
does not fit is refused: the receiver stops fetching and the mail stays on the server until
the application has settled enough (back-pressure). Nothing is dropped to make room.

One email is always let through when nothing is held, however large it is (up to what a
receiver downloads at all: ``max-message-size``), so a single large email can never stall a
context.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from .._core.errors import InvalidArgumentError

__all__ = ["ReceiveBudget"]


class ReceiveBudget:
    """The bounds of one context's unsettled received mail (see the module). Thread-safe:
    receivers reserve on their receiving threads, settling releases on any thread, and the
    listeners (receivers waiting for room) are called on the releasing thread."""

    def __init__(self, max_bytes: int, max_emails: int) -> None:
        if max_bytes < 1 or max_emails < 1:
            raise InvalidArgumentError("a receive budget needs room for at least one email")
        self.max_bytes = max_bytes
        self.max_emails = max_emails
        self._lock = threading.Lock()
        self._bytes = 0
        self._emails = 0
        self._listeners: tuple[Callable[[], None], ...] = ()
        #: reservations refused for want of room (each a moment of back-pressure)
        self.refused = 0

    def __repr__(self) -> str:
        return (
            f"<ReceiveBudget {self._bytes}/{self.max_bytes} bytes, "
            f"{self._emails}/{self.max_emails} emails>"
        )

    @property
    def held_bytes(self) -> int:
        return self._bytes

    @property
    def held_emails(self) -> int:
        return self._emails

    def reserve(self, size: int) -> bool:
        """Hold ``size`` bytes for one email if they fit (or if nothing is held); False
        (counted in :attr:`refused`) when they do not."""
        return self.reserve_run((size,)) == 1

    def reserve_run(self, sizes: Iterable[int]) -> int:
        """:meth:`reserve` each of ``sizes`` in turn, under one lock, up to the first that
        does not fit: how many were reserved (a receiver handing out what is queued)."""
        done = 0
        with self._lock:
            for size in sizes:
                if not self._fits(size):
                    self.refused += 1
                    break
                self._bytes += size
                self._emails += 1
                done += 1
        return done

    def release(self, size: int) -> None:
        """Give back the reservation of one email of ``size`` bytes; wakes the listeners."""
        with self._lock:
            self._bytes = max(0, self._bytes - size)
            self._emails = max(0, self._emails - 1)
            listeners = self._listeners
        for listener in listeners:
            listener()

    def fits(self, size: int) -> bool:
        """Whether :meth:`reserve` of ``size`` would succeed now."""
        with self._lock:
            return self._fits(size)

    def _fits(self, size: int) -> bool:
        """Whether ``size`` fits now, or nothing is held (call with the lock)."""
        return self._emails == 0 or (
            self._bytes + size <= self.max_bytes and self._emails < self.max_emails
        )

    def has_room(self) -> bool:
        """Whether one more email of some size could be reserved now."""
        return self._emails == 0 or (
            self._emails < self.max_emails and self._bytes < self.max_bytes
        )

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever room is given back."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x is not listener)
