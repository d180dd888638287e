"""The sending budget a provider gives an account (``limits:``): a state machine, no I/O,
no clock of its own (every call takes ``now``, seconds on a monotonic clock).

Two rules per limit of N emails in a rolling window W (60 s, 24 h), as providers count:

* **a hard cap**: never more than N in any window W (a log of send times, pruned);
* **pacing** (GCRA, the generic cell rate algorithm): sustained, one email per W/N, with a
  burst of B at once (B = N/10 for a minute, N/24 for a day: an hour's share), so that a
  busy topic does not spend the day's budget in the morning and then wait for hours.

A server that says the account is throttled (``421``, ``4.7.x``, ``5.4.5``) holds all
sending for a while (:meth:`SendBudget.throttled`). The outbox asks :meth:`delay` before
each email and, while it must wait, lets batches grow (``docs/providers.md``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Final

from .._core.config import SendLimits

__all__ = ["SendBudget"]

MINUTE: Final = 60.0
DAY: Final = 86_400.0


@dataclass
class _Window:
    name: str
    seconds: float
    most: int
    burst: int
    tat: float = 0.0  # GCRA's theoretical arrival time

    @property
    def interval(self) -> float:
        return self.seconds / self.most


class SendBudget:
    """What may be sent when, under ``limits`` (see the module docstring). Not
    thread-safe: the outbox's worker alone uses it."""

    def __init__(self, limits: SendLimits) -> None:
        self.limits = limits
        self._windows: list[_Window] = []
        if limits.emails_per_minute:
            n = limits.emails_per_minute
            self._windows.append(_Window("emails-per-minute", MINUTE, n, max(1, n // 10)))
        if limits.emails_per_day:
            n = limits.emails_per_day
            self._windows.append(_Window("emails-per-day", DAY, n, max(1, n // 24)))
        self._sent: list[float] = []  # send times within the longest window, in order
        self._hold_until = 0.0

    @property
    def active(self) -> bool:
        return bool(self._windows)

    def _count(self, now: float, seconds: float) -> int:
        return len(self._sent) - bisect.bisect_right(self._sent, now - seconds)

    def delay(self, now: float) -> float:
        """Seconds to wait before the next email may go (0: now)."""
        wait = self._hold_until - now
        for window in self._windows:
            # pacing: allowed once now >= TAT - (burst - 1) * interval
            wait = max(wait, window.tat - (window.burst - 1) * window.interval - now)
            # the hard cap: the oldest of the last N sends must leave the window first
            if self._count(now, window.seconds) >= window.most:
                oldest = self._sent[len(self._sent) - window.most]
                wait = max(wait, oldest + window.seconds - now)
        return max(0.0, wait)

    def holder(self, now: float) -> str:
        """What makes the outbox wait now, for the log: the limit, or the server."""
        if self._hold_until > now:
            return "the server throttles sending"
        for window in self._windows:
            used = self._count(now, window.seconds)
            if used >= window.most or window.tat - (window.burst - 1) * window.interval > now:
                span = f"{window.seconds:.0f} s"
                return f"{window.name}: {window.most} ({used} sent in the last {span})"
        return "nothing"

    def spent(self, now: float) -> None:
        """One email went (one SMTP transaction) at ``now`` (this process's, or another's
        read from the account's ledger: ``ledger``)."""
        for window in self._windows:
            window.tat = max(window.tat, now) + window.interval
        if self._windows:
            bisect.insort(self._sent, now)  # (another process's may come late)
            longest = max(w.seconds for w in self._windows)
            del self._sent[: bisect.bisect_right(self._sent, now - longest)]

    def throttled(self, now: float, seconds: float) -> None:
        """The server refused for a rate or quota: nothing goes for ``seconds``."""
        self._hold_until = max(self._hold_until, now + seconds)

    def used(self, now: float) -> dict[str, tuple[int, int]]:
        """Per limit: (emails sent in its window, its limit)."""
        return {w.name: (self._count(now, w.seconds), w.most) for w in self._windows}

    def day_left_s(self, now: float, recent_s: float = 600.0) -> float | None:
        """At the rate of the last ``recent_s`` seconds, how long the rest of the day's
        budget lasts (None: no day limit, or nothing sent lately)."""
        day = next((w for w in self._windows if w.seconds == DAY), None)
        if day is None:
            return None
        recent = self._count(now, recent_s)
        if not recent:
            return None
        return max(0, day.most - self._count(now, DAY)) / (recent / recent_s)
