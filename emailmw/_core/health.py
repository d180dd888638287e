"""Whether something that retries works: a state machine fed each attempt's outcome, no
I/O (the polling thread's receiving, the outbox's sending): one line when it starts
failing, one when it fails differently, one when it works again; nothing for a failure
the first retry cures, nor for the same failure again."""

from __future__ import annotations

__all__ = ["Health"]


class Health:
    """Whether ``doing`` works (``"receiving"``, ``"sending"``).

    A failure the first retry cures (a dropped connection, a server restarting) is a blip,
    logged at DEBUG by the caller. One that survives its first retry puts it in the
    failing state: :attr:`error` holds it (None while it works), :attr:`since` is the
    monotonic time of the first failed attempt. ``failed(exc, now)`` and ``succeeded(now)``
    return the log line a change of state calls for (level, text), or None: entering the
    failing state and failing differently are ERRORs, the same failure again is not news,
    working again is a WARNING. ``retrying`` says how it retries, in the first line. Not
    thread-safe: one thread feeds it.
    """

    def __init__(self, doing: str, retrying: str = "retrying") -> None:
        self.doing = doing
        self.retrying = retrying
        self.error: Exception | None = None
        self.since: float | None = None
        self.attempts = 0

    def failed(self, exc: Exception, now: float) -> tuple[str, str] | None:
        self.attempts += 1
        if self.attempts == 1:
            self.since = now
            return None  # a blip until its retry fails too
        previous, self.error = self.error, exc
        if previous is None:
            return ("error", f"{self.doing} fails: {exc} ({self.retrying})")
        if (type(previous), str(previous)) != (type(exc), str(exc)):
            return ("error", f"{self.doing} now fails differently: {exc} (still retrying)")
        return None

    def succeeded(self, now: float) -> tuple[str, str] | None:
        failing, since, attempts = self.error is not None, self.since, self.attempts
        self.error, self.since, self.attempts = None, None, 0
        if not failing:
            return None
        seconds = now - (since if since is not None else now)
        return (
            "warning",
            f"{self.doing} works again after {seconds:.1f} s and {attempts} attempts",
        )
