"""Layer 4: the subscription and service handlers.

They hold the routing tables (topic -> subscriptions, service -> servers, client GID ->
client) and act on the route :func:`emailmw._core.protocol.classify` computed. They run on the
polling thread; registration may happen on any thread (tables are copy-on-write tuples
swapped under a lock, so dispatch never takes a lock). Every entity an email is handed to
holds its :class:`~emailmw._delivery.polling.Ticket` until the application is done with it.
"""

from __future__ import annotations

import threading
from typing import Generic, Protocol, TypeVar

from .._core.log import get_logger
from .._core.protocol import (
    AckRoute,
    PublishRoute,
    RequestRoute,
    ResponseRoute,
    Route,
    outside_domains,
    reply_addresses,
)
from .._core.types import Ack, Email, MessageInfo, ServiceInfo
from .polling import NO_TICKET, Ticket

__all__ = ["AckHandler", "ServiceHandler", "SubscriptionHandler", "Table"]

_log = get_logger("handlers")


class MessageSink(Protocol):
    def _push_message(self, body: str, info: MessageInfo, ticket: Ticket) -> None: ...


class RequestSink(Protocol):
    def _push_request(self, email: Email, info: ServiceInfo, ticket: Ticket) -> None: ...


class AckSink(Protocol):
    @property
    def topic(self) -> str: ...

    def _push_ack(self, ack: Ack) -> None: ...


class ResponseSink(Protocol):
    def _push_response(self, email: Email, info: ServiceInfo, ticket: Ticket) -> None: ...


K = TypeVar("K")
V = TypeVar("V")


class Table(Generic[K, V]):
    """key -> tuple of values, copy-on-write: readers never lock. (The routing handler's
    endpoint table is one too.)"""

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

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __bool__(self) -> bool:
        return bool(self._rows)


class SubscriptionHandler:
    """Delivers every publish email to each subscription of its Subject."""

    def __init__(self) -> None:
        self._subscriptions: Table[str, MessageSink] = Table()

    def register(self, topic: str, subscription: MessageSink) -> None:
        self._subscriptions.add(topic, subscription)

    def unregister(self, topic: str, subscription: MessageSink) -> None:
        self._subscriptions.remove(topic, subscription)

    def serves_any(self) -> bool:
        """Whether a subscription is registered."""
        return bool(self._subscriptions)

    def __call__(self, email: Email, route: Route, ticket: Ticket = NO_TICKET) -> None:
        if isinstance(route, PublishRoute):
            for subscription in self._subscriptions.get(route.topic):
                subscription._push_message(email.body, route.info, ticket.hold(takes=True))


class ServiceHandler:
    """Delivers requests by Subject to every server of the service, and responses to the
    client whose GID they carry (which keeps only answers to its own pending requests).

    A request whose reply would go outside ``reply_domains`` (None: anywhere) is logged
    and never handed to a server: a server answers only where it is allowed to send.
    """

    def __init__(self, reply_domains: frozenset[str] | None = None) -> None:
        self._servers: Table[str, RequestSink] = Table()
        self._clients: Table[int, ResponseSink] = Table()
        self._reply_domains = reply_domains
        #: requests not handed to any server because of ``reply-domains``
        self.refused_requests = 0

    def register_server(self, service: str, server: RequestSink) -> None:
        self._servers.add(service, server)

    def unregister_server(self, service: str, server: RequestSink) -> None:
        self._servers.remove(service, server)

    def register_client(self, gid: int, client: ResponseSink) -> None:
        self._clients.add(gid, client)

    def unregister_client(self, gid: int, client: ResponseSink) -> None:
        self._clients.remove(gid, client)

    def serves_any(self) -> bool:
        """Whether a server or a client is registered."""
        return bool(self._servers) or bool(self._clients)

    def __call__(self, email: Email, route: Route, ticket: Ticket = NO_TICKET) -> None:
        if isinstance(route, RequestRoute):
            servers = self._servers.get(route.service)
            if not servers:
                return
            outside = outside_domains(reply_addresses(email), self._reply_domains)
            if outside:
                self.refused_requests += 1
                _log.warning(
                    "request %s to %r not served: its reply would go to %s, outside "
                    "reply-domains (%s)",
                    email.message_id,
                    route.service,
                    ", ".join(outside),
                    ", ".join(sorted(self._reply_domains or ())),
                )
                return
            for server in servers:
                server._push_request(email, route.info, ticket.hold())
        elif isinstance(route, ResponseRoute):
            gid = route.info.client_gid.value
            clients = self._clients.get(gid)
            if not clients:
                _log.debug("response %s for client %d that is not here", email.message_id, gid)
                return
            for client in clients:
                client._push_response(email, route.info, ticket.hold())


class AckHandler:
    """Hands each acknowledgement to the publisher whose GID it names, when it is on that
    publisher's topic (the one the signer's subscribe grant was checked on); any other is
    ignored."""

    def __init__(self) -> None:
        self._publishers: Table[int, AckSink] = Table()

    def register(self, gid: int, publisher: AckSink) -> None:
        self._publishers.add(gid, publisher)

    def unregister(self, gid: int, publisher: AckSink) -> None:
        self._publishers.remove(gid, publisher)

    def __call__(self, email: Email, route: Route, ticket: Ticket = NO_TICKET) -> None:
        if isinstance(route, AckRoute):
            for publisher in self._publishers.get(route.info.publisher_gid.value):
                if publisher.topic == route.topic:
                    publisher._push_ack(route.info)
