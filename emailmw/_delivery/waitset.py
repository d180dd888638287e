"""Layer 6: wait sets and the ``wait_for_*`` helpers, over ``_waitable``'s base.

Waiting is event-driven. Every waitable (subscription, client, server, guard condition) keeps
the condition variables of the wait sets it is in and notifies them when it becomes ready;
a waiting thread sleeps in ``Condition.wait`` and uses no CPU. Readiness is re-checked under
the wait set's lock before sleeping, so no wake-up is lost.

Timeouts are in seconds: ``< 0`` blocks until something is ready, ``0`` only polls, ``> 0``
waits at most that long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from .._core.closeable import Closeable
from .._core.errors import ClosedError, InvalidArgumentError
from .._core.waitables import (
    GuardCondition,
    Waitable,
    deadline_after,
    wait_until_deadline,
)

if TYPE_CHECKING:
    from .._core.types import MessageInfo, ServiceInfo, ServiceRequest
    from .entities import ServiceClient, ServiceServer, Subscription

__all__ = [
    "WaitResult",
    "WaitSet",
    "wait_for_message",
    "wait_for_message_with_info",
    "wait_for_request",
    "wait_for_request_with_info",
    "wait_for_response",
    "wait_for_response_with_info",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WaitResult:
    """What a :meth:`WaitSet.wait` found ready. False (``timed_out``) when nothing was."""

    subscriptions: tuple[Subscription, ...] = ()
    clients: tuple[ServiceClient, ...] = ()
    servers: tuple[ServiceServer, ...] = ()
    guard_conditions: tuple[GuardCondition, ...] = ()

    @property
    def timed_out(self) -> bool:
        return not self

    def __bool__(self) -> bool:
        return bool(self.subscriptions or self.clients or self.servers or self.guard_conditions)

    def __contains__(self, item: object) -> bool:
        return any(
            item is x
            for group in (self.subscriptions, self.clients, self.servers, self.guard_conditions)
            for x in group
        )


class WaitSet(Closeable):
    """Waits until one of its subscriptions has a message, clients a response, servers a
    request, or guard conditions a trigger.

    Reusable: ``wait()`` can be called again and again; ``clear()`` empties it. One thread
    waits on a wait set at a time; the entities in it can be fed and triggered from any
    thread. An empty wait set is a sleep (``wait(-1)`` on it raises ``ValueError``, as it
    would never return).
    """

    def __init__(
        self,
        subscriptions: Iterable[Subscription] = (),
        clients: Iterable[ServiceClient] = (),
        servers: Iterable[ServiceServer] = (),
        guard_conditions: Iterable[GuardCondition] = (),
    ) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._subscriptions: list[Subscription] = []
        self._clients: list[ServiceClient] = []
        self._servers: list[ServiceServer] = []
        self._guard_conditions: list[GuardCondition] = []
        self._closed = False
        for sub in subscriptions:
            self.add_subscription(sub)
        for client in clients:
            self.add_client(client)
        for server in servers:
            self.add_server(server)
        for gc in guard_conditions:
            self.add_guard_condition(gc)

    def _add(self, group: list[T], item: T) -> None:
        if self._closed:
            raise ClosedError("wait set is closed")
        if any(x is item for x in group):
            return
        assert isinstance(item, Waitable)
        item._attach(self._cond)
        group.append(item)

    def add_subscription(self, subscription: Subscription) -> None:
        self._add(self._subscriptions, subscription)

    def add_client(self, client: ServiceClient) -> None:
        self._add(self._clients, client)

    def add_server(self, server: ServiceServer) -> None:
        self._add(self._servers, server)

    def add_guard_condition(self, guard_condition: GuardCondition) -> None:
        guard_condition._claim(self)
        try:
            self._add(self._guard_conditions, guard_condition)
        except BaseException:
            guard_condition._release(self)
            raise

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        return tuple(self._subscriptions)

    @property
    def clients(self) -> tuple[ServiceClient, ...]:
        return tuple(self._clients)

    @property
    def servers(self) -> tuple[ServiceServer, ...]:
        return tuple(self._servers)

    @property
    def guard_conditions(self) -> tuple[GuardCondition, ...]:
        return tuple(self._guard_conditions)

    def _all(self) -> list[Waitable]:
        return [*self._subscriptions, *self._clients, *self._servers, *self._guard_conditions]

    def clear(self) -> None:
        """Remove everything (guard conditions become free for another wait set)."""
        for item in self._all():
            item._detach(self._cond)
        for gc in self._guard_conditions:
            gc._release(self)
        self._subscriptions.clear()
        self._clients.clear()
        self._servers.clear()
        self._guard_conditions.clear()

    def close(self) -> None:
        """Clear and refuse further use. Idempotent."""
        self.clear()
        self._closed = True

    def _ready(self) -> WaitResult:
        for item in self._all():
            if item._closed:
                raise ClosedError(f"{item!r} in the wait set was closed")
        return WaitResult(
            tuple(s for s in self._subscriptions if s._is_ready()),
            tuple(c for c in self._clients if c._is_ready()),
            tuple(s for s in self._servers if s._is_ready()),
            tuple(g for g in self._guard_conditions if g._is_ready()),
        )

    def wait(self, timeout: float = -1) -> WaitResult:
        """Wait until something is ready (see the module docstring for ``timeout``).

        Returns what is ready; reported guard-condition triggers are consumed. Raises
        :class:`~emailmw.ClosedError` if the wait set or one of its entities is closed.
        """
        if self._closed:
            raise ClosedError("wait set is closed")
        for item in self._all():
            item._before_wait()
        deadline = None if timeout < 0 else time.monotonic() + timeout
        with self._cond:
            if not self._all():
                if deadline is None:
                    raise InvalidArgumentError(
                        "wait(timeout < 0) on an empty wait set would never return"
                    )
                self._cond.wait(timeout)
                return WaitResult()
            while True:
                result = self._ready()
                if result:
                    break
                if deadline is None:
                    self._cond.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        for gc in result.guard_conditions:
            gc._take()
        return result


def wait_for_message(subscription: Subscription, timeout: float = -1) -> str | None:
    """The next message of ``subscription``, waiting up to ``timeout``; None on timeout."""
    got = wait_for_message_with_info(subscription, timeout)
    return None if got is None else got[0]


def wait_for_message_with_info(
    subscription: Subscription, timeout: float = -1
) -> tuple[str, MessageInfo] | None:
    """Like :func:`wait_for_message`, with the message's :class:`~emailmw.MessageInfo`."""
    deadline = deadline_after(timeout)
    while wait_until_deadline(subscription, subscription.has_message, deadline):
        got = subscription.get_message_with_info()
        if got is not None:
            return got
    return None


def wait_for_request(server: ServiceServer, timeout: float = -1) -> ServiceRequest | None:
    """The next request of ``server``, waiting up to ``timeout``; None on timeout."""
    got = wait_for_request_with_info(server, timeout)
    return None if got is None else got[0]


def wait_for_request_with_info(
    server: ServiceServer, timeout: float = -1
) -> tuple[ServiceRequest, ServiceInfo] | None:
    """Like :func:`wait_for_request`, with the request's :class:`~emailmw.ServiceInfo`."""
    deadline = deadline_after(timeout)
    while wait_until_deadline(server, server.has_request, deadline):
        got = server.get_request_with_info()
        if got is not None:
            return got
    return None


def wait_for_response(
    client: ServiceClient, sequence_number: int, timeout: float = -1
) -> str | None:
    """The response to request ``sequence_number``, waiting up to ``timeout``; None on timeout."""
    got = wait_for_response_with_info(client, sequence_number, timeout)
    return None if got is None else got[0]


def wait_for_response_with_info(
    client: ServiceClient, sequence_number: int, timeout: float = -1
) -> tuple[str, ServiceInfo] | None:
    """Like :func:`wait_for_response`, with the response's :class:`~emailmw.ServiceInfo`."""
    if wait_until_deadline(
        client, lambda: client.has_response(sequence_number), deadline_after(timeout)
    ):
        return client.get_response_with_info(sequence_number)
    return None
