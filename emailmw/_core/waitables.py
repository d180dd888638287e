"""The base of waiting: what a wait set waits on (:class:`Waitable`), the guard condition,
and blocking until one is ready (:func:`wait_until`, :func:`wait_any`). Imports nothing of
emailmw but its exceptions, so entities, wait sets and executors all build on it.

Waiting is event-driven: a waitable keeps the condition variables of whoever waits on it and
notifies them when its state changes; a waiting thread sleeps in ``Condition.wait``.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable, Sequence

from .errors import ClosedError, GuardConditionAlreadyInUseError

__all__ = [
    "GuardCondition",
    "Waitable",
    "deadline_after",
    "wait_any",
    "wait_until",
    "wait_until_deadline",
]

_attach_lock = threading.Lock()


class Waitable(abc.ABC):
    """Base of everything a wait set can wait on: subscriptions, clients, servers, guard
    conditions, and any new kind of entity.

    Contract for a subclass:

    * ``_is_ready()`` says whether a wait on it would return now; it is called with the
      waiter's lock held, so it must be quick and must not block or take a lock a notifier
      holds while notifying.
    * After every change that can make it ready (a message queued, a trigger, a close), it
      calls :meth:`_notify`; a waiter re-checks ``_is_ready()`` under its own lock, so no
      wake-up is lost.
    * ``_closed`` is True once it is closed: a waiter on it alone then raises
      :class:`~emailmw.ClosedError`; ``_before_wait()`` runs before anything waits on it.

    ``_attach``/``_detach``/``_notify`` are thread-safe.
    """

    _closed: bool = False

    def __init__(self) -> None:
        self._wakers: tuple[threading.Condition, ...] = ()

    @abc.abstractmethod
    def _is_ready(self) -> bool:
        """Whether a wait on this waitable would return now (quick; never blocks)."""

    def _before_wait(self) -> None:  # noqa: B027 - a hook, empty unless a subclass needs it
        """Called before anything waits on this waitable (entities start their context's
        receiving here)."""

    def _attach(self, cond: threading.Condition) -> None:
        with _attach_lock:
            self._wakers = (*self._wakers, cond)

    def _detach(self, cond: threading.Condition) -> None:
        with _attach_lock:
            self._wakers = tuple(c for c in self._wakers if c is not cond)

    def _notify(self) -> None:
        """Wake every wait set this waitable is in. Call after the state changed."""
        for cond in self._wakers:
            with cond:
                cond.notify_all()


class GuardCondition(Waitable):
    """A condition any thread can trigger to wake a wait set.

    A guard condition is in at most one wait set at a time; adding it to a second raises
    :class:`~emailmw.GuardConditionAlreadyInUseError` until the first is cleared or closed.
    A trigger stays set until a ``wait()`` reports it; several triggers before that wait
    count once. ``trigger()`` is thread-safe.
    """

    def __init__(self) -> None:
        super().__init__()
        self._triggered = False
        self._owner: object | None = None  # the wait set it is in

    def trigger(self) -> None:
        self._triggered = True
        self._notify()

    @property
    def triggered(self) -> bool:
        return self._triggered

    def _is_ready(self) -> bool:
        return self._triggered

    def _take(self) -> None:
        self._triggered = False

    def _claim(self, owner: object) -> None:
        with _attach_lock:
            if self._owner is not None and self._owner is not owner:
                raise GuardConditionAlreadyInUseError(
                    "guard condition is already in another wait set; clear that one first"
                )
            self._owner = owner

    def _release(self, owner: object) -> None:
        with _attach_lock:
            if self._owner is owner:
                self._owner = None


def deadline_after(timeout: float) -> float | None:
    """The monotonic deadline ``timeout`` seconds from now; None for a negative timeout."""
    return None if timeout < 0 else time.monotonic() + timeout


def _wait(
    waitables: Sequence[Waitable],
    ready: Callable[[], bool],
    deadline: float | None,
    closed: Callable[[], bool] = lambda: False,
) -> bool:
    """Block until ``ready()`` (re-checked, under a lock, whenever one of ``waitables``
    notifies) or the monotonic ``deadline`` (None: none); True if ready. Raises
    :class:`ClosedError` when ``closed()`` says so first."""
    cond = threading.Condition(threading.Lock())
    for waitable in waitables:
        waitable._attach(cond)
    try:
        with cond:
            while not ready():
                if closed():
                    raise ClosedError(f"{waitables[0]!r} is closed")
                if deadline is None:
                    cond.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                cond.wait(remaining)
            return True
    finally:
        for waitable in waitables:
            waitable._detach(cond)


def wait_until_deadline(
    entity: Waitable, ready: Callable[[], bool], deadline: float | None
) -> bool:
    """Block until ``ready()`` or the deadline; True if ready. Raises ClosedError if closed."""
    entity._before_wait()
    if ready():
        return True
    if entity._closed:
        raise ClosedError(f"{entity!r} is closed")
    if deadline is not None and deadline <= time.monotonic():
        return False
    return _wait((entity,), ready, deadline, lambda: entity._closed)


def wait_until(entity: Waitable, ready: Callable[[], bool], timeout: float = -1) -> bool:
    """Block until ``ready()`` holds (re-checked whenever ``entity`` notifies), at most
    ``timeout`` seconds (< 0: no limit); True if it holds. Raises :class:`ClosedError` when
    ``entity`` is closed."""
    return wait_until_deadline(entity, ready, deadline_after(timeout))


def wait_any(waitables: Sequence[Waitable], timeout: float | None) -> bool:
    """Block until one of ``waitables`` is ready, at most ``timeout`` seconds (None: no
    limit); True if one is. Closed waitables are skipped (a closed one is never ready).
    What waits is told first (``_before_wait``); nothing is taken: the caller takes what
    is ready. Event-driven, as a wait set: no polling."""
    for waitable in waitables:
        waitable._before_wait()
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    return _wait(
        waitables, lambda: any(w._is_ready() for w in waitables if not w._closed), deadline
    )
