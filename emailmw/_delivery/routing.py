"""The routing handler of a hub (``docs/addressing.md``), and the base of the faces'
endpoints on it.

Every context owns one :class:`Router`: the hub it reads (its mail folder), the endpoints
the faces (Stem cells, YMP services, floctrl nodes) registered on it, and the route table
(hub name -> mail address). On the polling thread it applies
:func:`emailmw._core.addressing.decide` to each routed email:

* **deliver**: handed to the endpoint's sink with a ticket (the email is settled once the
  face is done with it);
* **forward**: sent one hop further (``Route-Hops`` + 1) to the route's address, through
  the outlet (sender) of that route: a gateway's routes go out through its other accounts;
* **drop**: logged once (WARNING, with the reason) and left in the mailbox, never deleted.

A forwarded copy's Message-ID is derived from the email it copies and its new destination
(:func:`forwarded_message_id`): a gateway that forwards the same email again after a crash
sends the same Message-ID, which receivers drop as a duplicate; copies of one message to
different destinations differ.

Registration is thread-safe (copy-on-write tables); dispatch runs on the polling thread.

:class:`FaceEndpoint` is what a face (a Stem cell, a YMP host, a floctrl node) is on its
context's router: registered with it and with the context, its callbacks on a
:class:`DeliveryThread` of its own, closed with the context. A face implements only what
is its own: accepting a routed email (a value to deliver, or why it is :class:`Refused`)
and delivering it.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

from .._core.addressing import Address, Deliver, Drop, Envelope, Forward, decide
from .._core.closeable import Closeable
from .._core.errors import ClosedError, EmailMWError, RoutingError, SendError, TransportError
from .._core.faces import face
from .._core.log import get_logger
from .._core.protocol import Route, RoutedRoute, address_domain, routed_email
from .._core.types import Email, RoutedInfo
from .._security import CUSTODY_HEADER, ORIGIN_HEADER, VIA_HEADER, Security
from .._transport.base import EmailSender
from .handlers import Table
from .polling import NO_TICKET, Ticket

__all__ = [
    "DeliveryThread",
    "FaceEndpoint",
    "FaceHost",
    "Hop",
    "Outlet",
    "Refused",
    "Routed",
    "RoutedSink",
    "Router",
    "forwarded_message_id",
]

_log = get_logger("routing")
W = TypeVar("W")
#: what a relay carries over: the originator's signature, the relays so far and what each
#: hop signed it sent to whom
_CUSTODY: Final = frozenset({ORIGIN_HEADER.lower(), VIA_HEADER.lower(), CUSTODY_HEADER.lower()})
#: what a relayed part of a message keeps (a relay passes parts on as they came: the hub
#: they are for joins them, each verified on its own)
_CARRIED: Final = frozenset({"part", "part-of", "body-encoding"})
#: distinct drop reasons a router counts one by one (the rest as "other reasons")
_DISTINCT_REASONS: Final = 100
#: seconds between tries of a hop whose server does not accept mail: the first, the most
_RETRY_FIRST: Final = 1.0
_RETRY_MAX: Final = 30.0


def _temporary(exc: EmailMWError) -> bool:
    """Whether sending again later may succeed: a server that cannot be reached, did not
    answer in time or answered 4xx; not a permanent refusal (5xx) nor an email that cannot
    be sent at all (too large, a bad header)."""
    if isinstance(exc, SendError):
        return exc.temporary
    return isinstance(exc, TransportError)


@dataclass(slots=True)
class _Waiting:
    """A copy to forward once its hop's server accepts mail again, and what it is for."""

    copy: Email
    hop: Hop
    ticket: Ticket
    message_id: str | None
    envelope: Envelope


@dataclass(slots=True)
class _Stalled:
    """A hop whose server did not accept a copy: the copies waiting for it, in order, and
    when it is tried next."""

    waiting: deque[_Waiting] = field(default_factory=deque)
    due: float = 0.0
    backoff: float = _RETRY_FIRST


@dataclass(frozen=True, slots=True)
class Outlet:
    """Where a router sends from: a sender and the From address it uses."""

    sender: EmailSender
    from_: str


@dataclass(frozen=True, slots=True)
class Hop:
    """A route: the mail address that reaches a hub, and the outlet that sends there."""

    address: str
    outlet: Outlet


@dataclass(frozen=True, slots=True)
class Routed:
    """One routed message as a face receives it: its envelope, Subject, body (the face's
    payload), timing info, the email's Message-ID and From (the account that sent it: the
    connection, in YMP's terms), and the endpoint it matched."""

    envelope: Envelope
    subject: str
    body: str
    info: RoutedInfo
    message_id: str | None
    mail_from: str
    endpoint: Deliver


class RoutedSink(Protocol):
    def _push_routed(self, message: Routed, ticket: Ticket) -> None: ...


def forwarded_message_id(message_id: str | None, envelope: Envelope) -> str:
    """The Message-ID of the copy of email ``message_id`` sent on with ``envelope``: the
    same for the same email and destination, different for another destination."""
    digest = hashlib.sha256(f"{message_id}\n{envelope.to.header()}".encode()).hexdigest()
    domain = (message_id or "").rpartition("@")[2].rstrip(">") or "emailmw.invalid"
    return f"<fwd.{digest[:32]}@{domain}>"


class Router:
    """The routing handler of hub ``hub``, whose mail address is ``address``: registered
    with the polling manager, it decides on every routed email (see the module).

    :attr:`counts` holds how many emails it delivered, forwarded ("relayed") and dropped,
    and :attr:`drops` the drops by reason. Thread-safe.

    A copy the next server does not accept for a temporary reason (unreachable, no answer
    in time, 4xx) is not dropped: it waits, with every later copy for that hop (in order),
    and a thread of the router tries the hop again (after 1 s, doubling up to 30 s) until
    its server accepts them; only then is each email settled. A permanent refusal (5xx) is
    a drop (the email left where it is). At :meth:`close`, waiting emails are left where
    they are, unsettled.
    """

    def __init__(self, hub: str, address: str, outlet: Outlet) -> None:
        self.hub = hub
        self.address = address
        self.outlet = outlet
        self._lock = threading.Lock()
        self._routes: dict[str, Hop] = {}
        self._sinks: Table[tuple[str, str, str], RoutedSink] = Table()
        self.counts: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()
        self._stalled: dict[str, _Stalled] = {}  # by hop address
        self._retry = threading.Condition(self._lock)
        self._retrier: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------ tables

    def set_routes(self, routes: Mapping[str, str | Hop]) -> None:
        """Replace the route table: hub name (or ``DEFAULT``) -> a mail address (sent
        through this router's own outlet) or a :class:`Hop`."""
        table = {
            hub: hop if isinstance(hop, Hop) else Hop(hop, self.outlet)
            for hub, hop in routes.items()
        }
        with self._lock:
            self._routes = table

    def route(self, hub: str) -> Hop | None:
        """The route to ``hub`` (its own address for this hub), or None."""
        if hub == self.hub:
            return Hop(self.address, self.outlet)
        return self._routes.get(hub)

    def register(self, face: str, name: str, target: str, sink: RoutedSink) -> None:
        """Hand ``sink`` the ``face`` messages for endpoint ``(name, target)`` (target ''
        also gets those whose target no endpoint has)."""
        self._sinks.add((face, name, target), sink)

    def unregister(self, face: str, name: str, target: str, sink: RoutedSink) -> None:
        self._sinks.remove((face, name, target), sink)

    def serves_any(self) -> bool:
        """Whether an endpoint is registered, or a route (mail to forward)."""
        return bool(self._sinks) or bool(self._routes)

    def forwards(self, route: Route) -> bool:
        """Whether routed mail on ``route`` goes on to another hub (its parts then pass
        through this hub as they came, not joined)."""
        return isinstance(route, RoutedRoute) and isinstance(self._decide(route.envelope), Forward)

    def _decide(self, envelope: Envelope) -> Deliver | Forward | Drop:
        routes = self._routes
        sinks = self._sinks
        return decide(
            envelope,
            self.hub,
            lambda name, target: (envelope.face, name, target) in sinks,
            {hub: hop.address for hub, hop in routes.items()},
            via_gateway=envelope.hops > 0,
        )

    # ------------------------------------------------------------------ sending

    def send(
        self,
        envelope: Envelope,
        subject: str,
        body: str,
        *,
        message_id: str | None = None,
        timestamp_ns: int | None = None,
    ) -> Email:
        """Send a new routed message from this hub: to the route of ``envelope.to``'s hub,
        through this hub's own mailbox when the endpoint is here (delivered once the
        polling thread reads it), or by the ``DEFAULT`` route. Raises
        :class:`~emailmw.RoutingError` when none applies, and what sending raises."""
        decision = self._decide(envelope)
        if isinstance(decision, Drop):
            raise RoutingError(f"cannot send to {envelope.to}: {decision.reason}")
        if isinstance(decision, Deliver):
            hop = Hop(self.address, self.outlet)
        else:
            hub = envelope.to.hub if envelope.to.hub and envelope.to.hub != self.hub else None
            found = self._routes.get(hub or "DEFAULT")
            assert found is not None  # decide forwarded by this route
            hop = found
        email = routed_email(
            envelope,
            subject,
            body,
            to=hop.address,
            from_=hop.outlet.from_,
            timestamp_ns=time.time_ns() if timestamp_ns is None else timestamp_ns,
        )
        if message_id is not None:
            email = email.with_message_id(message_id)
        hop.outlet.sender.send(email)
        return email

    # ------------------------------------------------------------------ the handler

    def __call__(self, email: Email, route: Route, ticket: Ticket = NO_TICKET) -> None:
        if not isinstance(route, RoutedRoute):
            return
        envelope = route.envelope
        decision = self._decide(envelope)
        if isinstance(decision, Drop):
            self._drop(email, envelope, decision.reason, ticket)
        elif isinstance(decision, Forward):
            self._forward(email, route, decision, ticket)
        else:
            sinks = self._sinks.get((envelope.face, decision.name, decision.target))
            message = Routed(
                envelope,
                email.subject,
                email.body,
                route.info,
                email.message_id,
                email.from_,
                decision,
            )
            with self._lock:
                self.counts["delivered"] += 1
            for sink in sinks:
                sink._push_routed(message, ticket.hold())

    def drop(self, message_id: str | None, envelope: Envelope, reason: str) -> None:
        """Count and log a drop a face decided (a bad payload, no such method)."""
        kind = reason[:120]
        with self._lock:
            self.counts["dropped"] += 1
            if kind not in self.drops and len(self.drops) >= _DISTINCT_REASONS:
                kind = "other reasons"
            self.drops[kind] += 1
        _log.warning(
            "dropped %s message %s to %s from %s: %s",
            envelope.face,
            message_id,
            envelope.to,
            envelope.from_,
            reason,
        )

    def _drop(self, email: Email, envelope: Envelope, reason: str, ticket: Ticket) -> None:
        self.drop(email.message_id, envelope, reason)
        ticket.leave_alone()

    def _forward(self, email: Email, route: RoutedRoute, decision: Forward, ticket: Ticket) -> None:
        hop = next(
            (h for h in self._routes.values() if h.address == decision.next_hop),
            None,
        )
        assert hop is not None  # decide forwards only by a route of this table
        envelope = decision.envelope
        copy = routed_email(
            envelope,
            email.subject,
            email.body,
            to=hop.address,
            from_=hop.outlet.from_,
            timestamp_ns=route.info.source_timestamp,
        ).with_message_id(forwarded_message_id(email.message_id, envelope))
        custody = [(k, v) for k, v in email.headers.items() if k.lower() in _CUSTODY | _CARRIED]
        if custody:  # the originator's signature and the relays so far go on with it
            copy = copy.replace(headers=[*copy.headers.items(), *custody])
        waiting = _Waiting(copy, hop, ticket, email.message_id, envelope)
        with self._lock:
            stalled = self._stalled.get(hop.address)
            if stalled is not None and not self._closed:  # (behind the earlier ones)
                stalled.waiting.append(waiting)
                ticket.hold()
                return
        try:
            hop.outlet.sender.send(copy)
        except EmailMWError as exc:
            if _temporary(exc) and self._wait(waiting, exc):
                return
            self.drop(email.message_id, envelope, f"forwarding to {hop.address} failed: {exc}")
            ticket.leave_alone()
            return
        self._relayed(waiting)

    def _relayed(self, waiting: _Waiting) -> None:
        with self._lock:
            self.counts["relayed"] += 1
        _log.debug(
            "relayed %s to %s as %s (hop %d)",
            waiting.message_id,
            waiting.hop.address,
            waiting.copy.message_id,
            waiting.envelope.hops,
        )

    def _wait(self, waiting: _Waiting, exc: EmailMWError) -> bool:
        """``waiting``'s hop did not accept it for a temporary reason: it waits (its email
        held unsettled), with the copies that come for that hop meanwhile, for the retry
        thread. False when the router is closed."""
        address = waiting.hop.address
        with self._lock:
            if self._closed:
                return False
            stalled = self._stalled.get(address)
            if stalled is None:
                stalled = self._stalled[address] = _Stalled(backoff=_RETRY_FIRST)
                stalled.due = time.monotonic() + stalled.backoff
                _log.warning(
                    "forwarding to %s failed (%s): it waits, with what comes for that hop, "
                    "and is tried again until that server accepts it", address, exc,
                )  # fmt: skip
            stalled.waiting.appendleft(waiting)
            waiting.ticket.hold()
            if self._retrier is None:
                self._retrier = threading.Thread(
                    target=self._retry_loop, name=f"emailmw-forward-{self.hub}", daemon=True
                )
                self._retrier.start()
            self._retry.notify_all()
        return True

    def _retry_loop(self) -> None:
        """The retry thread: the waiting copies of each stalled hop, in order, once due."""
        while True:
            with self._lock:
                while not self._closed:
                    now = time.monotonic()
                    due = [s for s in self._stalled.values() if s.due <= now]
                    if due:
                        break
                    nearest = min((s.due for s in self._stalled.values()), default=now + 1.0)
                    self._retry.wait(max(0.01, nearest - now))
                if self._closed:
                    return
                stalled = due[0]
                waiting = stalled.waiting[0]
            try:
                waiting.hop.outlet.sender.send(waiting.copy)
            except EmailMWError as exc:
                error: EmailMWError | None = exc
            else:
                error = None
            with self._lock:
                if self._closed:
                    return  # (close left it where it is: a copy accepted meanwhile is
                    # sent again by the next process, the same Message-ID: dropped there)
                if error is not None and _temporary(error):
                    stalled.backoff = min(stalled.backoff * 2, _RETRY_MAX)
                    stalled.due = time.monotonic() + stalled.backoff
                    _log.debug("forwarding to %s failed again (%s)", waiting.hop.address, error)
                    continue
                stalled.waiting.popleft()
                stalled.backoff = _RETRY_FIRST
                if not stalled.waiting:
                    del self._stalled[waiting.hop.address]
                    _log.warning("forwarding to %s works again", waiting.hop.address)
            if error is None:
                self._relayed(waiting)
            else:
                self.drop(waiting.message_id, waiting.envelope,
                          f"forwarding to {waiting.hop.address} failed: {error}")  # fmt: skip
                waiting.ticket.leave_alone()
            waiting.ticket.release()  # (settled: the next server has its copy, or a drop)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the retry thread (waiting up to ``timeout`` for a try under way); the
        emails still waiting for their hop are left where they are, unsettled (read again
        by the next process). Idempotent."""
        with self._lock:
            self._closed = True
            self._retry.notify_all()
            thread = self._retrier
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            left = [w for s in self._stalled.values() for w in s.waiting]
            self._stalled.clear()
        if left:
            _log.warning("%d routed email(s) not forwarded yet: left where they are", len(left))
        for waiting in left:
            waiting.ticket.leave_alone()
            waiting.ticket.release()

    def __repr__(self) -> str:
        return f"<Router hub={self.hub!r} {dict(self.counts)}>"


def own_hub(address: str, configured: str) -> str:
    """The hub name of a context: the configured one, else its address's local part."""
    return configured or address.partition("@")[0] or address_domain(address) or "hub"


def parse_address(text: str | Address) -> Address:
    """A Stem-style address string (or an :class:`Address`), raising
    :class:`~emailmw.RoutingError` with the reason when it is not one."""
    if isinstance(text, Address):
        return text
    found = Address.parse_stem(text)
    if isinstance(found, str):
        raise RoutingError(found)
    return found


class CallbackFailed(Exception):
    """A face's callback failed, and the face logged it already: the item was not
    processed (its one-line summary is the message)."""


class DeliveryThread:
    """One thread that runs a face's callbacks one at a time, in arrival order, off the
    polling thread (Stem: "delivered only after the current callback is finished").
    Each item carries its ticket, released once its callback returned (or raised: the
    callback's exception is logged, never kills the thread, and is a negative
    acknowledgement: ``Ticket.nack``); a callback that returns False could not use the
    item, whose email is then left where it is. An item a group
    member claimed passes its claim's fence first (``docs/delivery-modes.md``): one whose
    claim is lost is dropped unsettled, and while the member must confirm its claims the
    thread waits (:meth:`notify` wakes it). ``close`` stops it after the queued items;
    thread-safe."""

    _FENCE_LOOK: Final = 0.1  # how often a fence that says wait is looked at again

    def __init__(self, name: str, run: Callable[[Any], bool | None]) -> None:
        self._run = run
        self._queue: queue.SimpleQueue[tuple[Any, Ticket] | None] = queue.SimpleQueue()
        self._changed = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def put(self, item: Any, ticket: Ticket) -> None:
        self._queue.put((item, ticket))

    def notify(self) -> None:
        """What a claim's fence says may have changed (a group member confirmed or lost
        its claims)."""
        self._changed.set()

    def _fenced(self, ticket: Ticket) -> bool:
        """Pass ``ticket``'s fence: True to run its item, False when its claim is lost."""
        while True:
            self._changed.clear()
            state = ticket.state()
            if state == "ready" and ticket.hand_out() is not None:
                return True
            if ticket.state() == "lost" or self._closing:
                ticket.withdraw()  # (closing: its claim passes to another member)
                return False
            self._changed.wait(self._FENCE_LOOK)

    def _loop(self) -> None:
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            item, ticket = entry
            if ticket.claimed and not self._fenced(ticket):
                continue
            try:
                if self._run(item) is False:
                    ticket.leave_alone()
            except CallbackFailed as exc:  # (said already, by the face)
                ticket.nack(str(exc))
            except Exception as exc:  # noqa: BLE001 - a callback must never kill the thread
                _log.exception("%s: a callback failed", self._thread.name)
                ticket.nack(" ".join(f"{type(exc).__name__}: {exc}".split())[:200])
            finally:
                ticket.release()

    def close(self, timeout: float = 5.0) -> None:
        self._closing = True
        self._changed.set()
        self._queue.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


class FaceHost(Protocol):
    """What a face's endpoint needs of the context it is on (a :class:`~emailmw.Context`)."""

    @property
    def router(self) -> Router: ...

    @property
    def security(self) -> Security: ...

    def register_entity(self, entity: Closeable) -> None: ...

    def unregister_entity(self, entity: Closeable) -> None: ...

    def start_receiving(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a face cannot use a routed email: it is dropped (logged once, counted on the
    router) and left in the mailbox."""

    reason: str


class FaceEndpoint(Closeable, Generic[W]):
    """One face's endpoint ``(name, target)`` on its context's router (see the module).

    Creating it registers it (a subclass sets up its own state first: mail may reach it
    at once) and starts the context's receiving. Each routed email for it goes through
    :meth:`_accept` on the polling thread, then what was accepted through :meth:`_deliver`
    on the endpoint's delivery thread, one at a time, in arrival order; the email is
    settled once :meth:`_deliver` returned (left where it is when it returned False).
    :meth:`close` (or the context's shutdown) unregisters it and stops the thread after
    what is queued; :meth:`_closed_hook` runs then. Thread-safe.
    """

    #: the face's name in the ``Route-Face`` header (``stem``, ``ymp``, ``floctrl``): a
    #: face of the registry (``_core.faces``), checked when the class is made
    face: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "face" in cls.__dict__:
            face(cls.face)  # (RoutingError: no such face)

    def __init__(
        self, context: FaceHost, name: str, target: str = "", *, label: str | None = None
    ) -> None:
        self.context = context
        self._router = context.router
        self._endpoint = (name, target)
        self._closed = False
        # its thread is named after the face and ``label`` (default: the endpoint's name)
        self._delivery = DeliveryThread(f"emailmw-{self.face}-{label or name}", self._deliver)
        self._router.register(self.face, name, target, self)
        try:
            context.register_entity(self)
        except BaseException:
            self._router.unregister(self.face, name, target, self)
            self._delivery.close()
            raise
        context.start_receiving()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed")

    def _accept(self, message: Routed) -> W | Refused:
        """What to deliver of ``message``, or why it is refused (on the polling thread:
        quick, no I/O)."""
        raise NotImplementedError

    def _deliver(self, item: W) -> bool | None:
        """Deliver what :meth:`_accept` gave (on the delivery thread); False: the email is
        left where it is rather than acknowledged."""
        raise NotImplementedError

    def _push_routed(self, message: Routed, ticket: Ticket) -> None:
        accepted = self._accept(message)
        if isinstance(accepted, Refused):
            self._refuse(message.message_id, message.envelope, accepted.reason, ticket)
            ticket.release()
            return
        self._delivery.put(accepted, ticket)

    def _refuse(
        self, message_id: str | None, envelope: Envelope, reason: str, ticket: Ticket
    ) -> None:
        """Drop an email this face cannot use: logged, counted, left in the mailbox."""
        self._router.drop(message_id, envelope, reason)
        ticket.leave_alone()

    def _allows(self, identity: str | None, action: str, name: str) -> bool:
        """Whether verified ``identity`` holds the face grant ``action`` on ``name``
        (always, without a permissions file; ``docs/security.md``)."""
        return self.context.security.allows(identity, action, name)

    def _closed_hook(self) -> None:
        """What closing must also do, once the delivery thread stopped (fail pending
        requests, end group memberships)."""

    def close(self) -> None:
        """Unregister and stop the delivery thread (after the queued messages). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._router.unregister(self.face, *self._endpoint, self)
        self.context.unregister_entity(self)
        self._delivery.close()
        self._closed_hook()
