"""emailmw's protocol over emails: building publish/request/response emails and routing them.

Pure functions over :class:`Email`; no I/O and no state. The handlers (``_handlers.py``) call
:func:`classify` and act on the route; the entities call the ``*_email`` builders.

Routing rules (wire-compatible with rmw_email):

* **response**: non-empty ``In-Reply-To`` plus ``Client-GID`` and ``Request-Sequence-Number``;
  routed to the client with that GID.
* **request**: no ``In-Reply-To``, plus ``Client-GID`` and ``Request-Sequence-Number``; routed
  by Subject to every server of that service.
* **publish**: ``Publisher-GID`` (and no ``Client-GID``); routed by Subject to every
  subscription of that topic.
* anything else is **unroutable** (foreign mail, or ours with broken metadata), with a reason.

Every emailmw email also carries ``Source-Timestamp`` (ns since the epoch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Final

from .addressing import Envelope, read_envelope
from .errors import InvalidArgumentError, InvalidHeaderError
from .faces import unknown_face
from .types import Ack, Email, Gid, Headers, MessageInfo, RoutedInfo, ServiceInfo, gid_value
from .wire import (
    HEADER_ACK_PUBLISHER_GID,
    HEADER_ACK_SEQUENCE_NUMBER,
    HEADER_ACK_SUBSCRIBER,
    HEADER_CLIENT_GID,
    HEADER_DELIVERY_COUNT,
    HEADER_MESSAGE_TYPE,
    HEADER_PUBLISHER_GID,
    HEADER_PUBLISHER_SEQUENCE_NUMBER,
    HEADER_REQUEST_SEQUENCE_NUMBER,
    HEADER_RESENT,
    HEADER_SOURCE_TIMESTAMP,
    is_message_id,
    make_reply,
    validate_header,
)

__all__ = [
    "AckRoute",
    "PublishRoute",
    "Recipients",
    "RequestRoute",
    "ResponseRoute",
    "Route",
    "RoutedRoute",
    "Unroutable",
    "ack_email",
    "address_domain",
    "address_of",
    "classify",
    "outside_domains",
    "publish_email",
    "read_metadata",
    "reply_addresses",
    "routed_email",
    "request_email",
    "response_email",
]

# emailmw's metadata headers, name -> lower-case name (look-ups skip the lower-casing)
_LOWER: Final = {
    name: name.lower()
    for name in (
        HEADER_SOURCE_TIMESTAMP,
        HEADER_PUBLISHER_GID,
        HEADER_PUBLISHER_SEQUENCE_NUMBER,
        HEADER_CLIENT_GID,
        HEADER_REQUEST_SEQUENCE_NUMBER,
    )
}
_METADATA_HEADERS: Final = frozenset(_LOWER.values())


@dataclass(frozen=True, slots=True)
class Recipients:
    """Who an outgoing email goes to (``to``, ``cc``, ``bcc``) and who it is from."""

    from_: str = ""
    to: tuple[str, ...] = ()
    cc: tuple[str, ...] = ()
    bcc: tuple[str, ...] = ()

    @property
    def all(self) -> tuple[str, ...]:
        """Every address it goes to: ``to``, ``cc`` and ``bcc``."""
        return (*self.to, *self.cc, *self.bcc)


@dataclass(frozen=True, slots=True)
class PublishRoute:
    topic: str
    info: MessageInfo


@dataclass(frozen=True, slots=True)
class RequestRoute:
    service: str
    info: ServiceInfo


@dataclass(frozen=True, slots=True)
class ResponseRoute:
    service: str
    info: ServiceInfo


@dataclass(frozen=True, slots=True)
class RoutedRoute:
    """A routed message (``Route-*`` headers): the routing handler decides on it."""

    envelope: Envelope
    info: RoutedInfo


@dataclass(frozen=True, slots=True)
class AckRoute:
    """An acknowledgement of a published message, for the publisher whose GID it names
    (``info`` is an :class:`~emailmw.Ack`), on ``topic`` (its Subject: a reply keeps the
    message's)."""

    info: Ack
    topic: str = ""


@dataclass(frozen=True, slots=True)
class Unroutable:
    """Not an emailmw email (``malformed`` False) or one with broken metadata (True)."""

    reason: str
    malformed: bool = False


Route = PublishRoute | RequestRoute | ResponseRoute | RoutedRoute | AckRoute | Unroutable


# Headers that say who sent an email, when, and along which path: the sending side and the
# mail servers set them, an application's extra headers may not.
_TRANSPORT_HEADERS: Final = frozenset({"sender", "return-path", "date", "received"})


def _user_headers(headers: Mapping[str, str] | None) -> list[tuple[str, str]]:
    if not headers:
        return []
    items = list(headers.items())
    for name, value in items:
        validate_header(name, value)
        lower = name.lower()
        if lower in _METADATA_HEADERS:
            raise InvalidHeaderError(f"header {name!r} is emailmw metadata and set by emailmw")
        if lower in _TRANSPORT_HEADERS or lower.startswith("resent-"):
            raise InvalidHeaderError(
                f"header {name!r} is set by the sender and the mail servers, not by a message"
            )
    return items


def publish_email(
    topic: str,
    message: str,
    *,
    recipients: Recipients,
    gid: Gid,
    sequence_number: int,
    timestamp_ns: int,
    headers: Mapping[str, str] | None = None,
) -> Email:
    """The email a publisher sends: Subject = topic, body = message, publisher metadata."""
    items = [
        (HEADER_SOURCE_TIMESTAMP, str(timestamp_ns)),
        (HEADER_PUBLISHER_GID, str(gid.value)),
        (HEADER_PUBLISHER_SEQUENCE_NUMBER, str(sequence_number)),
    ]
    if headers:
        items += _user_headers(headers)
    return Email(
        topic,
        message,
        recipients.from_,
        recipients.to,
        recipients.cc,
        recipients.bcc,
        (),
        Headers(items),
    )


def request_email(
    service: str,
    request: str,
    *,
    recipients: Recipients,
    client_gid: Gid,
    sequence_number: int,
    timestamp_ns: int,
) -> Email:
    """The email a service client sends: Subject = service name, client metadata."""
    return Email(
        service,
        request,
        recipients.from_,
        recipients.to,
        recipients.cc,
        recipients.bcc,
        (),
        Headers(
            (
                (HEADER_SOURCE_TIMESTAMP, str(timestamp_ns)),
                (HEADER_CLIENT_GID, str(client_gid.value)),
                (HEADER_REQUEST_SEQUENCE_NUMBER, str(sequence_number)),
            )
        ),
    )


def response_email(request: Email, response: str, *, from_: str, timestamp_ns: int) -> Email:
    """The reply a server sends: the request's client metadata, In-Reply-To its Message-ID."""
    return make_reply(
        request,
        response,
        from_=from_,
        headers=(
            (HEADER_SOURCE_TIMESTAMP, str(timestamp_ns)),
            (HEADER_CLIENT_GID, request.headers[HEADER_CLIENT_GID]),
            (HEADER_REQUEST_SEQUENCE_NUMBER, request.headers[HEADER_REQUEST_SEQUENCE_NUMBER]),
        ),
    )


Metadata = tuple[bool, int, int, int | None]


# Timestamps (ns since the epoch) and sequence numbers are int64 on the sending side (ROS'
# builtin_interfaces and rmw_email): a larger value is not one emailmw or rmw_email sent.
_INT64_MAX: Final = 2**63 - 1


def _uint(item: tuple[str, str] | None, name: str) -> int | None:
    """A header's ``(name, value)`` as an integer in 0 .. 2**63-1; None if absent;
    ValueError if it is not one."""
    if item is None:
        return None
    value = item[1].strip()
    if not value.isdigit() or not value.isascii() or len(value) > 19:
        raise InvalidArgumentError(f"{name} is not an integer from 0 to 2**63-1: {value[:40]!r}")
    number = int(value)
    if number > _INT64_MAX:
        raise InvalidArgumentError(f"{name} is not an integer from 0 to 2**63-1: {value[:40]!r}")
    return number


def _gid(item: tuple[str, str], name: str) -> int:
    text = item[1]
    try:
        return gid_value(text)
    except ValueError:
        raise InvalidArgumentError(f"{name} is not a GID: {text[:40]!r}") from None


_SOURCE_TIMESTAMP: Final = _LOWER[HEADER_SOURCE_TIMESTAMP]
_PUBLISHER_GID: Final = _LOWER[HEADER_PUBLISHER_GID]
_PUBLISHER_SEQUENCE_NUMBER: Final = _LOWER[HEADER_PUBLISHER_SEQUENCE_NUMBER]
_CLIENT_GID: Final = _LOWER[HEADER_CLIENT_GID]
_REQUEST_SEQUENCE_NUMBER: Final = _LOWER[HEADER_REQUEST_SEQUENCE_NUMBER]


def read_metadata(headers: Headers) -> Metadata | Unroutable:
    """emailmw's metadata headers as plain values, or why they are missing or broken.

    Returns ``(is_service, source_timestamp, gid, sequence_number)``: a service email's
    ``Client-GID`` and ``Request-Sequence-Number`` (never None), else a topic message's
    ``Publisher-GID`` and ``Publisher-Sequence-Number`` (None when absent, as from
    rmw_email). :func:`classify` is this plus the route objects; the archive pipeline calls
    it directly, once per stored email.
    """
    item = headers.item  # (name, value): an error names the header as the email spells it
    client = item(_CLIENT_GID)
    gid_item = client or item(_PUBLISHER_GID)
    if gid_item is None:
        return Unroutable("no emailmw metadata headers")
    try:
        source = _uint(item(_SOURCE_TIMESTAMP), HEADER_SOURCE_TIMESTAMP)
        if source is None:
            return Unroutable(f"no {HEADER_SOURCE_TIMESTAMP} header", malformed=True)
        if client is not None:
            gid = _gid(client, HEADER_CLIENT_GID)
            seq = _uint(item(_REQUEST_SEQUENCE_NUMBER), HEADER_REQUEST_SEQUENCE_NUMBER)
            if seq is None:
                return Unroutable(f"no {HEADER_REQUEST_SEQUENCE_NUMBER} header", malformed=True)
            return True, source, gid, seq
        gid = _gid(gid_item, HEADER_PUBLISHER_GID)
        seq = _uint(item(_PUBLISHER_SEQUENCE_NUMBER), HEADER_PUBLISHER_SEQUENCE_NUMBER)
        return False, source, gid, seq
    except ValueError as exc:
        return Unroutable(str(exc), malformed=True)


def reply_addresses(request: Email) -> tuple[str, ...]:
    """Where the response to ``request`` goes: its Reply-To, else its From (RFC 5322)."""
    return request.reply_to or ((request.from_,) if request.from_ else ())


def address_of(address: str) -> str:
    """The bare address, lower case (``Name <User@Domain>`` -> ``user@domain``)."""
    return parseaddr(address)[1].lower()


def address_domain(address: str) -> str:
    """The domain of an address (``Name <user@Domain>`` -> ``domain``); '' without one."""
    return parseaddr(address)[1].rpartition("@")[2].lower()


def outside_domains(addresses: tuple[str, ...], allowed: frozenset[str] | None) -> list[str]:
    """The ``addresses`` whose domain is not in ``allowed`` (None: every domain is)."""
    if allowed is None:
        return []
    return [a for a in addresses if address_domain(a) not in allowed]


def classify(
    email: Email, received_timestamp: int, *, redelivered: bool = False, delivery_count: int = 1
) -> Route:
    """Decide what ``email`` is for emailmw; ``received_timestamp`` and ``redelivered`` go
    into the info. Total: any :class:`Email` gets a route, never an exception.

    A request must be answerable (an address to reply to, a Message-ID of the form
    ``<id@domain>`` to reply to); an emailmw email must have a non-empty Subject. Anything
    else is :class:`Unroutable` (malformed): it is never handed to a server that could not
    answer it.
    """
    metadata = read_metadata(email.headers)
    if email.headers.item(HEADER_RESENT) is not None:
        redelivered = True  # a copy its sender may have sent before (a spool after a crash)
    if isinstance(metadata, Unroutable):
        if not metadata.malformed and email.headers.item("route-to") is not None:
            return _routed(email, received_timestamp, redelivered)
        if not metadata.malformed and email.headers.item("ack-publisher-gid") is not None:
            return _ack(email, received_timestamp)
        return metadata
    if not email.subject:
        return Unroutable("empty Subject (no topic or service name)", malformed=True)
    is_service, source, gid, seq = metadata
    if is_service:
        assert seq is not None  # read_metadata's promise for service emails
        info = ServiceInfo(source, received_timestamp, Gid(gid), seq, redelivered)
        if email.in_reply_to:
            return ResponseRoute(email.subject, info)
        if not reply_addresses(email):
            return Unroutable("request with neither Reply-To nor From", malformed=True)
        if not is_message_id(email.message_id):
            return Unroutable("request whose Message-ID is not <id@domain>", malformed=True)
        return RequestRoute(email.subject, info)
    return PublishRoute(
        email.subject,
        MessageInfo(
            source,
            received_timestamp,
            Gid(gid),
            seq,
            email.headers.get(HEADER_MESSAGE_TYPE),
            redelivered,
            delivery_count=delivery_count,
            message_id=email.message_id,
        ),
    )


def _routed(email: Email, received_timestamp: int, redelivered: bool) -> Route:
    """A routed message's route: its envelope and Source-Timestamp, or why it is broken."""
    envelope = read_envelope(email.headers)
    if envelope is None or isinstance(envelope, str):
        return Unroutable(f"routed message: {envelope}", malformed=True)
    unknown = unknown_face(envelope.face)
    if unknown is not None:
        return Unroutable(f"routed message: {unknown}", malformed=True)
    try:
        source = _uint(email.headers.item(_SOURCE_TIMESTAMP), HEADER_SOURCE_TIMESTAMP)
    except ValueError as exc:
        return Unroutable(str(exc), malformed=True)
    if source is None:
        return Unroutable(f"routed message without {HEADER_SOURCE_TIMESTAMP}", malformed=True)
    return RoutedRoute(envelope, RoutedInfo(source, received_timestamp, redelivered))


def _ack(email: Email, received_timestamp: int) -> Route:
    """An acknowledgement's route, or why its headers are broken."""
    item = email.headers.item
    try:
        gid = _gid(item("ack-publisher-gid") or ("", ""), HEADER_ACK_PUBLISHER_GID)
        seq = _uint(item("ack-sequence-number"), HEADER_ACK_SEQUENCE_NUMBER)
        count = _uint(item("delivery-count"), HEADER_DELIVERY_COUNT)
        source = _uint(item(_SOURCE_TIMESTAMP), HEADER_SOURCE_TIMESTAMP)
    except ValueError as exc:
        return Unroutable(str(exc), malformed=True)
    subscriber = email.headers.get(HEADER_ACK_SUBSCRIBER, "").strip()
    if seq is None or source is None or not subscriber:
        return Unroutable("acknowledgement without its sequence number, time or subscriber",
                          malformed=True)  # fmt: skip
    ack = Ack(subscriber[:200], Gid(gid), seq, count or 1, source, received_timestamp)
    return AckRoute(ack, email.subject)


def ack_email(
    message: Email, *, subscriber: str, delivery_count: int, from_: str, timestamp_ns: int
) -> Email:
    """The acknowledgement of published ``message`` (it asked with ``Ack-Request``): a
    reply to its Reply-To, else its From."""
    return make_reply(
        message,
        "",
        from_=from_,
        headers=(
            (HEADER_SOURCE_TIMESTAMP, str(timestamp_ns)),
            (HEADER_ACK_PUBLISHER_GID, message.headers[HEADER_PUBLISHER_GID]),
            (HEADER_ACK_SEQUENCE_NUMBER, message.headers[HEADER_PUBLISHER_SEQUENCE_NUMBER]),
            (HEADER_ACK_SUBSCRIBER, subscriber),
            (HEADER_DELIVERY_COUNT, str(delivery_count)),
        ),
    )


def routed_email(
    envelope: Envelope, subject: str, body: str, *, to: str, from_: str, timestamp_ns: int
) -> Email:
    """The email of a routed message: Subject for people, the envelope and
    Source-Timestamp as headers, the face's payload as body, sent to mail address ``to``
    (the next hop)."""
    headers = [(HEADER_SOURCE_TIMESTAMP, str(timestamp_ns)), *envelope.headers()]
    return Email(subject, body, from_, (to,), (), (), (), Headers(headers))
