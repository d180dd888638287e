"""A node's typed entities (rclpy's shape): :class:`NodePublisher`,
:class:`NodeSubscription`, :class:`Client`, :class:`Service` and
:class:`NodeGuardCondition`, each over a core entity, each an :class:`Executable` where it
has callbacks. A service response completes its :class:`~emailmw.task.Future` as soon as
it arrives (on the polling thread), so :meth:`Client.call` works from any thread."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from .._core.config import BatchPolicy
from .._core.content_filter import ContentFilter, compile_filter
from .._core.errors import (
    ServiceTimeoutError,
    TypeMismatchError,
)
from .._core.futures import Future, relay
from .._core.interfaces import (
    HEADER_MESSAGE_TYPE,
    ServiceType,
    deserialize,
    serialize,
    type_name,
)
from .._core.log import get_logger
from .._core.protocol import PublishRoute, classify
from .._core.qos import DeadlineMissed, Delivery, DurabilityPolicy, MessageLost, QoSProfile
from .._core.types import MessageInfo
from .._core.waitables import GuardCondition, Waitable
from .._delivery.context import Context
from .._delivery.entities import Publisher, ServiceClient, ServiceServer, Subscription
from .._delivery.graph import Graph, graph_of
from .._delivery.groups import GroupSettings
from .._delivery.polling import NO_TICKET, RefusalLog, Ticket
from ..service_msgs.msg import ServiceEventInfo
from .callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from .events import IncompatibleTypeInfo, SubscriptionEventCallbacks
from .executable import Executable, NodeLike, Work, _in_group
from .introspection import Introspection
from .serialization import cdr_types, deserialize_message, serialize_message

__all__ = [
    "Client",
    "ContentFilterOptions",
    "NodeGuardCondition",
    "NodePublisher",
    "NodeSubscription",
    "Service",
    "SubscriptionEventCallbacks",
]

_log = get_logger("node")
T = TypeVar("T")


class NodePublisher(Generic[T]):
    """Publishes typed messages; the body is YAML, the type in ``Message-Type``."""

    def __init__(
        self,
        node: NodeLike,
        msg_type: type[T],
        topic: str,
        qos_profile: QoSProfile,
        batch: BatchPolicy | bool | None = None,
        compress: str | None = None,
    ) -> None:
        self.msg_type = msg_type
        self.topic = topic
        self.qos_profile = qos_profile
        self._node = node
        self._events: Executable | None = None  # its matched events (the node's)
        self._type_name = type_name(msg_type)
        self._core = Publisher(topic, context=node.context, batch=batch, compress=compress)

    @property
    def topic_name(self) -> str:
        return self.topic

    def publish(self, msg: T | bytes) -> None:
        """Publish ``msg``, a message of the publisher's type or (as rclpy takes) its
        serialized CDR bytes (``emailmw.serialization``; needs the bag extra)."""
        if isinstance(msg, bytes | bytearray | memoryview):
            msg = deserialize_message(bytes(msg), self.msg_type)
        if not isinstance(msg, self.msg_type):
            raise TypeMismatchError(
                f"publisher of {self._type_name} on {self.topic} given {type(msg).__name__}"
            )
        self._core.publish(serialize(msg), {HEADER_MESSAGE_TYPE: self._type_name})

    def get_subscription_count(self) -> int:
        """Subscriptions of this topic in the graph (this process's included)."""
        return self._node.count_subscribers(self.topic)

    def destroy(self) -> bool:
        self._core.close()
        return True


@dataclasses.dataclass
class ContentFilterOptions:
    """rclpy's content filter of a subscription: a DDS filter expression and its
    parameters (``%0`` ...), e.g. ``ContentFilterOptions("data = %0", ["'hello'"])``
    (``_core/content_filter.py`` says what is supported)."""

    filter_expression: str
    expression_parameters: list[str] = dataclasses.field(default_factory=list)


class NodeSubscription(Executable, Generic[T]):
    """A typed subscription whose callback runs in the executor, with QoS applied.

    Mail of another type (or that does not fit the type: not YAML, a field of the wrong
    type) is poison for this subscription: counted in :attr:`type_mismatches`, logged with
    its reason (each kind at once, then counted per 10 s), reported to the ``type_mismatch``
    event callback and quarantined (never deleted, never acknowledged): never a crash.

    The callback takes the message, or (as in rclpy) the message and its
    :class:`~emailmw.MessageInfo`. A message is settled once its callback has returned:
    with a ``state-file``, a process that dies before that gets it again after a restart,
    with ``info.redelivered`` True. A callback that raises has not processed its message
    (``docs/reliability.md``): in a delivery group it is offered again (to another member
    where there is one) up to the group's ``max_deliveries``, then quarantined; outside a
    group it is left on the server, never deleted, and not handed out again.
    """

    def __init__(
        self,
        node: NodeLike,
        msg_type: type[T],
        topic: str,
        callback: Callable[..., Any],
        qos: QoSProfile,
        events: SubscriptionEventCallbacks,
        mode: str = "topic",
        group: str | None = None,
        callback_group: CallbackGroup | None = None,
        group_settings: GroupSettings | None = None,
        raw: bool = False,
        content_filter: ContentFilterOptions | None = None,
    ) -> None:
        self._filter: ContentFilter | None = None
        if content_filter is not None:
            self.set_content_filter(
                content_filter.filter_expression, content_filter.expression_parameters
            )
        if raw:
            cdr_types()  # (the bag extra is there, or one line saying to install it)
        self._raw = raw
        self._events: Executable | None = None  # its matched events (the node's)
        self.msg_type = msg_type
        self.topic = topic
        self.callback = callback
        self.callback_group = _in_group(self, callback_group, node)
        self._with_info = _takes_info(callback)
        self.qos = qos
        self.events = events
        self.type_mismatches = 0
        self._poison_log = RefusalLog()
        # (publisher GID, sequence number) of messages a callback raised on: when one
        # comes again (offered again by its group), it is no duplicate
        self._failed: set[tuple[int, int]] = set()
        self._failed_lock = threading.Lock()
        self._type_name = type_name(msg_type)
        self._delivery: Delivery[tuple[str, Ticket]] = Delivery(qos, time.time_ns())
        self._core = Subscription(
            topic, qos.queue_depth, context=node.context, mode=mode, group=group,
            group_settings=group_settings,
        )  # fmt: skip
        if qos.durability is DurabilityPolicy.TRANSIENT_LOCAL:
            self._replay_history(node.context)

    def in_progress(self) -> None:
        """Say that the callback is still working on its message (emailmw's; rclpy has
        none): in a delivery group, the member's ``ack_timeout`` counts again from now, so a
        callback longer than ``ack_timeout`` that calls it now and then keeps its message
        (``docs/delivery-modes.md``). Thread-safe."""
        self._core.in_progress()

    @property
    def is_cft_enabled(self) -> bool:
        """Whether a content filter is set (rclpy's)."""
        return self._filter is not None

    def set_content_filter(
        self, filter_expression: str, expression_parameters: Sequence[str] = ()
    ) -> None:
        """Deliver only the messages ``filter_expression`` holds for (an empty one: all);
        the others are settled unseen. Checked now: a mistake is one line."""
        self._filter = (
            compile_filter(filter_expression, list(expression_parameters))
            if filter_expression
            else None
        )

    def get_content_filter(self) -> ContentFilterOptions:
        found = self._filter
        if found is None:
            return ContentFilterOptions("", [])
        return ContentFilterOptions(found.expression, list(found.parameters))

    @property
    def expired(self) -> int:
        """Messages dropped because they were older than the lifespan."""
        return self._delivery.expired

    @property
    def lost(self) -> int:
        return self._delivery.lost

    def _replay_history(self, context: Context) -> None:
        """transient_local: the newest ``depth`` messages of the topic, from the mailbox.
        Live messages that overlap are dropped as duplicates by sequence number."""
        depth = self.qos.depth
        try:
            # a mail server may store a burst out of order: look further back than depth,
            # then keep the newest by source timestamp and sequence number
            history = context.receiver.history(self.topic, 4 * depth + 16)
        except NotImplementedError as exc:
            _log.warning("transient_local on %s: %s", self.topic, exc)
            return
        now = time.time_ns()
        routed = [
            (email.body, route.info)
            for email in history
            if isinstance(route := classify(email, now), PublishRoute) and route.topic == self.topic
        ]
        routed.sort(key=lambda item: (item[1].source_timestamp, item[1].sequence_number or 0))
        for body, info in routed[-depth:]:
            self._core._push_message(body, info, NO_TICKET)  # from the store: nothing to settle

    def _mismatch(
        self, exc: TypeMismatchError, ticket: Ticket, info: MessageInfo | None = None
    ) -> list[Callable[[], None]]:
        """``ticket``'s message is poison for this subscription: quarantined with its
        reason, logged (rate-limited), counted, told to the ``type_mismatch`` callback."""
        self.type_mismatches += 1
        reason = _one_line(str(exc))
        ticket.reject(reason)
        ticket.release()
        which = "" if info is None or info.message_id is None else f" {info.message_id}"
        now = time.monotonic()
        self._poison_log.flush(now)
        self._poison_log.refused(
            "poison", f"quarantined message{which} on {self.topic}: {reason}", reason, now
        )
        work: list[Callable[[], None]] = []
        handler = self.events.type_mismatch
        if handler is not None:
            work.append(lambda: handler(exc))
        told = self.events.incompatible_type
        if told is not None:
            info_ = IncompatibleTypeInfo(total_count=self.type_mismatches, total_count_change=1)
            work.append(lambda: told(info_))
        return work

    def _work(
        self,
        items: list[tuple[tuple[str, Ticket], MessageInfo]],
        events: list[MessageLost | DeadlineMissed],
    ) -> list[Callable[[], None]]:
        """The callbacks to run; each message is settled once its callback has run (or
        when it cannot be deserialized): a callback that raised has had its message too."""
        work: list[Callable[[], None]] = []
        for (body, ticket), info in items:
            try:
                msg = deserialize(self.msg_type, body)
            except TypeMismatchError as exc:
                work += self._mismatch(exc, ticket, info)
                continue
            found = self._filter
            if found is not None and not found.matches(msg):
                ticket.release()  # (filtered out: settled, never handed to the callback)
                continue
            # (rclpy's raw=True: the message as ROS 2 serializes it, CDR)
            given: Any = serialize_message(msg) if self._raw else msg
            args = (given, info) if self._with_info else (given,)
            work.append(
                functools.partial(_then_release, self.callback, args, ticket, self._failing(info))
            )
        for event in events:
            handler: Any = (
                self.events.deadline
                if isinstance(event, DeadlineMissed)
                else self.events.message_lost
            )
            if isinstance(event, MessageLost):
                _log.info(
                    "%s: lost %s from publisher %d",
                    self.topic,
                    list(event.sequence_numbers),
                    event.publisher_gid,
                )
            if handler is not None:
                work.append(functools.partial(handler, event))
        return work

    def waitables(self) -> Sequence[Waitable]:
        return (self._core,)

    def due_in(self, now: float) -> float | None:
        return self._next_check()

    def take(self, now: float) -> list[Work]:
        return [*self._take(), *self._poll()]

    def _take(self) -> list[Callable[[], None]]:
        got = self._core.take_with_ticket()
        if got is None:
            return []
        body, info, ticket = got
        if info.message_type not in (None, self._type_name):
            return self._mismatch(
                TypeMismatchError(
                    f"subscription of {self._type_name} on {self.topic} received "
                    f"{info.message_type}"
                ),
                ticket,
                info,
            )
        if info.redelivered and info.sequence_number is not None:
            key = (info.publisher_gid.value, info.sequence_number)
            with self._failed_lock:
                again = key in self._failed
                self._failed.discard(key)
            if again:  # its callback raised here before: offered again, not a duplicate
                return self._work([((body, ticket), info)], [])
        step = self._delivery.offer((body, ticket), info, time.time_ns())
        if step.dropped:  # expired or a duplicate: done with
            ticket.release()
        return self._work(step.deliver, step.events)

    def _failing(self, info: MessageInfo) -> Callable[[], None]:
        """What a callback that raises on ``info``'s message notes: that message, should
        it come again, is to be processed again (not dropped as a duplicate)."""

        def note() -> None:
            if info.sequence_number is None:
                return
            with self._failed_lock:
                if len(self._failed) >= 10_000:
                    self._failed.clear()
                self._failed.add((info.publisher_gid.value, info.sequence_number))

        return note

    def _poll(self) -> list[Callable[[], None]]:
        return self._work(*self._delivery.poll(time.time_ns()))

    def _next_check(self) -> float | None:
        """Seconds until the QoS rules need a look (gap timeout, deadline), or None."""
        when = self._delivery.next_check_ns()
        return None if when is None else max(0.0, (when - time.time_ns()) / 1e9)

    @property
    def topic_name(self) -> str:
        return self.topic

    @property
    def qos_profile(self) -> QoSProfile:
        return self.qos

    def destroy(self) -> bool:
        self._core.close()
        return True


def _one_line(text: str, most: int = 200) -> str:
    """``text`` as one line of at most ``most`` characters (a log line's reason)."""
    line = " ".join(text.split())
    return line if len(line) <= most else line[: most - 3] + "..."


def _failure(exc: BaseException) -> str:
    """A callback's exception in one line: its type and message."""
    return _one_line(f"{type(exc).__name__}: {exc}")


def _then_release(
    callback: Callable[..., Any],
    args: tuple[Any, ...],
    ticket: Ticket,
    failed: Callable[[], None] = lambda: None,
) -> Any:
    """Run ``callback(*args)`` and settle the message once it is done with it: when it
    returns, or, for an ``async def`` callback, when its coroutine ends (the executor
    drives the coroutine this returns). One that raises did not process it: a negative
    acknowledgement (``Ticket.nack``; ``failed`` is told first), and the exception goes
    on to the executor."""
    try:
        result = callback(*args)
    except BaseException as exc:
        failed()
        ticket.nack(_failure(exc))
        ticket.release()
        raise
    if inspect.iscoroutine(result):
        return _released_after(result, ticket, failed)
    ticket.release()
    return result


async def _released_after(
    coroutine: Coroutine[Any, Any, Any], ticket: Ticket, failed: Callable[[], None]
) -> Any:
    try:
        result = await coroutine
    except BaseException as exc:
        failed()
        ticket.nack(_failure(exc))
        raise
    finally:
        ticket.release()
    return result


def _takes_info(callback: Callable[..., Any]) -> bool:
    """True when ``callback`` takes a second positional argument (the message info)."""
    try:
        parameters = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the message only
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


class Client(Executable, Generic[T]):
    """A typed service client (rclpy's ``Client``): :meth:`call_async` returns a
    :class:`~emailmw.task.Future`; :meth:`wait_for_service` waits until the graph has a
    server. Its future completes as the response arrives; an executor that spins its node
    counts a response as work, as rclpy's does (``spin_once(node)`` without a timeout
    returns once a response came: the official examples' loop)."""

    def __init__(
        self,
        node: NodeLike,
        srv_type: ServiceType,
        name: str,
        callback_group: CallbackGroup | None = None,
    ) -> None:
        self.srv_type = srv_type
        self.service_name = name
        self._node = node
        self.callback_group = _in_group(self, callback_group, node)
        self._core = ServiceClient(name, context=node.context)
        self._introspection = Introspection(node.context, name, srv_type)
        self._lock = threading.Lock()
        self._pending: list[Future[Any]] = []
        self._answered = GuardCondition()  # a call completed since the executor last looked

    def waitables(self) -> Sequence[Waitable]:
        return (self._answered,)

    def take(self, now: float) -> list[Work]:
        """A response (or a failure) completed a call's future: that was this client's
        work (its future's callbacks are scheduled in the executor on their own)."""
        if not self._answered.triggered:
            return []
        self._answered._take()
        return [_nothing]

    @property
    def srv_name(self) -> str:
        return self.service_name

    def service_is_ready(self) -> bool:
        """Whether the graph has a server of this service now."""
        return self._node.count_services(self.service_name) > 0

    def wait_for_service(self, timeout_sec: float | None = None) -> bool:
        """Block until the graph has a server of this service, at most ``timeout_sec``
        seconds (None: no limit); whether it has one."""
        return graph_of(self._node.context).wait_for(
            lambda graph: _servers(graph, self.service_name) > 0, timeout_sec
        )

    def call_async(self, request: Any) -> Future[Any]:
        """Send ``request``; the future completes with the typed response (or fails with
        the reason: the request refused, the client destroyed, a response of the wrong
        type). Cancelling it abandons the call."""
        if not isinstance(request, self.srv_type.Request):
            raise TypeMismatchError(f"{self.srv_type.name} request expected, got {request!r}")
        seq, sent = self._core.send_request_numbered(serialize(request))
        gid = self._core.gid
        self._introspection.event(ServiceEventInfo.REQUEST_SENT, gid, seq, request=request)
        future: Future[Any] = Future(
            f"the call to service {self.service_name!r}", scheduler=lambda: self._node.executor
        )

        def abandoned(done: Future[Any]) -> None:
            with self._lock:
                if done in self._pending:
                    self._pending.remove(done)
            if done.cancelled():
                sent.cancel()

        with self._lock:
            self._pending.append(future)

        def received(raw: tuple[str, Any]) -> Any:
            response = deserialize(self.srv_type.Response, raw[0])
            self._introspection.event(
                ServiceEventInfo.RESPONSE_RECEIVED, gid, seq, response=response
            )
            return response

        relay(sent, future, received)
        future._when_done(abandoned)
        future._when_done(lambda _: self._answered.trigger())
        return future

    def configure_introspection(
        self, clock: Any, service_event_pub_qos: Any, introspection_state: int
    ) -> None:
        """rclpy's: publish this client's events on ``<service>/_service_event``
        (``introspection.py``)."""
        self._introspection.configure(clock, service_event_pub_qos, introspection_state)

    def remove_pending_request(self, future: Future[Any]) -> None:
        """Give up on the call of ``future`` (rclpy's): a later answer is dropped."""
        future.cancel()

    def call(self, request: Any, timeout_sec: float | None = None) -> Any:
        """Block for the response (``timeout_sec`` None: no limit). On timeout the call is
        abandoned and :class:`~emailmw.ServiceTimeoutError` says whether anyone serves the
        service at all."""
        future = self.call_async(request)
        try:
            return future.result(timeout_sec)
        except ServiceTimeoutError:
            future.cancel()
            if not self.service_is_ready():
                raise ServiceTimeoutError(
                    f"service {self.service_name!r} not available: no server of it in the "
                    f"graph within {timeout_sec:g} s (see 'emailmw service list')"
                ) from None
            raise ServiceTimeoutError(
                f"no response from service {self.service_name!r} within {timeout_sec:g} s"
            ) from None

    def destroy(self) -> bool:
        """Close the client: pending calls fail with :class:`~emailmw.ClosedError`."""
        self._introspection.close()
        self._core.close()
        return True


def _nothing() -> None:
    """The work of a response, done already: its future completed as it arrived."""


def _servers(graph: Graph, service: str) -> int:
    return sum(1 for n in graph.nodes.values() for s, _ in n.services if s == service)


class Service(Executable):
    """A typed service server; ``callback(request, response) -> response`` runs in the
    executor and its return value is sent back (an ``async def`` callback's, once its
    coroutine ends)."""

    def __init__(
        self,
        node: NodeLike,
        srv_type: ServiceType,
        name: str,
        callback: Callable[[Any, Any], Any],
        callback_group: CallbackGroup | None = None,
    ) -> None:
        self.srv_type = srv_type
        self.service_name = name
        self.callback = callback
        self.callback_group = _in_group(self, callback_group, node)
        self._core = ServiceServer(name, context=node.context)
        self._introspection = Introspection(node.context, name, srv_type)

    @property
    def srv_name(self) -> str:
        return self.service_name

    def configure_introspection(
        self, clock: Any, service_event_pub_qos: Any, introspection_state: int
    ) -> None:
        """rclpy's: publish this service's events on ``<service>/_service_event``
        (``introspection.py``)."""
        self._introspection.configure(clock, service_event_pub_qos, introspection_state)

    def waitables(self) -> Sequence[Waitable]:
        return (self._core,)

    def take(self, now: float) -> list[Work]:
        item = self._take()
        return [] if item is None else [item]

    def _take(self) -> Callable[[], Any] | None:
        got = self._core.get_request_with_info()
        if got is None:
            return None
        request, _ = got
        try:
            typed = deserialize(self.srv_type.Request, request.content)
        except TypeMismatchError as exc:
            _log.warning("service %s: %s", self.service_name, exc)
            self._core._discard(request.id)
            return None

        client, seq = request.id.client_gid, request.id.sequence_number
        self._introspection.event(ServiceEventInfo.REQUEST_RECEIVED, client, seq, request=typed)

        def respond(response: Any) -> None:
            if response is None:
                self._core._discard(request.id)
                return
            self._core.send_response(request.id, serialize(response))
            self._introspection.event(
                ServiceEventInfo.RESPONSE_SENT, client, seq, response=response
            )

        def run() -> Any:
            try:
                response = self.callback(typed, self.srv_type.Response())
            except BaseException:
                self._core._discard(request.id)
                raise
            if inspect.iscoroutine(response):
                return _respond_after(response, respond, lambda: self._core._discard(request.id))
            respond(response)
            return None

        return run

    def destroy(self) -> bool:
        self._introspection.close()
        self._core.close()
        return True


async def _respond_after(
    coroutine: Coroutine[Any, Any, Any], respond: Callable[[Any], None], drop: Callable[[], None]
) -> None:
    try:
        response = await coroutine
    except BaseException:
        drop()
        raise
    respond(response)


class NodeGuardCondition(Executable):
    """A guard condition whose callback runs in the executor after :meth:`trigger`
    (several triggers before it runs count once)."""

    def __init__(
        self, callback: Callable[[], Any], callback_group: CallbackGroup | None = None
    ) -> None:
        self.callback = callback
        if callback_group is not None:
            callback_group.add_entity(self)
        self.callback_group = callback_group or MutuallyExclusiveCallbackGroup()
        self._core = GuardCondition()

    def trigger(self) -> None:
        self._core.trigger()

    def waitables(self) -> Sequence[Waitable]:
        return (self._core,)

    def take(self, now: float) -> list[Work]:
        if not self._core.triggered:
            return []
        self._core._take()
        return [self.callback]

    def destroy(self) -> None:
        pass


#: the names of a node's parameter services, after its fully qualified name
PARAMETER_SERVICES = (
    "describe_parameters",
    "get_parameters",
    "get_parameter_types",
    "list_parameters",
    "set_parameters",
    "set_parameters_atomically",
)
