"""The ROS-style layer: :class:`Node`, its typed entities, timers and futures (rclpy's
shape); the executors that run their callbacks are in ``_executor``.

Built on the core entities, which stay as they are. Callbacks run in an executor's
``spin*()``. Service responses complete :class:`Future` objects as soon as they arrive (on
the polling thread), so :meth:`Client.call` works from any thread, spun or not.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from ._context import Context, resolve
from ._entities import Publisher, ServiceClient, ServiceServer, Subscription
from ._exceptions import ServiceTimeoutError, TypeMismatchError
from ._future import Future, refuse_coroutine
from ._graph import announcer_of
from ._interfaces import (
    HEADER_MESSAGE_TYPE,
    ServiceType,
    deserialize,
    serialize,
    type_name,
)
from ._log import get_logger
from ._names import resolve_name, validate_namespace, validate_node_name
from ._polling import NO_TICKET, Ticket
from ._protocol import PublishRoute, classify
from ._qos import DeadlineMissed, Delivery, DurabilityPolicy, MessageLost, QoSProfile
from ._types import MessageInfo, ServiceInfo
from ._waitable import GuardCondition, Waitable

__all__ = [
    "Client",
    "Executable",
    "Future",
    "Node",
    "NodeExecutor",
    "NodeGuardCondition",
    "NodePublisher",
    "NodeSubscription",
    "Service",
    "SubscriptionEventCallbacks",
    "Timer",
]

_log = get_logger("node")
T = TypeVar("T")


class NodeExecutor(Protocol):
    """What a node asks of the executor it is in (``_executor.Executor`` is one)."""

    def wake(self) -> None: ...

    def remove_node(self, node: Node) -> None: ...


#: one callback ready to run, with its arguments bound
Work = Callable[[], Any]


class Executable(abc.ABC):
    """What an executor runs: the node entities that have callbacks (subscriptions,
    services, timers, guard conditions, and any new kind: actions, parameter services),
    rclpy's ``Waitable``. The executor waits until one of :meth:`waitables` is ready or
    :meth:`due_in` has passed, then asks every executable to :meth:`take` its work and runs
    what it got. Implementations are thread-safe: ``take`` runs on the spinning thread,
    the work on it or on an executor's pool."""

    def waitables(self) -> Sequence[Waitable]:
        """What becomes ready when this has work (a core subscription, a guard)."""
        return ()

    def due_in(self, now: float) -> float | None:
        """Seconds (from monotonic ``now``) until time alone gives it work (a timer, a QoS
        deadline); None: never."""
        return None

    @abc.abstractmethod
    def take(self, now: float) -> list[Work]:
        """The work ready now, taken (quick; an empty list when there is none)."""


def _runnable(callback: Callable[..., Any], what: str) -> None:
    """Refuse a callback the executors would call without ever running its body."""
    refuse_coroutine(callback, what)


class NodePublisher(Generic[T]):
    """Publishes typed messages; the body is YAML, the type in ``Message-Type``."""

    def __init__(self, node: Node, msg_type: type[T], topic: str) -> None:
        self.msg_type = msg_type
        self.topic = topic
        self._type_name = type_name(msg_type)
        self._core = Publisher(topic, context=node.context)

    def publish(self, msg: T) -> None:
        if not isinstance(msg, self.msg_type):
            raise TypeMismatchError(
                f"publisher of {self._type_name} on {self.topic} given {type(msg).__name__}"
            )
        self._core.publish(serialize(msg), {HEADER_MESSAGE_TYPE: self._type_name})

    def destroy(self) -> None:
        self._core.close()


@dataclasses.dataclass
class SubscriptionEventCallbacks:
    """Callbacks for a subscription's QoS events; they run in the executor."""

    deadline: Callable[[DeadlineMissed], Any] | None = None
    message_lost: Callable[[MessageLost], Any] | None = None
    type_mismatch: Callable[[TypeMismatchError], Any] | None = None


class NodeSubscription(Executable, Generic[T]):
    """A typed subscription whose callback runs in the executor, with QoS applied.

    Mail of another type (or that does not fit the type) is counted in
    :attr:`type_mismatches`, logged once and reported to the ``type_mismatch`` event
    callback: never a crash.

    The callback takes the message, or (as in rclpy) the message and its
    :class:`~emailmw.MessageInfo`. A message is settled once its callback has returned (or
    raised): with a ``state-file``, a process that dies before that gets it again after a
    restart, with ``info.redelivered`` True.
    """

    def __init__(
        self,
        node: Node,
        msg_type: type[T],
        topic: str,
        callback: Callable[[T], Any],
        qos: QoSProfile,
        events: SubscriptionEventCallbacks,
        mode: str = "topic",
        group: str | None = None,
    ) -> None:
        self.msg_type = msg_type
        self.topic = topic
        self.callback = callback
        self._with_info = _takes_info(callback)
        self.qos = qos
        self.events = events
        self.type_mismatches = 0
        self._type_name = type_name(msg_type)
        self._delivery: Delivery[tuple[str, Ticket]] = Delivery(qos, time.time_ns())
        self._core = Subscription(
            topic, qos.queue_depth, context=node.context, mode=mode, group=group
        )
        if qos.durability is DurabilityPolicy.TRANSIENT_LOCAL:
            self._replay_history(node.context)

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

    def _mismatch(self, exc: TypeMismatchError) -> list[Callable[[], None]]:
        self.type_mismatches += 1
        if self.type_mismatches == 1:
            _log.warning("%s", exc)
        handler = self.events.type_mismatch
        return [] if handler is None else [lambda: handler(exc)]

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
                ticket.release()
                work += self._mismatch(exc)
                continue
            args = (msg, info) if self._with_info else (msg,)
            work.append(functools.partial(_then_release, self.callback, args, ticket))
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
        got = self._core._take()
        if got is None:
            return []
        body, info, ticket = got
        if info.message_type not in (None, self._type_name):
            ticket.release()
            return self._mismatch(
                TypeMismatchError(
                    f"subscription of {self._type_name} on {self.topic} received "
                    f"{info.message_type}"
                )
            )
        step = self._delivery.offer((body, ticket), info, time.time_ns())
        if step.dropped:  # expired or a duplicate: done with
            ticket.release()
        return self._work(step.deliver, step.events)

    def _poll(self) -> list[Callable[[], None]]:
        return self._work(*self._delivery.poll(time.time_ns()))

    def _next_check(self) -> float | None:
        """Seconds until the QoS rules need a look (gap timeout, deadline), or None."""
        when = self._delivery.next_check_ns()
        return None if when is None else max(0.0, (when - time.time_ns()) / 1e9)

    def destroy(self) -> None:
        self._core.close()


def _then_release(callback: Callable[..., Any], args: tuple[Any, ...], ticket: Ticket) -> None:
    try:
        callback(*args)
    finally:
        ticket.release()


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


class Client(Generic[T]):
    """A typed service client: :meth:`call_async` returns a :class:`Future`."""

    def __init__(self, node: Node, srv_type: ServiceType, name: str) -> None:
        self.srv_type = srv_type
        self.service_name = name
        self._core = ServiceClient(name, context=node.context)

    def call_async(self, request: Any) -> Future[Any]:
        """Send ``request``; the future completes with the typed response (or fails with
        the reason: the request refused, the client destroyed, a response of the wrong
        type). Cancelling it abandons the call."""
        if not isinstance(request, self.srv_type.Request):
            raise TypeMismatchError(f"{self.srv_type.name} request expected, got {request!r}")
        sent = self._core.send_request_async(serialize(request))
        future: Future[Any] = Future(f"the call to service {self.service_name!r}")

        def answered(done: Future[tuple[str, ServiceInfo]]) -> None:
            failure = done.exception()
            if done.cancelled():
                future.cancel()
            elif failure is not None:
                future.set_exception(failure)
            else:
                try:
                    future.set_result(deserialize(self.srv_type.Response, done.result()[0]))
                except TypeMismatchError as exc:
                    future.set_exception(exc)

        sent.add_done_callback(answered)

        def abandoned(done: Future[Any]) -> None:
            if done.cancelled():
                sent.cancel()

        future.add_done_callback(abandoned)
        return future

    def call(self, request: Any, timeout: float | None = None) -> Any:
        """Block for the response; :class:`ServiceTimeoutError` after ``timeout`` s (the
        call is then abandoned)."""
        future = self.call_async(request)
        try:
            return future.result(timeout)
        except ServiceTimeoutError:
            future.cancel()
            raise

    def destroy(self) -> None:
        """Close the client: pending calls fail with :class:`~emailmw.ClosedError`."""
        self._core.close()


class Service(Executable):
    """A typed service server; ``callback(request, response) -> response`` runs in the
    executor and its return value is sent back."""

    def __init__(
        self, node: Node, srv_type: ServiceType, name: str, callback: Callable[[Any, Any], Any]
    ) -> None:
        self.srv_type = srv_type
        self.service_name = name
        self.callback = callback
        self._core = ServiceServer(name, context=node.context)

    def waitables(self) -> Sequence[Waitable]:
        return (self._core,)

    def take(self, now: float) -> list[Work]:
        item = self._take()
        return [] if item is None else [item]

    def _take(self) -> Callable[[], None] | None:
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

        def run() -> None:
            try:
                response = self.callback(typed, self.srv_type.Response())
            except BaseException:
                self._core._discard(request.id)
                raise
            if response is None:
                self._core._discard(request.id)
                return
            self._core.send_response(request.id, serialize(response))

        return run

    def destroy(self) -> None:
        self._core.close()


class Timer(Executable):
    """Calls ``callback`` every ``period`` seconds while its node is spun."""

    def __init__(self, period: float, callback: Callable[[], Any]) -> None:
        if period <= 0:
            raise ValueError(f"timer period must be > 0, got {period}")
        self.timer_period_ns = int(period * 1e9)
        self.callback = callback
        self._next = time.monotonic() + period
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def is_canceled(self) -> bool:
        return self._cancelled

    def reset(self) -> None:
        self._cancelled = False
        self._next = time.monotonic() + self.timer_period_ns / 1e9

    def due_in(self, now: float) -> float | None:
        return None if self._cancelled else self._next - now

    def take(self, now: float) -> list[Work]:
        if self._cancelled or self._next > now:
            return []
        self._fire(now)
        return [self.callback]

    def _fire(self, now: float) -> None:
        period = self.timer_period_ns / 1e9
        self._next += period
        if self._next <= now:  # fell behind: skip missed periods instead of bursting
            self._next = now + period


class NodeGuardCondition(Executable):
    """A guard condition whose callback runs in the executor after :meth:`trigger`
    (several triggers before it runs count once)."""

    def __init__(self, callback: Callable[[], Any]) -> None:
        self.callback = callback
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


class Node:
    """A named participant, rclpy's ``Node``. Names are resolved with ROS rules.

    The node announces itself and its entities on the graph topic when it starts, when its
    entities change and every ``announce_period`` seconds, and leaves when destroyed.
    """

    def __init__(
        self,
        node_name: str,
        *,
        namespace: str = "/",
        context: Context | None = None,
        announce_period: float = 30.0,
    ) -> None:
        self._name = validate_node_name(node_name)
        self._namespace = validate_namespace(namespace)
        if announce_period <= 0:
            raise ValueError(f"announce_period must be > 0, got {announce_period}")
        self.announce_period = announce_period
        self.context = resolve(context)
        self.publishers: list[NodePublisher[Any]] = []
        self.subscriptions: list[NodeSubscription[Any]] = []
        self.clients: list[Client[Any]] = []
        self.services: list[Service] = []
        self.timers: list[Timer] = []
        self.guards: list[NodeGuardCondition] = []
        self.executor: NodeExecutor | None = None
        self._destroyed = False
        announcer_of(self.context).add(self)

    def get_name(self) -> str:
        return self._name

    def executables(self) -> list[Executable]:
        """What an executor runs of this node: its subscriptions, services, timers and
        guard conditions."""
        return [*self.subscriptions, *self.services, *self.timers, *self.guards]

    def get_namespace(self) -> str:
        return self._namespace

    def get_fully_qualified_name(self) -> str:
        return f"{self._namespace.rstrip('/')}/{self._name}"

    def resolve(self, name: str, what: str = "topic name") -> str:
        return resolve_name(name, self._name, self._namespace, what)

    def _changed(self) -> None:
        if self.executor is not None:
            self.executor.wake()
        if not self._destroyed:
            announcer_of(self.context).send(self)

    def create_publisher(self, msg_type: type[T], topic: str, qos: int = 10) -> NodePublisher[T]:
        del qos  # history depth matters to subscriptions; kept for rclpy's signature
        publisher = NodePublisher(self, msg_type, self.resolve(topic))
        self.publishers.append(publisher)
        self._changed()
        return publisher

    def create_subscription(
        self,
        msg_type: type[T],
        topic: str,
        callback: Callable[[T], Any],
        qos: int | QoSProfile = 10,
        *,
        event_callbacks: SubscriptionEventCallbacks | None = None,
        mode: str = "topic",
        group: str | None = None,
    ) -> NodeSubscription[T]:
        """``qos`` is a :class:`QoSProfile`, or an int: keep-last with that depth.
        ``mode``/``group``: a delivery mode (``docs/delivery-modes.md``); with ``stateful``
        or ``stateless`` a message is acknowledged once its callback returned."""
        _runnable(callback, "subscription")
        profile = qos if isinstance(qos, QoSProfile) else QoSProfile(depth=qos)
        subscription = NodeSubscription(
            self,
            msg_type,
            self.resolve(topic),
            callback,
            profile,
            event_callbacks or SubscriptionEventCallbacks(),
            mode,
            group,
        )
        self.subscriptions.append(subscription)
        self._changed()
        return subscription

    def create_client(self, srv_type: ServiceType, srv_name: str) -> Client[Any]:
        client: Client[Any] = Client(self, srv_type, self.resolve(srv_name, "service name"))
        self.clients.append(client)
        self._changed()
        return client

    def create_service(
        self, srv_type: ServiceType, srv_name: str, callback: Callable[[Any, Any], Any]
    ) -> Service:
        _runnable(callback, "service")
        service = Service(self, srv_type, self.resolve(srv_name, "service name"), callback)
        self.services.append(service)
        self._changed()
        return service

    def create_timer(self, timer_period_sec: float, callback: Callable[[], Any]) -> Timer:
        _runnable(callback, "timer")
        timer = Timer(timer_period_sec, callback)
        self.timers.append(timer)
        self._changed()
        return timer

    def create_guard_condition(self, callback: Callable[[], Any]) -> NodeGuardCondition:
        _runnable(callback, "guard condition")
        guard = NodeGuardCondition(callback)
        self.guards.append(guard)
        self._changed()
        return guard

    def destroy_publisher(self, publisher: NodePublisher[Any]) -> None:
        self.publishers.remove(publisher)
        publisher.destroy()
        self._changed()

    def destroy_subscription(self, subscription: NodeSubscription[Any]) -> None:
        self.subscriptions.remove(subscription)
        subscription.destroy()
        self._changed()

    def destroy_client(self, client: Client[Any]) -> None:
        self.clients.remove(client)
        client.destroy()
        self._changed()

    def destroy_service(self, service: Service) -> None:
        self.services.remove(service)
        service.destroy()
        self._changed()

    def destroy_timer(self, timer: Timer) -> None:
        self.timers.remove(timer)
        timer.cancel()
        self._changed()

    def destroy_guard_condition(self, guard: NodeGuardCondition) -> None:
        self.guards.remove(guard)
        self._changed()

    def destroy_node(self) -> None:
        """Destroy every entity and leave the graph. Idempotent."""
        if self._destroyed:
            return
        self._destroyed = True
        if self.context.ok():
            announcer_of(self.context).remove(self)
        entities: list[Any] = [*self.publishers, *self.subscriptions, *self.clients, *self.services]
        for entity in entities:
            entity.destroy()
        for timer in self.timers:
            timer.cancel()
        self.publishers.clear()
        self.subscriptions.clear()
        self.clients.clear()
        self.services.clear()
        self.timers.clear()
        self.guards.clear()
        if self.executor is not None:
            self.executor.remove_node(self)
