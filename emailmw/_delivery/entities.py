"""Publishers, subscriptions, service clients and service servers.

Every entity belongs to a context (``context=``, else the default one), has ``close()``
and is a context manager. Closing the context closes its entities. All methods are
thread-safe; entity state is fed by the polling thread through the handlers.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

from .._core.closeable import Closeable
from .._core.config import NO_BATCH, BatchPolicy
from .._core.errors import (
    ArgumentTypeError,
    ClosedError,
    ConfigError,
    InvalidArgumentError,
    SendError,
    ServiceTimeoutError,
    TransportError,
    UnknownRequestError,
)
from .._core.futures import Future, Pending
from .._core.log import get_logger
from .._core.packing import BODY_ENCODING_HEADER, COMPRESS_WHEN_READ_HEADER, ZSTD, compress_body
from .._core.protocol import address_of, publish_email, request_email, response_email
from .._core.types import Ack, Email, Gid, MessageInfo, RequestId, ServiceInfo, ServiceRequest
from .._core.waitables import Waitable, wait_until
from .._core.wire import (
    HEADER_ACK_REQUEST,
    HEADER_REQUEST_SEQUENCE_NUMBER,
    new_message_id,
    validate_name,
)
from .._transport.group.receiver import GroupReceiver
from .groups import GroupConsumer, GroupSettings, check_group
from .handlers import SubscriptionHandler
from .polling import NO_TICKET, Ticket

if TYPE_CHECKING:
    from .context import Context

__all__ = ["Publisher", "ServiceClient", "ServiceServer", "Subscription"]

_log = get_logger("entities")
T = TypeVar("T")


def _resolve(context: Context | None) -> Context:
    from .context import resolve

    return resolve(context)


class _Entity(Closeable):
    _closed: bool
    _context: Context

    def _setup(self, context: Context | None, action: str, name: str) -> Context:
        """Resolve the context, check this context's identity may do ``action`` on
        ``name`` (:class:`~emailmw.PermissionDeniedError`), register with it."""
        self._closed = True  # until registered: close() has nothing to undo
        self._context = _resolve(context)
        self._context.check_permission(action, name)
        self._closed = False
        self._context.register_entity(self)
        return self._context

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed")

    def _unregister(self) -> None:
        """Remove the entity from its handler; runs once, on close."""

    def _before_wait(self) -> None:
        self._context.start_receiving()

    def close(self) -> None:
        """Stop receiving and release the entity. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._unregister()
        self._context.unregister_entity(self)
        if isinstance(self, Waitable):
            self._notify()


class Publisher(_Entity):
    """Publishes messages on a topic: each message is one email, Subject = topic.

    ``publish`` may be called from any thread; sequence numbers follow call order.
    ``guarantee`` overrides the context's ``send-guarantee`` for this publisher: when
    :meth:`publish` returns, the email was accepted by the server (``"server"``), written to
    the spool directory (``"spool"``) or queued in memory (``"memory"``); see
    ``docs/reliability.md``. ``batch`` overrides the context's ``batch``: a
    :class:`~emailmw.BatchPolicy`, True (the default policy) or False (each message its
    own email); batched messages to the same recipients travel together in one email
    (``docs/batching.md``). ``compress="zstd"`` compresses each body (``Body-Encoding``)
    towards accounts whose readers all said they read zstd bodies (others get it
    uncompressed: a C++ ``rmw_email`` peer reads plain text only).
    """

    def __init__(
        self,
        topic: str,
        *,
        context: Context | None = None,
        guarantee: str | None = None,
        batch: BatchPolicy | bool | None = None,
        compress: str | None = None,
    ) -> None:
        self._topic = validate_name(topic, "topic")
        if compress not in (None, ZSTD):
            raise InvalidArgumentError(f"compress must be None or {ZSTD!r}, got {compress!r}")
        if compress is not None:
            compress_body("")  # the zstandard package is there, or a clear error now
        self._compress = compress
        #: None: the context's ``batch``; a policy; False: never batched
        self._batch = NO_BATCH if batch is False else BatchPolicy() if batch is True else batch
        ctx = self._setup(context, "publish", self._topic)
        self.gid = Gid.new()
        self._seq = itertools.count()
        self._recipients = ctx.options.recipients
        rec = self._recipients
        self._readers = (*rec.to, *rec.cc, *rec.bcc)
        self._send = ctx.sender.send
        self._guarantee = ctx.check_guarantee(guarantee)
        #: messages the server refused after publish() returned (memory and spool)
        self.failures = 0
        self._ack_lock = threading.Lock()
        self._acks: dict[int, list[Ack]] = {}
        self._ack_futures: Pending[int, Ack, None] = Pending(f"the acknowledgement on {topic!r}")
        ctx.register_publisher(self.gid.value, self)

    def _unregister(self) -> None:
        self._context.unregister_publisher(self.gid.value, self)
        self._ack_futures.fail_all(repr(self))

    @property
    def topic(self) -> str:
        return self._topic

    def __repr__(self) -> str:
        return f"<Publisher {self._topic!r} gid={self.gid}>"

    def publish(
        self, message: str, headers: Mapping[str, str] | None = None, *, ack: bool = False
    ) -> Future[Ack] | None:
        """Send ``message``; extra ``headers`` go into the email as they are.

        ``ack=True`` asks every receiver for an acknowledgement once it is done with the
        message (a subscription: taken, or its callback returned; a group: processed by
        its one member) and returns a future that completes with the first
        :class:`~emailmw.Ack`; :meth:`acks` lists all that came (one per receiving
        context in topic mode). Acknowledgements come to this context's own address.

        Raises :class:`~emailmw.ClosedError`, :class:`~emailmw.InvalidHeaderError`,
        :class:`~emailmw.MessageTooLargeError`, or a transport error from the sender (with
        the ``server`` guarantee, when the server did not accept the email within the
        configured ``timeout``). With ``spool`` and ``memory`` a later refusal is logged and
        counted in :attr:`failures`.
        """
        if self._closed:
            raise ClosedError(f"{self!r} is closed")
        if not isinstance(message, str):
            raise ArgumentTypeError(f"message must be a str, got {type(message).__name__}")
        sequence_number = next(self._seq)
        future = None
        if ack:
            headers = {**(headers or {}), HEADER_ACK_REQUEST: "yes"}
            with self._ack_lock:
                self._acks[sequence_number] = []
            future = self._ack_futures.add(sequence_number, None)
            self._context.start_receiving()
        if self._compress is not None:
            if self._context.accepts(self._readers, "zstd"):
                message = compress_body(message)
                headers = {**(headers or {}), BODY_ENCODING_HEADER: self._compress}
            else:  # (one that waits for its readers is compressed once they said so)
                headers = {**(headers or {}), COMPRESS_WHEN_READ_HEADER: self._compress}
        self._send(
            publish_email(
                self._topic,
                message,
                recipients=self._recipients,
                gid=self.gid,
                sequence_number=sequence_number,
                timestamp_ns=time.time_ns(),
                headers=headers,
            ),
            guarantee=self._guarantee,
            on_failure=self._failed,
            batch=self._batch,
        )
        return future

    def acks(self, sequence_number: int) -> list[Ack]:
        """Every acknowledgement received so far of message ``sequence_number`` (one
        published with ``ack=True``)."""
        with self._ack_lock:
            return list(self._acks.get(sequence_number, ()))

    def _push_ack(self, ack: Ack) -> None:
        with self._ack_lock:
            found = self._acks.get(ack.sequence_number)
            if found is None:
                return  # not one this publisher asked about
            found.append(ack)
        pending = self._ack_futures.get(ack.sequence_number)
        if pending is not None:
            pending[0].set_result(ack)

    def _failed(self, email: Email, error: SendError) -> None:
        self.failures += 1
        _log.error("%r: message %s not delivered: %s", self, email.message_id, error)


class _BoundedQueue(Generic[T]):
    """A FIFO of ``(item, ticket)`` pairs. With a ``limit`` (a keep-last depth), a full queue
    drops its oldest entry (counted in :attr:`dropped`, logged once by the owner); without
    one it holds what it is given, and whoever feeds it bounds it (the context's receive
    budget, a group member's room: back-pressure, never a drop).

    An entry whose ticket is a group claim passes the claim's fence when it is taken
    (:meth:`take`): one whose claim another member took over is withdrawn, and while the
    member must first confirm its claims, nothing is taken. Thread-safe."""

    __slots__ = ("_items", "_limit", "_lock", "_take_lock", "dropped")

    def __init__(self, limit: int | None) -> None:
        self._items: deque[tuple[T, Ticket]] = deque()
        self._limit = limit
        self._lock = threading.Lock()
        self._take_lock = threading.Lock()  # takers one at a time (a fence may do I/O)
        self.dropped = 0

    def push(self, item: T, ticket: Ticket) -> bool:
        """Append; True when the oldest entry was dropped to make room."""
        with self._lock:
            dropped = None
            if self._limit is not None and len(self._items) >= self._limit:
                dropped = self._items.popleft()
                self.dropped += 1
            self._items.append((item, ticket))
        if dropped is not None:
            dropped[1].release()  # gone by the queue's rule: settled, counted
        return dropped is not None

    def _remove(self, entry: tuple[T, Ticket]) -> bool:
        with self._lock:
            try:
                self._items.remove(entry)
            except ValueError:
                return False  # dropped by the keep-last rule meanwhile
            return True

    def take(self) -> tuple[T, Ticket, int] | None:
        """The oldest entry the application may have now, with its delivery count; None
        when there is none (or the oldest waits for its member's check)."""
        with self._take_lock:
            while True:
                with self._lock:
                    if not self._items:
                        return None
                    entry = self._items[0]
                    ticket = entry[1]
                    if not ticket.claimed:
                        self._items.popleft()
                if not ticket.claimed:  # (hand_out may write a state file: not locked)
                    count = ticket.hand_out()
                    assert count is not None  # (no claim: no fence)
                    return entry[0], ticket, count
                state = ticket.state()
                count = ticket.hand_out() if state == "ready" else None
                if count is not None:
                    if self._remove(entry):
                        return entry[0], ticket, count
                    continue
                if ticket.state() != "lost":
                    return None
                if self._remove(entry):
                    ticket.withdraw()

    def ready(self) -> bool:
        """Whether :meth:`take` would return an entry now (quick: no I/O)."""
        with self._lock:
            for _, ticket in self._items:
                state = ticket.state()
                if state != "lost":
                    return state == "ready"
            return False

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)


class Subscription(_Entity, Waitable):
    """Receives the messages of a topic into a queue.

    ``depth=N`` keeps the newest N, dropping the oldest (keep-last: drops are counted in
    :attr:`dropped` and logged once); ``depth=None`` keeps everything it is handed: the
    context stops fetching mail once what it holds unsettled reaches ``queue-limit``
    emails or ``queue-bytes`` bytes, and the rest waits on the server (back-pressure,
    ``docs/reliability.md``). ``mode``: ``topic`` (every subscription gets every message),
    or with a ``group`` name ``stateful`` (one active member of the group at a time) or
    ``stateless`` (each message to one member): ``docs/delivery-modes.md``; a group
    member never drops: it holds at most ``depth`` (and its ``prefetch``) and leaves the
    rest to the others, or to itself later. Can be put in a :class:`WaitSet`.

    A message counts as taken when :meth:`get_message` (or ``_with_info``) returns it: with a
    ``state-file``, a restarted process hands out again, flagged ``redelivered``, what was
    queued here but not taken when the process stopped.
    """

    def __init__(
        self,
        topic: str,
        depth: int | None = None,
        *,
        context: Context | None = None,
        mode: str = "topic",
        group: str | None = None,
        group_settings: GroupSettings | None = None,
    ) -> None:
        self._topic = validate_name(topic, "topic")
        if depth is not None and (not isinstance(depth, int) or depth < 1):
            raise InvalidArgumentError(f"depth must be None or a positive int, got {depth!r}")
        check_group(mode, group)
        Waitable.__init__(self)
        ctx = self._setup(context, "subscribe", self._topic)
        self._depth = depth
        # a group member holds no more than its depth: its queue never drops
        limit = depth if group is None else None
        self._queue: _BoundedQueue[tuple[str, MessageInfo]] = _BoundedQueue(limit)
        self.mode = mode
        self.group = group
        self._consumer: GroupConsumer | None = None
        if group is None:
            ctx.register_subscription(self._topic, self)
        else:
            feed = SubscriptionHandler()
            feed.register(self._topic, self)
            topic = self._topic
            try:
                self._consumer = GroupConsumer(
                    ctx,
                    mode,
                    group,
                    lambda head: head.carries_only(topic),
                    feed,
                    settings=group_settings,
                    capacity=depth,
                    notify=self._notify,
                )
            except BaseException:
                ctx.unregister_entity(self)
                raise

    @property
    def member(self) -> str | None:
        """This subscription's member name in its group (None in topic mode)."""
        return None if self._consumer is None else self._consumer.member

    def in_progress(self) -> None:
        """Say that the application is still working on what it took from this
        subscription: in a delivery group, the member's ``ack_timeout`` counts again from
        now for those messages (a callback that takes longer than ``ack_timeout`` calls it
        now and then, and its member is not judged hung, nor its messages given to another
        member: ``docs/delivery-modes.md``). In topic mode nothing waits on time: nothing to
        do. Thread-safe."""
        if self._consumer is not None:
            self._consumer.receiver.progress()

    @property
    def group_receiver(self) -> GroupReceiver | None:
        """The group member's receiver (its ``counts``, what it holds, whether it joined:
        for tools and tests that watch a group), None in topic mode."""
        return None if self._consumer is None else self._consumer.receiver

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def dropped(self) -> int:
        """Messages dropped because the queue was full."""
        return self._queue.dropped

    def __repr__(self) -> str:
        return f"<Subscription {self._topic!r}>"

    def _unregister(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        else:
            self._context.unregister_subscription(self._topic, self)

    def _push_message(self, body: str, info: MessageInfo, ticket: Ticket) -> None:
        if self._queue.push((body, info), ticket) and self._queue.dropped == 1:
            _log.warning("%r is full (depth %s): dropping the oldest", self, self._depth)
        self._notify()

    def _is_ready(self) -> bool:
        return self._queue.ready()

    def has_message(self) -> bool:
        self._before_wait()
        return self._queue.ready()

    def get_message(self) -> str | None:
        """The oldest queued message, or None."""
        got = self.get_message_with_info()
        return None if got is None else got[0]

    def get_message_with_info(self) -> tuple[str, MessageInfo] | None:
        """The oldest queued message with its :class:`~emailmw.MessageInfo`, or None."""
        got = self.take_with_ticket()
        if got is None:
            return None
        body, info, ticket = got
        ticket.release()
        return body, info

    def take_with_ticket(self) -> tuple[str, MessageInfo, Ticket] | None:
        """The oldest message with its ticket, for a caller that releases the ticket once
        it is done with the message (the ROS layer: after the callback returned). A group
        member's message comes with the delivery count its claim's fence recorded."""
        self._before_wait()
        got = self._queue.take()
        if got is None:
            return None
        (body, info), ticket, count = got
        again = count > 1 or info.redelivered  # (a sender's resent copy is flagged too)
        if ticket.claimed and (info.delivery_count, info.redelivered) != (count, again):
            info = dataclasses.replace(info, delivery_count=count, redelivered=again)
        return body, info, ticket


class ServiceClient(_Entity, Waitable):
    """Sends requests to a service and collects the responses by sequence number.

    Two ways to call: :meth:`send_request_async` returns a :class:`~emailmw.Future` of the
    response; :meth:`send_request` returns the sequence number, whose response
    :meth:`get_response` takes (the client is a :class:`~emailmw.WaitSet` member, ready
    when a response or a refusal is waiting). :meth:`call` blocks for one.

    Sequence numbers start at 0 per client. Only a reply to a request this client has
    pending is kept: its ``In-Reply-To`` must be that request's Message-ID, and the first
    such reply wins (later copies, answers from other servers, replies to abandoned calls
    and forgeries are dropped and counted in :attr:`unexpected_responses`). Memory is
    bounded by the requests the application has not collected the answers of.

    ``servers``: the identities whose responses it accepts (their signatures verified;
    ``docs/security.md``); default: the context's ``security.servers`` for this service,
    else any identity the permissions grant to serve it (as in SROS2). A response from
    another identity, or unsigned, is dropped and counted like a forgery.

    ``only_recipients``: accept a response only from the identity bound to an account the
    request was sent to: its signature verified, its signer bound to its ``From`` account
    (``accounts`` in the permissions file) and that account one of the request's To, Cc
    and Bcc addresses. Another identity with the serve grant is dropped like a forgery,
    whether it answers from its own account or writes the server's in ``From``. Raises
    :class:`~emailmw.ConfigError` when the permissions file binds no identity to a
    recipient account. Off by default, as in SROS2 (any identity with the serve grant may
    answer), because a server may answer from an account other than the one the request
    was addressed to (an alias, or several accounts serving one service).

    A response to :meth:`send_request` counts as taken when :meth:`get_response` returns
    it (with a ``state-file``, a restarted process gets it again until then); one to
    :meth:`send_request_async` when its future completes.
    """

    def __init__(
        self,
        service_name: str,
        *,
        context: Context | None = None,
        servers: Iterable[str] | None = None,
        only_recipients: bool = False,
    ) -> None:
        self._service = validate_name(service_name, "service name")
        Waitable.__init__(self)
        self.gid = Gid.new()
        self._seq = itertools.count()
        self._lock = threading.Lock()
        # sequence number -> its future, with the request's Message-ID (what a reply's
        # In-Reply-To must be) and whether the reply waits for get_response()
        self._pending: Pending[int, tuple[str, ServiceInfo], tuple[str, bool]] = Pending(
            f"the call to service {self._service!r}"
        )
        # send_request()'s futures until get_response() takes them, and the tickets of
        # their responses (settled when taken)
        self._waiting: dict[int, Future[tuple[str, ServiceInfo]]] = {}
        self._held: dict[int, Ticket] = {}
        #: replies dropped because they answered nothing this client has pending
        self.unexpected_responses = 0
        ctx = self._setup(context, "call", self._service)
        if servers is None:
            servers = ctx.security.servers_for(self._service)
        self._servers = None if servers is None else frozenset(servers)
        for given, what in ((self._servers is not None, "servers="),
                            (only_recipients, "only_recipients=")):  # fmt: skip
            if given and ctx.security.mode == "off":
                raise ConfigError(
                    f"{self!r}: {what} needs signatures checked: set security.verify to "
                    "enforce (or permissive) with a keystore"
                )
        self._recipients = ctx.options.recipients
        # the accounts a response may come from (only_recipients), as bare addresses
        self._answering: frozenset[str] | None = (
            frozenset(address_of(a).lower() for a in self._recipients.all)
            if only_recipients
            else None
        )
        self._permissions = ctx.security.permissions
        if self._answering is not None and (
            self._permissions is None or not self._permissions.bound_to(self._answering)
        ):
            raise ConfigError(
                f"{self!r}: only_recipients= needs the permissions file to bind the identity "
                f"that answers to its account: add accounts: [{min(self._answering)}] to "
                "that identity (docs/security.md, Permissions)"
            )
        self._guarantee = ctx.check_guarantee(None)
        ctx.register_client(self.gid.value, self)

    @property
    def service_name(self) -> str:
        return self._service

    def __repr__(self) -> str:
        return f"<ServiceClient {self._service!r} gid={self.gid}>"

    def _unregister(self) -> None:
        self._context.unregister_client(self.gid.value, self)
        self._pending.fail_all(repr(self))
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for ticket in held:
            ticket.release()

    def _push_response(self, email: Email, info: ServiceInfo, ticket: Ticket) -> None:
        seq = info.sequence_number
        entry = self._pending.get(seq)
        wanted = (
            entry is not None
            and email.in_reply_to == entry[1][0]
            and (self._servers is None or info.identity in self._servers)
            and (self._answering is None or self._answered_by_recipient(email, info))
        )
        if entry is None or not wanted:
            with self._lock:
                self.unexpected_responses += 1
            _log.info(
                "%r dropped response %s: it answers no request pending here (sequence "
                "number %d, In-Reply-To %s), or comes from an identity or account it does "
                "not accept (%s, %s)",
                self,
                email.message_id,
                seq,
                email.in_reply_to,
                info.identity,
                email.from_,
            )
            ticket.release()
            return
        future, (_, hold) = entry
        if hold:
            with self._lock:
                if self._waiting.get(seq) is future:
                    self._held[seq] = ticket
                    ticket = NO_TICKET
        future.set_result((email.body, info))
        ticket.release()  # taken by its future (or abandoned meanwhile): settled
        self._notify()

    def _answered_by_recipient(self, email: Email, info: ServiceInfo) -> bool:
        """(``only_recipients``) The response is signed by an identity bound to its
        ``From`` account (``accounts`` in the permissions file), one the request went to.
        (Was: ``From`` alone, which the signer writes: another identity with the serve
        grant could write the server's account there and answer first.)"""
        sender = address_of(email.from_).lower()
        return (
            info.identity is not None
            and sender in (self._answering or ())
            and self._permissions is not None
            and self._permissions.answers_from(info.identity, sender)
        )

    def _is_ready(self) -> bool:
        return any(f.done() for f in self._waiting.values())

    def _send(self, request: str, hold: bool) -> tuple[int, Future[tuple[str, ServiceInfo]]]:
        self._check_open()
        self._context.start_receiving()
        if not isinstance(request, str):
            raise ArgumentTypeError(f"request must be a str, got {type(request).__name__}")
        seq = next(self._seq)
        email = request_email(
            self._service,
            request,
            recipients=self._recipients,
            client_gid=self.gid,
            sequence_number=seq,
            timestamp_ns=time.time_ns(),
        )
        email = email.with_message_id(new_message_id(self._recipients.from_))
        assert email.message_id is not None
        future = self._pending.add(seq, (email.message_id, hold))
        if hold:
            with self._lock:
                self._waiting[seq] = future
        try:
            self._context.sender.send(email, guarantee=self._guarantee, on_failure=self._not_sent)
        except BaseException:
            self._forget(seq)
            raise
        return seq, future

    def send_request(self, request: str) -> int:
        """Send ``request``; returns its sequence number for :meth:`get_response`. Starts the
        context's receiving: the response is on its way."""
        return self._send(request, hold=True)[0]

    def send_request_async(self, request: str) -> Future[tuple[str, ServiceInfo]]:
        """Send ``request``; returns the future of its response and
        :class:`~emailmw.ServiceInfo` (failed with :class:`~emailmw.SendError` when the
        server refused the request after this returned). Cancelling the future abandons
        the call: a later answer is dropped."""
        return self.send_request_numbered(request)[1]

    def send_request_numbered(self, request: str) -> tuple[int, Future[tuple[str, ServiceInfo]]]:
        """:meth:`send_request_async`, and the request's sequence number."""
        seq, future = self._send(request, hold=False)

        def abandoned(done: Future[tuple[str, ServiceInfo]]) -> None:
            if done.cancelled():
                self._forget(seq)

        future._when_done(abandoned)
        return seq, future

    def _not_sent(self, email: Email, error: SendError) -> None:
        seq = int(email.headers.get(HEADER_REQUEST_SEQUENCE_NUMBER, "-1"))
        _log.error("%r: request %s (%d) not delivered: %s", self, email.message_id, seq, error)
        entry = self._pending.get(seq)
        if entry is not None:
            entry[0].set_exception(error)
        self._notify()

    def has_response(self, sequence_number: int | None = None) -> bool:
        """Any response waiting (no argument), or the one to ``sequence_number``."""
        self._context.start_receiving()
        with self._lock:
            found = (
                list(self._waiting.values())
                if sequence_number is None
                else [f for f in (self._waiting.get(sequence_number),) if f is not None]
            )
        return any(f.done() and f.exception() is None for f in found)

    def get_response(self, sequence_number: int) -> str | None:
        """Take the response to ``sequence_number``; None if it has not arrived."""
        got = self.get_response_with_info(sequence_number)
        return None if got is None else got[0]

    def get_response_with_info(self, sequence_number: int) -> tuple[str, ServiceInfo] | None:
        """Take the response with its :class:`~emailmw.ServiceInfo`; None if not arrived.

        Raises :class:`~emailmw.SendError` when the server refused the request itself
        (with the ``memory`` or ``spool`` guarantee, after ``send_request`` returned).
        """
        self._context.start_receiving()
        with self._lock:
            future = self._waiting.get(sequence_number)
            if future is None or not future.done():
                return None
            del self._waiting[sequence_number]
            ticket = self._held.pop(sequence_number, NO_TICKET)
        ticket.release()
        return future.result()

    def _forget(self, sequence_number: int) -> None:
        """The caller gave up on this request: a later answer is dropped."""
        self._pending.discard(sequence_number)
        with self._lock:
            self._waiting.pop(sequence_number, None)
            ticket = self._held.pop(sequence_number, NO_TICKET)
        ticket.release()

    def call(self, request: str, timeout: float | None = None) -> str:
        """Send ``request`` and block for its response (``timeout`` None: no limit).

        Raises :class:`~emailmw.ServiceTimeoutError` on timeout; a response that arrives
        later is discarded.
        """
        seq, future = self._send(request, hold=False)
        try:
            return future.result(timeout)[0]
        except ServiceTimeoutError:
            self._forget(seq)
            raise ServiceTimeoutError(
                f"no response from service {self._service!r} within {timeout} s (request {seq})"
            ) from None


class ServiceServer(_Entity, Waitable):
    """Receives the requests of a service and sends responses as replies.

    Without ``callback``, take requests with :meth:`get_request` (or a wait set) and answer
    with :meth:`send_response`. With ``callback``, a thread of the server's own calls
    ``callback(request)`` for each request and sends its return value as the response
    (None: no response); an exception in the callback is logged and no response is sent.

    Requests wait here, taken or not, until answered: the context stops fetching mail once
    what it holds unsettled reaches ``queue-limit`` emails or ``queue-bytes`` bytes, so a
    flood waits on the server (back-pressure), never dropped. A request is settled once it
    is answered (or the callback returned
    None or raised, or its response could not be sent): with a ``state-file``, a restarted
    process hands out again, flagged ``redelivered``, what was not. A response the server
    refused, at once or later (with the ``memory``/``spool`` guarantee), is logged with the
    request's Message-ID and counted in :attr:`failed_responses`.
    """

    def __init__(
        self,
        service_name: str,
        callback: Callable[[str], str | None] | None = None,
        *,
        context: Context | None = None,
    ) -> None:
        self._service = validate_name(service_name, "service name")
        Waitable.__init__(self)
        self._lock = threading.Lock()
        self._queue: deque[tuple[ServiceRequest, ServiceInfo]] = deque()
        self._pending: dict[RequestId, tuple[Email, Ticket]] = {}
        self._callback = callback
        #: responses the server refused after send_response() returned
        self.failed_responses = 0
        ctx = self._setup(context, "serve", self._service)
        self._from = ctx.options.recipients.from_
        self._guarantee = ctx.check_guarantee(None)
        ctx.register_server(self._service, self)
        self._worker: threading.Thread | None = None
        if callback is not None:
            self._worker = threading.Thread(
                target=self._serve, name=f"emailmw-server-{self._service[:40]}", daemon=True
            )
            self._worker.start()

    @property
    def service_name(self) -> str:
        return self._service

    def __repr__(self) -> str:
        return f"<ServiceServer {self._service!r}>"

    def _unregister(self) -> None:
        self._context.unregister_server(self._service, self)

    def close(self) -> None:
        super().close()
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(5.0)

    def _push_request(self, email: Email, info: ServiceInfo, ticket: Ticket) -> None:
        request_id = RequestId(info.client_gid, info.sequence_number)
        settle: list[Ticket] = []
        with self._lock:
            if request_id in self._pending:
                _log.info("dropped duplicate request %s (%s)", email.message_id, request_id)
                settle.append(ticket)
            else:
                self._pending[request_id] = (email, ticket)
                self._queue.append((ServiceRequest(request_id, email.body), info))
        for dropped in settle:
            dropped.release()
        self._notify()

    def _is_ready(self) -> bool:
        return bool(self._queue)

    def has_request(self) -> bool:
        self._context.start_receiving()
        return bool(self._queue)

    def get_request(self) -> ServiceRequest | None:
        """The oldest request not yet taken, or None."""
        got = self.get_request_with_info()
        return None if got is None else got[0]

    def get_request_with_info(self) -> tuple[ServiceRequest, ServiceInfo] | None:
        """The oldest request with its :class:`~emailmw.ServiceInfo`, or None."""
        self._context.start_receiving()
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def send_response(self, request_id: RequestId, response: str) -> None:
        """Reply to the request ``request_id`` with ``response``.

        Raises :class:`~emailmw.UnknownRequestError` for a request this server did not hand
        out or already answered. When sending fails here (the ``server`` guarantee), the
        request stays pending: the call may be repeated.
        """
        self._check_open()
        if not isinstance(response, str):
            raise ArgumentTypeError(f"response must be a str, got {type(response).__name__}")
        with self._lock:
            pending = self._pending.pop(request_id, None)
        if pending is None:
            raise UnknownRequestError(f"no pending request {request_id} on {self!r}")
        request, ticket = pending
        reply = response_email(request, response, from_=self._from, timestamp_ns=time.time_ns())
        try:
            self._context.sender.send(
                reply,
                guarantee=self._guarantee,
                on_failure=functools.partial(self._reply_failed, request),
            )
        except BaseException as exc:
            with self._lock:
                self._pending.setdefault(request_id, pending)
            if isinstance(exc, TransportError):
                self._reply_failed(request, reply, exc)
            raise
        ticket.release()

    def _reply_failed(self, request: Email, reply: Email, error: TransportError) -> None:
        self.failed_responses += 1
        _log.error(
            "%r: the response %s to request %s was not delivered: %s",
            self,
            reply.message_id,
            request.message_id,
            error,
        )

    def _discard(self, request_id: RequestId) -> None:
        with self._lock:
            pending = self._pending.pop(request_id, None)
        if pending is not None:
            pending[1].release()

    def _serve(self) -> None:
        assert self._callback is not None
        while True:
            try:
                wait_until(self, self.has_request)
            except ClosedError:
                return
            got = self.get_request_with_info()
            if got is None:  # taken meanwhile by a wait set or get_request
                continue
            request, _info = got
            try:
                result = self._callback(request.content)
            except Exception:  # noqa: BLE001 - a user callback may raise anything
                _log.exception("callback of %r failed on request %s", self, request.id)
                self._discard(request.id)
                continue
            if result is None:
                self._discard(request.id)
                continue
            try:
                self.send_response(request.id, result)
            except ClosedError:
                return
            except TransportError:  # logged and counted by send_response: settled
                self._discard(request.id)
            except Exception:  # noqa: BLE001 - logged; the server keeps serving
                _log.exception("sending the response to %s failed", request.id)
                self._discard(request.id)
