"""The YMP face (``docs/addressing.md``, "YMP"): hosts, protocols, services and actions,
with the spec's JSON envelope validated strictly.

A :class:`YmpHost` is its context's hub. A request is routed host -> protocol -> service
-> action handler, each layer checking the message is addressed to it; an answer goes to
the future of the request whose ``id`` its ``reply-to`` names. The connection rule ("MUST
validate sender.host against the connection"): the email must come from the mail address
the route table gives for ``sender.host`` (the host's account, or the gateway that relays
for it); an answer counts only from the host its request went to. Whatever fails a check
is logged with its reason, counted on the router and left in the mailbox. One email may
carry a packet (``{"messages": [...]}``).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from .._core.addressing import Address, Envelope
from .._core.errors import RoutingError
from .._core.futures import Future, Pending
from .._core.log import get_logger
from .._core.payloads import YmpAnswer, YmpRequest, read_ymp_packet
from .._core.protocol import address_of
from .._delivery.context import Context, resolve
from .._delivery.routing import FaceEndpoint, Refused, Routed

__all__ = ["Action", "YmpAnswer", "YmpHost", "YmpRequest"]

_log = get_logger("ymp")
FACE: Final = "ymp"
#: the endpoint name of a host on its hub: protocol, service and action are the host's
#: own routing layers
ENDPOINT: Final = "ymp"

#: an action handler: the request in, the answer's payload out (None: no answer)
Action = Callable[[YmpRequest], Mapping[str, Any] | None]


#: what a YMP host delivers: an email's messages
_Work = tuple[Routed, list[YmpRequest | YmpAnswer]]


class YmpHost(FaceEndpoint[_Work]):
    """The YMP host of a context (its hub: ``routing.hub``). Register services with
    :meth:`add_service`, call others with :meth:`request`. Handlers run one at a time on
    the host's delivery thread. Thread-safe; :meth:`close` unregisters."""

    face = FACE
    context: Context

    def __init__(self, name: str | None = None, *, context: Context | None = None) -> None:
        ctx = resolve(context)
        hub = ctx.router.hub
        if name is not None and name != hub:
            raise RoutingError(
                f"this context's hub is {hub!r}: set routing.hub to {name!r} in its "
                "configuration to make it that YMP host"
            )
        self.name = hub
        self._lock = threading.Lock()
        self._services: dict[tuple[str, str], dict[str, Action]] = {}
        # pending request id -> its future, with the host the request went to
        self._pending: Pending[str, YmpAnswer, str] = Pending(f"a request of YMP host {hub!r}")
        super().__init__(ctx, ENDPOINT, label=hub)

    def __repr__(self) -> str:
        return f"<emailmw.ymp.YmpHost {self.name!r}>"

    def add_service(self, protocol: str, service: str, actions: Mapping[str, Action]) -> None:
        """Serve ``service`` of ``protocol``: each request's ``action`` picks its handler,
        whose returned payload (a JSON object) is sent back as the answer."""
        with self._lock:
            self._services[(protocol, service)] = dict(actions)

    # ---------------------------------------------------------------- sending

    def request(
        self,
        host: str,
        protocol: str,
        service: str,
        action: str,
        payload: Mapping[str, Any],
        *,
        sender: tuple[str, str] = ("client", "client"),
    ) -> Future[YmpAnswer]:
        """Send one request; the future completes with its answer. ``sender`` is this
        side's (protocol, service)."""
        return self.request_many(host, [(protocol, service, action, payload)], sender=sender)[0]

    def request_many(
        self,
        host: str,
        requests: Iterable[tuple[str, str, str, Mapping[str, Any]]],
        *,
        sender: tuple[str, str] = ("client", "client"),
    ) -> list[Future[YmpAnswer]]:
        """Send several requests to ``host`` in one email (a packet); a future each."""
        self._check_open()
        messages, futures = [], []
        for protocol, service, action, payload in requests:
            id_ = uuid.uuid4().hex
            messages.append(
                {
                    "sender": {"host": self.name, "protocol": sender[0], "service": sender[1]},
                    "id": id_,
                    "host": host,
                    "protocol": protocol,
                    "service": service,
                    "action": action,
                    "payload": dict(payload),
                }
            )
            futures.append(self._pending.add(id_, host, f"{protocol}/{service} {action} at {host}"))
        if not messages:
            return []
        first = messages[0]
        subject = f"ymp {first['protocol']}/{first['service']} {first['action']}"
        try:
            self._send(host, messages, subject)
        except BaseException:
            for message in messages:
                self._pending.discard(str(message["id"]))
            raise
        return futures

    def _send(self, host: str, messages: list[dict[str, Any]], subject: str) -> None:
        to = Address.make(ENDPOINT, host)
        if isinstance(to, str):
            raise RoutingError(f"host {host!r}: {to}")
        envelope = Envelope(to, Address(ENDPOINT, self.name), FACE)
        body = messages[0] if len(messages) == 1 else {"messages": messages}
        self._router.send(envelope, subject, json.dumps(body, ensure_ascii=False))

    # ---------------------------------------------------------------- receiving

    def _accept(self, message: Routed) -> _Work | Refused:
        """The email's messages, or why it cannot be handled as a whole (packet,
        connection)."""
        found = read_ymp_packet(message.body)
        if isinstance(found, str):
            return Refused(f"bad YMP message: {found}")
        hosts = {m.sender_host for m in found}
        if len(hosts) != 1:
            return Refused("a packet's messages come from more than one sender host")
        sender_host = hosts.pop()
        route = self._router.route(sender_host)
        connection = address_of(message.mail_from)
        if route is None:
            return Refused(
                f"sender.host {sender_host!r} has no route here: its connection is unknown"
            )
        if address_of(route.address) != connection:
            return Refused(
                f"sender.host {sender_host!r} does not match the connection: the email "
                f"comes from {connection}, that host's mail comes from {route.address}"
            )
        return message, found

    def _deliver(self, work: _Work) -> None:
        message, found = work
        for item in found:
            reason = self._route(item)
            if reason is not None:
                self._router.drop(message.message_id, message.envelope, reason)

    def _route(self, message: YmpRequest | YmpAnswer) -> str | None:
        """The layered routing of one message; why it was not handled, or None."""
        if message.host != self.name:
            return f"addressed to host {message.host!r}, not to this host {self.name!r}"
        if isinstance(message, YmpAnswer):
            pending = self._pending.get(message.reply_to)
            if pending is None:
                return f"answer to {message.reply_to!r}: no pending request with that id"
            future, asked = pending
            if message.sender_host != asked:
                return (
                    f"answer to {message.reply_to!r} from host {message.sender_host!r}: the "
                    f"request went to host {asked!r}"
                )
            future.set_result(message)
            return None
        with self._lock:
            protocols = {p for p, _ in self._services}
            actions = self._services.get((message.protocol, message.service))
        if message.protocol not in protocols:
            return f"unknown protocol {message.protocol!r}"
        if actions is None:
            return f"unknown service {message.service!r} of protocol {message.protocol!r}"
        handler = actions.get(message.action)
        if handler is None:
            return f"unknown action {message.action!r} of {message.protocol}/{message.service}"
        try:
            payload = handler(message)
        except Exception as exc:  # noqa: BLE001 - logged; YMP has no error answer
            _log.warning("YMP action %r raised %s: %s", message.action, type(exc).__name__, exc)
            return None
        if payload is not None:
            self._answer(message, payload)
        return None

    def _answer(self, request: YmpRequest, payload: Mapping[str, Any]) -> None:
        answer = {
            "sender": {"host": self.name, "protocol": request.protocol, "service": request.service},
            "id": uuid.uuid4().hex,
            "reply-to": request.id,
            "host": request.sender_host,
            "protocol": request.sender_protocol,
            "service": request.sender_service,
            "payload": dict(payload),
        }
        try:
            self._send(request.sender_host, [answer], f"ymp answer to {request.action}")
        except Exception as exc:  # noqa: BLE001 - logged: the host goes on
            _log.warning("cannot answer %s at %r: %s", request.id, request.sender_host, exc)

    def close(self) -> None:
        """Unregister; pending requests fail with :class:`~emailmw.ClosedError`."""
        super().close()

    def _closed_hook(self) -> None:
        self._pending.fail_all(f"YMP host {self.name!r}")
