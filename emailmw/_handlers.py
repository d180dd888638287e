"""Layer 4: the subscription and service handlers.

They hold the routing tables (topic -> subscriptions, service -> servers, client GID ->
client) and act on the route :func:`emailmw._protocol.classify` computed. They run on the
polling thread; registration may happen on any thread (tables are copy-on-write tuples
swapped under a lock, so dispatch never takes a lock).
"""

from __future__ import annotations

import threading
from typing import Generic, Protocol, TypeVar

from ._log import get_logger
from ._protocol import PublishRoute, RequestRoute, ResponseRoute, Route
from ._types import Email, MessageInfo, ServiceInfo

__all__ = ["ServiceHandler", "SubscriptionHandler"]

_log = get_logger("handlers")


class MessageSink(Protocol):
    def _push_message(self, body: str, info: MessageInfo) -> None: ...


class RequestSink(Protocol):
    def _push_request(self, email: Email, info: ServiceInfo) -> None: ...


class ResponseSink(Protocol):
    def _push_response(self, body: str, info: ServiceInfo) -> None: ...


K = TypeVar("K")
V = TypeVar("V")


class _Table(Generic[K, V]):
    """key -> tuple of values, copy-on-write: readers never lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[K, tuple[V, ...]] = {}

    def add(self, key: K, value: V) -> None:
        with self._lock:
            rows = dict(self._rows)
            rows[key] = (*rows.get(key, ()), value)
            self._rows = rows

    def remove(self, key: K, value: V) -> None:
        with self._lock:
            rows = dict(self._rows)
            remaining = tuple(v for v in rows.get(key, ()) if v is not value)
            if remaining:
                rows[key] = remaining
            else:
                rows.pop(key, None)
            self._rows = rows

    def get(self, key: K) -> tuple[V, ...]:
        return self._rows.get(key, ())


class SubscriptionHandler:
    """Delivers every publish email to each subscription of its Subject."""

    def __init__(self) -> None:
        self._subscriptions: _Table[str, MessageSink] = _Table()

    def register(self, topic: str, subscription: MessageSink) -> None:
        self._subscriptions.add(topic, subscription)

    def unregister(self, topic: str, subscription: MessageSink) -> None:
        self._subscriptions.remove(topic, subscription)

    def __call__(self, email: Email, route: Route) -> None:
        if isinstance(route, PublishRoute):
            for subscription in self._subscriptions.get(route.topic):
                subscription._push_message(email.body, route.info)


class _SeenSequenceNumbers:
    """Which sequence numbers arrived: a low-water mark plus the set above it (bounded by
    the out-of-order window, not by the number of calls)."""

    __slots__ = ("above", "low")

    def __init__(self) -> None:
        self.low = 0
        self.above: set[int] = set()

    def add(self, seq: int) -> bool:
        """Record ``seq``; False if it was already there."""
        if seq < self.low or seq in self.above:
            return False
        self.above.add(seq)
        while self.low in self.above:
            self.above.discard(self.low)
            self.low += 1
        return True


class ServiceHandler:
    """Delivers requests by Subject to every server of the service, and responses to the
    client whose GID they carry, dropping (and logging) a response whose sequence number
    that client already received."""

    def __init__(self) -> None:
        self._servers: _Table[str, RequestSink] = _Table()
        self._clients: _Table[int, ResponseSink] = _Table()
        self._seen: dict[int, _SeenSequenceNumbers] = {}

    def register_server(self, service: str, server: RequestSink) -> None:
        self._servers.add(service, server)

    def unregister_server(self, service: str, server: RequestSink) -> None:
        self._servers.remove(service, server)

    def register_client(self, gid: int, client: ResponseSink) -> None:
        self._seen[gid] = _SeenSequenceNumbers()
        self._clients.add(gid, client)

    def unregister_client(self, gid: int, client: ResponseSink) -> None:
        self._clients.remove(gid, client)
        self._seen.pop(gid, None)

    def __call__(self, email: Email, route: Route) -> None:
        if isinstance(route, RequestRoute):
            for server in self._servers.get(route.service):
                server._push_request(email, route.info)
        elif isinstance(route, ResponseRoute):
            gid = route.info.client_gid.value
            clients = self._clients.get(gid)
            if not clients:
                _log.debug("response %s for client %d that is not here", email.message_id, gid)
                return
            seen = self._seen.get(gid)
            if seen is not None and not seen.add(route.info.sequence_number):
                _log.info(
                    "dropped duplicate response %s: client %d already received sequence "
                    "number %d of service %r",
                    email.message_id,
                    gid,
                    route.info.sequence_number,
                    route.service,
                )
                return
            for client in clients:
                client._push_response(email.body, route.info)
