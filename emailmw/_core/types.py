"""Immutable data containers: :class:`Email`, :class:`Headers`, :class:`Gid` and the info records.

All containers are immutable and therefore safe to share between threads.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import threading
from collections.abc import ItemsView, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar, Union, overload

from .errors import InvalidArgumentError

__all__ = [
    "Email",
    "Gid",
    "Headers",
    "MessageInfo",
    "RequestId",
    "RoutedInfo",
    "ServiceInfo",
    "ServiceRequest",
]

HeadersLike = Union["Headers", Mapping[str, str], Iterable[tuple[str, str]]]

_GID_MASK: Final = 0xFFFF_FFFF
_T = TypeVar("_T")


class _HeaderItems(ItemsView[str, str]):
    _mapping: Headers

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._mapping._items)


class Headers(Mapping[str, str]):
    """An immutable, case-insensitive mapping of header names to values.

    Names keep the case they were given (that case goes on the wire); look-ups and equality
    ignore it, as RFC 5322 does. When a name occurs twice in the input, the first value wins
    (for ``Received:`` that is the topmost one, the one the last server added).
    """

    __slots__ = ("_by_lower", "_items")

    def __init__(self, items: HeadersLike = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        by_lower: dict[str, tuple[str, str]] = {}
        for name, value in pairs:
            by_lower.setdefault(name.lower(), (name, value))
        self._by_lower = by_lower
        self._items = tuple(by_lower.values())

    def __getitem__(self, name: str) -> str:
        return self._by_lower[name.lower()][1]

    @overload
    def get(self, name: str, /) -> str | None: ...
    @overload
    def get(self, name: str, /, default: str | _T) -> str | _T: ...
    def get(self, name: str, /, default: object = None) -> object:
        found = self._by_lower.get(name.lower())
        return default if found is None else found[1]

    def item(self, name: str) -> tuple[str, str] | None:
        """The ``(name, value)`` entry for ``name`` (any case), the name as given; None when
        absent."""
        return self._by_lower.get(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_lower

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def items(self) -> ItemsView[str, str]:
        """The ``(name, value)`` pairs in order (read straight from what it holds: every
        message's headers are walked this way)."""
        return _HeaderItems(self)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return {k: v[1] for k, v in self._by_lower.items()} == {
                k: v[1] for k, v in other._by_lower.items()
            }
        if isinstance(other, Mapping):
            return self == Headers(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset((k, v[1]) for k, v in self._by_lower.items()))

    def __repr__(self) -> str:
        return f"Headers({dict(self._items)!r})"

    @classmethod
    def from_folded(cls, by_lower: dict[str, tuple[str, str]]) -> Headers:
        """Adopt ``{name.lower(): (name, value)}`` as it is, without copying or checking it
        (the caller keys each entry by its name in lower case): for a parser that has
        already built that map."""
        headers = cls.__new__(cls)
        headers._by_lower = by_lower
        headers._items = tuple(by_lower.values())
        return headers

    def merged(self, other: HeadersLike) -> Headers:
        """A new :class:`Headers` with ``other``'s entries added (``other`` wins on a clash)."""
        extra = Headers(other)
        return Headers(itertools.chain(extra.items(), self.items()))


_EMPTY_HEADERS: Final = Headers()


class _GidAllocator:
    """rmw_email's scheme: a random 32-bit prefix per process plus a counter, as uint32."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._prefix = random.SystemRandom().getrandbits(32)
        self._counter = 0

    def next_value(self) -> int:
        with self._lock:
            value = (self._prefix + self._counter) & _GID_MASK
            self._counter += 1
        return value


_ALLOCATOR: Final = _GidAllocator()


def gid_value(text: str) -> int:
    """The value of a GID's decimal wire form; ``ValueError`` when it is not one (what
    :meth:`Gid.parse` accepts, without building the object)."""
    text = text.strip()
    if not text.isdigit() or not text.isascii():
        raise InvalidArgumentError(f"not a GID: {text!r}")
    value = int(text)
    if value > _GID_MASK:
        raise InvalidArgumentError(f"GID out of range (uint32): {value}")
    return value


@dataclass(frozen=True, slots=True, order=True)
class Gid:
    """Globally unique identifier of a publisher or a service client.

    On the wire it is a decimal unsigned 32-bit integer, as in rmw_email.
    """

    value: int

    def __post_init__(self) -> None:
        if not 0 <= self.value <= _GID_MASK:
            raise InvalidArgumentError(f"GID out of range (uint32): {self.value}")

    @classmethod
    def new(cls) -> Gid:
        """A new GID, unique within this process and random across processes."""
        return cls(_ALLOCATOR.next_value())

    @classmethod
    def parse(cls, text: str) -> Gid:
        """Parse the decimal wire form; raises ``ValueError`` when it is not one."""
        return cls(gid_value(text))

    def __str__(self) -> str:
        return str(self.value)


def _as_tuple(value: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,) if value else ()
    return tuple(value)


@dataclass(frozen=True, slots=True, init=False)
class Email:
    """One email as emailmw sees it: addresses, subject, body and headers.

    ``headers`` holds every header that has no field of its own here (emailmw's metadata such
    as ``Source-Timestamp``, plus ``Date``, ``Received``, ...). MIME bookkeeping headers
    (``MIME-Version``, ``Content-Type``, ``Content-Transfer-Encoding``) are produced and
    consumed by the wire format and never appear in ``headers``.

    Address fields accept a single string or any iterable of strings and are stored as tuples.
    ``message_id`` is ``None`` until a sender or receiver assigns one.
    """

    subject: str
    body: str
    from_: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    bcc: tuple[str, ...]
    reply_to: tuple[str, ...]
    headers: Headers
    message_id: str | None
    in_reply_to: str | None
    references: tuple[str, ...]

    def __init__(
        self,
        subject: str,
        body: str,
        from_: str = "",
        to: str | Iterable[str] = (),
        cc: str | Iterable[str] = (),
        bcc: str | Iterable[str] = (),
        reply_to: str | Iterable[str] = (),
        headers: HeadersLike = _EMPTY_HEADERS,
        message_id: str | None = None,
        in_reply_to: str | None = None,
        references: str | Iterable[str] = (),
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "subject", subject)
        setattr_(self, "body", body)
        setattr_(self, "from_", from_)
        setattr_(self, "to", to if type(to) is tuple else _as_tuple(to))
        setattr_(self, "cc", cc if type(cc) is tuple else _as_tuple(cc))
        setattr_(self, "bcc", bcc if type(bcc) is tuple else _as_tuple(bcc))
        setattr_(self, "reply_to", reply_to if type(reply_to) is tuple else _as_tuple(reply_to))
        setattr_(self, "headers", headers if type(headers) is Headers else Headers(headers))
        setattr_(self, "message_id", message_id)
        setattr_(self, "in_reply_to", in_reply_to)
        setattr_(
            self,
            "references",
            references if type(references) is tuple else _as_tuple(references),
        )

    def replace(self, **changes: Any) -> Email:
        """A copy of this email with the given fields changed (same names as ``__init__``)."""
        return dataclasses.replace(self, **changes)

    def with_message_id(self, message_id: str) -> Email:
        """A copy of this email with ``message_id`` set (every message the intraprocess
        path delivers gets one: a plain copy, its other fields as they are)."""
        copy = object.__new__(Email)
        setattr_ = object.__setattr__
        for name in _EMAIL_FIELDS:
            setattr_(copy, name, getattr(self, name))
        setattr_(copy, "message_id", message_id)
        return copy


_EMAIL_FIELDS: Final = tuple(field.name for field in dataclasses.fields(Email))


@dataclass(frozen=True, slots=True)
class MessageInfo:
    """Metadata of a received topic message.

    Timestamps are integer nanoseconds since the Unix epoch. ``sequence_number`` is the
    ``Publisher-Sequence-Number`` header (``None`` for mail from publishers that do not send
    it, such as rmw_email); ``message_type`` the ``Message-Type`` header of typed messages.
    ``redelivered`` is True when this message may have been handed to the application
    before: it was handed out but not yet taken when the process stopped, and a restarted
    receiver (with a ``state-file``) hands it out again (``docs/reliability.md``).
    ``identity`` is the name of the identity whose valid signature the message carries
    (``docs/security.md``); None for a message that was not verified. ``delivery_count``:
    how many group members this message was handed to (a stateful or stateless group's
    member that failed holding it passed it on: ``docs/delivery-modes.md``); 1 otherwise.
    ``message_id``: the email's Message-ID (what a bag records and the archive holds).
    """

    source_timestamp: int
    received_timestamp: int
    publisher_gid: Gid
    sequence_number: int | None = None
    message_type: str | None = None
    redelivered: bool = False
    identity: str | None = None
    delivery_count: int = 1
    message_id: str | None = None


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """Metadata of a received service request or response (timestamps in ns since the epoch).

    ``redelivered`` as in :class:`MessageInfo`: a request handed to a server that had not
    answered it when its process stopped comes again, flagged. ``identity`` as in
    :class:`MessageInfo`: the verified signer, or None.
    """

    source_timestamp: int
    received_timestamp: int
    client_gid: Gid
    sequence_number: int
    redelivered: bool = False
    identity: str | None = None


@dataclass(frozen=True, slots=True)
class RoutedInfo:
    """Metadata of a received routed message (Stem, YMP, floctrl; ``docs/addressing.md``):
    timestamps in ns since the epoch, ``redelivered`` as in :class:`MessageInfo`.
    ``identity``: the verified identity of its originator (through relays: the chain of
    custody, ``docs/security.md``); ``via``: the verified identities of the relays it
    passed, in order."""

    source_timestamp: int
    received_timestamp: int
    redelivered: bool = False
    identity: str | None = None
    via: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Ack:
    """An acknowledgement of a published message (``publish(..., ack=True)``): the
    receiving ``subscriber`` (its account, and its group member name) was done with
    message ``sequence_number`` of publisher ``publisher_gid``; ``delivery_count`` as in
    :class:`MessageInfo`. Timestamps in ns; ``identity`` as in :class:`MessageInfo`."""

    subscriber: str
    publisher_gid: Gid
    sequence_number: int
    delivery_count: int
    source_timestamp: int
    received_timestamp: int
    identity: str | None = None


@dataclass(frozen=True, slots=True)
class RequestId:
    """Identifies one request: the client that sent it and its sequence number."""

    client_gid: Gid
    sequence_number: int


@dataclass(frozen=True, slots=True)
class ServiceRequest:
    """A request as handed to a service server."""

    id: RequestId
    content: str
