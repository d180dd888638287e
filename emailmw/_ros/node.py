"""The ROS-style layer: :class:`Node`, its typed entities, timers, rates and parameters
(rclpy's shape, ``emailmw.node``); the executors that run their callbacks are in
``_executor``.

Built on the core entities. Callbacks run in an executor's ``spin*()``, each entity's in
its callback group (``emailmw.callback_groups``; a node's default group is mutually
exclusive). Every node entity is an :class:`Executable`: the executors know nothing else
of it. Service responses complete :class:`~emailmw.task.Future` objects as soon as they
arrive (on the polling thread), so :meth:`Client.call` works from any thread, spun or not.
Callbacks may be ``async def``: the executor drives their coroutines (an ``await`` on a
future suspends the callback, not the executor).
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import functools
import inspect
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from .._core.config import BatchPolicy
from .._core.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidParameterTypeException,
    InvalidParameterValueException,
    ParameterAlreadyDeclaredException,
    ParameterImmutableException,
    ParameterNotDeclaredException,
    ROSInterruptException,
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
from .._core.names import resolve_name, validate_namespace, validate_node_name
from .._core.protocol import PublishRoute, classify
from .._core.qos import DeadlineMissed, Delivery, DurabilityPolicy, MessageLost, QoSProfile
from .._core.ros_args import RosArgs, parse_ros_args
from .._core.ros_logging import RcutilsLogger, set_levels_from_args
from .._core.ros_logging import get_logger as get_ros_logger
from .._core.types import MessageInfo
from .._core.waitables import GuardCondition, Waitable
from .._delivery.context import Context, resolve
from .._delivery.entities import Publisher, ServiceClient, ServiceServer, Subscription
from .._delivery.graph import Graph, announcer_of, graph_of
from .._delivery.groups import GroupSettings
from .._delivery.polling import NO_TICKET, RefusalLog, Ticket
from ..rcl_interfaces.msg import (
    ListParametersResult,
    ParameterDescriptor,
    SetParametersResult,
)
from ..rcl_interfaces.srv import (
    DescribeParameters,
    GetParameters,
    GetParameterTypes,
    ListParameters,
    SetParameters,
    SetParametersAtomically,
)
from .callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from .parameters import Parameter
from .time import Clock, ClockType, ROSClock, Time

__all__ = [
    "Client",
    "Executable",
    "Future",
    "Node",
    "NodeExecutor",
    "NodeGuardCondition",
    "NodePublisher",
    "NodeSubscription",
    "Rate",
    "Service",
    "SubscriptionEventCallbacks",
    "Timer",
    "TimerInfo",
    "create_node",
]

_log = get_logger("node")
T = TypeVar("T")
#: the relative tolerance of a double parameter's step (rclpy's PARAM_REL_TOL)
PARAM_REL_TOL = 1e-6


class NodeExecutor(Protocol):
    """What a node asks of the executor it is in (``_executor.Executor`` is one)."""

    def wake(self) -> None: ...

    def remove_node(self, node: Node) -> None: ...


#: one callback ready to run, with its arguments bound (it may return a coroutine: the
#: executor then drives it)
Work = Callable[[], Any]


class Executable(abc.ABC):
    """What an executor runs: the node entities that have callbacks (subscriptions,
    services, timers, guard conditions, and any new kind: actions, parameter services),
    rclpy's ``Waitable``. The executor waits until one of :meth:`waitables` is ready or
    :meth:`due_in` has passed, then asks each executable whose :attr:`callback_group` can
    run a callback to :meth:`take` its work, and runs what it got (in that group).
    Implementations are thread-safe: ``take`` runs on the spinning thread, the work on
    it or on an executor's pool."""

    callback_group: CallbackGroup

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
    """Refuse what is not callable at all (an ``async def`` callback runs: the executor
    drives its coroutine)."""
    if not callable(callback):
        raise ArgumentTypeError(f"the {what} callback must be callable, got {callback!r}")


def _in_group(entity: Any, group: CallbackGroup | None, node: Node) -> CallbackGroup:
    chosen = group if group is not None else node.default_callback_group
    chosen.add_entity(entity)
    return chosen


class NodePublisher(Generic[T]):
    """Publishes typed messages; the body is YAML, the type in ``Message-Type``."""

    def __init__(
        self,
        node: Node,
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
        self._type_name = type_name(msg_type)
        self._core = Publisher(topic, context=node.context, batch=batch, compress=compress)

    @property
    def topic_name(self) -> str:
        return self.topic

    def publish(self, msg: T) -> None:
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
class SubscriptionEventCallbacks:
    """Callbacks for a subscription's QoS events; they run in the executor."""

    deadline: Callable[[DeadlineMissed], Any] | None = None
    message_lost: Callable[[MessageLost], Any] | None = None
    type_mismatch: Callable[[TypeMismatchError], Any] | None = None


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
        node: Node,
        msg_type: type[T],
        topic: str,
        callback: Callable[..., Any],
        qos: QoSProfile,
        events: SubscriptionEventCallbacks,
        mode: str = "topic",
        group: str | None = None,
        callback_group: CallbackGroup | None = None,
        group_settings: GroupSettings | None = None,
    ) -> None:
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
                work += self._mismatch(exc, ticket, info)
                continue
            args = (msg, info) if self._with_info else (msg,)
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


class Client(Generic[T]):
    """A typed service client (rclpy's ``Client``): :meth:`call_async` returns a
    :class:`~emailmw.task.Future`; :meth:`wait_for_service` waits until the graph has a
    server."""

    def __init__(
        self,
        node: Node,
        srv_type: ServiceType,
        name: str,
        callback_group: CallbackGroup | None = None,
    ) -> None:
        self.srv_type = srv_type
        self.service_name = name
        self._node = node
        self.callback_group = _in_group(self, callback_group, node)
        self._core = ServiceClient(name, context=node.context)
        self._lock = threading.Lock()
        self._pending: list[Future[Any]] = []

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
        sent = self._core.send_request_async(serialize(request))
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
        relay(sent, future, lambda raw: deserialize(self.srv_type.Response, raw[0]))
        future._when_done(abandoned)
        return future

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
        self._core.close()
        return True


def _servers(graph: Graph, service: str) -> int:
    return sum(1 for n in graph.nodes.values() for s, _ in n.services if s == service)


class Service(Executable):
    """A typed service server; ``callback(request, response) -> response`` runs in the
    executor and its return value is sent back (an ``async def`` callback's, once its
    coroutine ends)."""

    def __init__(
        self,
        node: Node,
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

    @property
    def srv_name(self) -> str:
        return self.service_name

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

        def respond(response: Any) -> None:
            if response is None:
                self._core._discard(request.id)
                return
            self._core.send_response(request.id, serialize(response))

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


@dataclasses.dataclass(frozen=True)
class TimerInfo:
    """What a timer callback that takes one argument is given (rclpy's ``TimerInfo``)."""

    expected_call_time: Time
    actual_call_time: Time


class Timer(Executable):
    """Calls ``callback`` every ``period`` seconds while its node is spun (rclpy's
    ``Timer``): a callback that fell behind skips the missed periods rather than
    bursting. A callback taking one argument gets a :class:`TimerInfo`."""

    def __init__(
        self,
        period: float,
        callback: Callable[..., Any] | None,
        callback_group: CallbackGroup | None = None,
        clock: Clock | None = None,
        *,
        autostart: bool = True,
    ) -> None:
        if period <= 0:
            raise InvalidArgumentError(f"timer period must be > 0, got {period}")
        self.timer_period_ns = int(period * 1e9)
        self.callback = callback
        self.clock = clock if clock is not None else Clock(clock_type=ClockType.STEADY_TIME)
        self._with_info = callback is not None and _takes_one(callback)
        if callback_group is not None:
            callback_group.add_entity(self)
        self.callback_group = callback_group or MutuallyExclusiveCallbackGroup()
        self._lock = threading.Lock()
        self._next = time.monotonic() + period
        self._last = time.monotonic()
        self._cancelled = not autostart

    def _attach(self, group: CallbackGroup) -> None:
        group.add_entity(self)
        self.callback_group = group

    @property
    def timer_period_sec(self) -> float:
        return self.timer_period_ns / 1e9

    @timer_period_sec.setter
    def timer_period_sec(self, period: float) -> None:
        self.timer_period_ns = int(period * 1e9)

    def cancel(self) -> None:
        self._cancelled = True

    def is_canceled(self) -> bool:
        return self._cancelled

    def reset(self) -> None:
        """Start (again) from now: the next call one period away."""
        with self._lock:
            self._cancelled = False
            self._next = time.monotonic() + self.timer_period_ns / 1e9

    def is_ready(self) -> bool:
        return not self._cancelled and self._next <= time.monotonic()

    def time_until_next_call(self) -> int | None:
        """Nanoseconds until the next call; None when cancelled."""
        if self._cancelled:
            return None
        return max(0, int((self._next - time.monotonic()) * 1e9))

    def time_since_last_call(self) -> int:
        return int((time.monotonic() - self._last) * 1e9)

    def due_in(self, now: float) -> float | None:
        return None if self._cancelled else self._next - now

    def take(self, now: float) -> list[Work]:
        with self._lock:
            if self._cancelled or self._next > now or self.callback is None:
                return []
            expected = self._next
            self._fire(now)
        callback = self.callback
        if not self._with_info:
            return [callback]
        wall = time.time_ns()
        info = TimerInfo(
            Time(nanoseconds=max(0, wall - int((now - expected) * 1e9))),
            Time(nanoseconds=wall),
        )
        return [functools.partial(callback, info)]

    def _fire(self, now: float) -> None:
        period = self.timer_period_ns / 1e9
        self._last = now
        self._next += period
        if self._next <= now:  # fell behind: skip missed periods instead of bursting
            self._next = now + period

    def destroy(self) -> None:
        self.cancel()


def _takes_one(callback: Callable[..., Any]) -> bool:
    """True when ``callback`` takes one required positional argument."""
    try:
        parameters = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(required) == 1


class Rate:
    """Sleeps to keep a loop at ``frequency`` Hz (rclpy's ``Rate``, from
    :meth:`Node.create_rate`): each :meth:`sleep` returns at the next period's start, or
    at once when the loop fell behind. Raises :class:`~emailmw.exceptions.ROSInterruptException`
    from :meth:`sleep` once the context shuts down. Works whether the node is spun or not."""

    def __init__(self, frequency: float, context: Context, clock: Clock | None = None) -> None:
        if not frequency > 0:
            raise InvalidArgumentError(f"a rate's frequency must be > 0 Hz, got {frequency}")
        self._period = 1.0 / frequency
        self._context = context
        self._clock = clock
        self._next = time.monotonic() + self._period
        self._destroyed = False

    def sleep(self) -> None:
        if self._destroyed:
            raise ROSInterruptException()
        while True:
            if not self._context.ok():
                raise ROSInterruptException()
            left = self._next - time.monotonic()
            if left <= 0:
                break
            self._context.wait_for_shutdown(left)
        now = time.monotonic()
        self._next += self._period
        if self._next <= now:
            self._next = now + self._period

    def destroy(self) -> None:
        self._destroyed = True


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


class Node:
    """A named participant, rclpy's ``Node``. Names are resolved with ROS rules, then
    remapped by ``-r from:=to`` arguments.

    ``cli_args``: the node's own ROS arguments (``["--ros-args", "-p", "rate:=5"]``);
    with ``use_global_arguments`` those given to :func:`emailmw.init` apply too.
    ``parameter_overrides`` (a list of :class:`~emailmw.parameter.Parameter`) win over
    both. With ``start_parameter_services`` the node serves its parameters on
    ``<node>/list_parameters``, ``get_parameters``, ``set_parameters``, ... over email
    (``emailmw param``, another process's ``AsyncParameterClient``-style calls), answered
    while it is spun.

    The node announces itself and its entities on the graph topic when it starts, when
    its entities change and every ``announce_period`` seconds, and leaves when destroyed.
    Thread-safe, as rclpy's: entities may be created from any thread.
    """

    PARAM_REL_TOL = PARAM_REL_TOL

    def __init__(
        self,
        node_name: str,
        *,
        context: Context | None = None,
        cli_args: list[str] | None = None,
        namespace: str | None = None,
        use_global_arguments: bool = True,
        enable_rosout: bool = True,
        start_parameter_services: bool = True,
        parameter_overrides: list[Parameter[Any]] | None = None,
        allow_undeclared_parameters: bool = False,
        automatically_declare_parameters_from_overrides: bool = False,
        enable_logger_service: bool = False,
        announce_period: float = 30.0,
    ) -> None:
        del enable_rosout, enable_logger_service  # no /rosout or logger services here
        self.context = resolve(context)
        own = parse_ros_args(cli_args)
        self._args: RosArgs = self.context.ros_args.merged(own) if use_global_arguments else own
        set_levels_from_args(own.log_levels)
        self._name = validate_node_name(self._args.node_name or node_name)
        self._namespace = validate_namespace(self._args.namespace or namespace or "/")
        if announce_period <= 0:
            raise InvalidArgumentError(f"announce_period must be > 0, got {announce_period}")
        self.announce_period = announce_period
        self._lock = threading.RLock()
        self.default_callback_group: CallbackGroup = MutuallyExclusiveCallbackGroup()
        self.publishers: list[NodePublisher[Any]] = []
        self.subscriptions: list[NodeSubscription[Any]] = []
        self.clients: list[Client[Any]] = []
        self.services: list[Service] = []
        self.timers: list[Timer] = []
        self.guards: list[NodeGuardCondition] = []
        self.waitables: list[Executable] = []
        self.executor: NodeExecutor | None = None
        self._destroyed = False
        self._logger = get_ros_logger(self.get_fully_qualified_name().lstrip("/").replace("/", "."))
        self._clock = ROSClock()
        # parameters
        self._parameters: dict[str, Parameter[Any]] = {}
        self._descriptors: dict[str, Any] = {}
        self._allow_undeclared = allow_undeclared_parameters
        self._pre_set: list[Callable[[list[Parameter[Any]]], list[Parameter[Any]]]] = []
        self._on_set: list[Callable[[list[Parameter[Any]]], Any]] = []
        self._post_set: list[Callable[[list[Parameter[Any]]], None]] = []
        overrides = self._args.overrides_for(self._name, self.get_fully_qualified_name())
        self._overrides: dict[str, Parameter[Any]] = {}
        for name, value in overrides.items():
            try:
                self._overrides[name] = Parameter(name, value=value)
            except (TypeError, ValueError) as exc:
                raise InvalidParameterValueException(name, value, str(exc)) from None
        for parameter in parameter_overrides or ():
            self._overrides[parameter.name] = parameter
        announcer_of(self.context).add(self)
        try:
            self.declare_parameter("use_sim_time", False)
            if automatically_declare_parameters_from_overrides:
                for name, parameter in self._overrides.items():
                    if name not in self._parameters:
                        self.declare_parameter(name, parameter.value)
            if start_parameter_services:
                self._start_parameter_services()
        except BaseException:
            self.destroy_node()
            raise

    # ------------------------------------------------------------------ names, clock, log

    def get_name(self) -> str:
        return self._name

    def get_namespace(self) -> str:
        return self._namespace

    def get_fully_qualified_name(self) -> str:
        return f"{self._namespace.rstrip('/')}/{self._name}"

    def get_logger(self) -> RcutilsLogger:
        """The node's logger (rclpy's ``RcutilsLogger``), named after the node."""
        return self._logger

    def get_clock(self) -> Clock:
        """The node's ROS clock (the system clock: emailmw has no simulated time)."""
        return self._clock

    def resolve(self, name: str, what: str = "topic name") -> str:
        """``name`` resolved as this node resolves it, then remapped (``-r``)."""
        return self._args.remap(resolve_name(name, self._name, self._namespace, what), self._name)

    def resolve_topic_name(self, topic: str, *, only_expand: bool = False) -> str:
        expanded = resolve_name(topic, self._name, self._namespace, "topic name")
        return expanded if only_expand else self._args.remap(expanded, self._name)

    def resolve_service_name(self, service: str, *, only_expand: bool = False) -> str:
        expanded = resolve_name(service, self._name, self._namespace, "service name")
        return expanded if only_expand else self._args.remap(expanded, self._name)

    def executables(self) -> list[Executable]:
        """What an executor runs of this node: its subscriptions, services, timers, guard
        conditions and other waitables (actions)."""
        with self._lock:
            return [*self.subscriptions, *self.services, *self.timers, *self.guards,
                    *self.waitables]  # fmt: skip

    def add_waitable(self, waitable: Executable) -> None:
        """Let an executor run ``waitable`` with this node's other entities (an action
        server or client adds itself)."""
        with self._lock:
            self.waitables.append(waitable)
        self._changed()

    def remove_waitable(self, waitable: Executable) -> None:
        with self._lock:
            if waitable in self.waitables:
                self.waitables.remove(waitable)
        self._changed()

    def _changed(self) -> None:
        if self.executor is not None:
            self.executor.wake()
        if not self._destroyed and self.context.ok():
            announcer_of(self.context).send(self)

    def _add(self, group: list[Any], entity: T) -> T:
        with self._lock:
            group.append(entity)
        self._changed()
        return entity

    # ------------------------------------------------------------------ entities

    def create_publisher(
        self,
        msg_type: type[T],
        topic: str,
        qos_profile: QoSProfile | int = 10,
        *,
        callback_group: CallbackGroup | None = None,
        event_callbacks: Any = None,
        qos_overriding_options: Any = None,
        publisher_class: Any = None,
        batch: BatchPolicy | bool | None = None,
        compress: str | None = None,
    ) -> NodePublisher[T]:
        """A publisher of ``msg_type`` on ``topic`` (``qos_profile``: a
        :class:`~emailmw.qos.QoSProfile`, or a keep-last depth; what matters of it is on
        the subscription side). ``batch`` and ``compress`` (emailmw's): as
        :class:`~emailmw.Publisher`'s (``docs/batching.md``)."""
        del callback_group, event_callbacks, qos_overriding_options, publisher_class
        profile = (
            qos_profile if isinstance(qos_profile, QoSProfile) else QoSProfile(depth=qos_profile)
        )
        return self._add(
            self.publishers,
            NodePublisher(self, msg_type, self.resolve(topic), profile, batch, compress),
        )

    def create_subscription(
        self,
        msg_type: type[T],
        topic: str,
        callback: Callable[..., Any],
        qos_profile: QoSProfile | int = 10,
        *,
        callback_group: CallbackGroup | None = None,
        event_callbacks: SubscriptionEventCallbacks | None = None,
        qos_overriding_options: Any = None,
        raw: bool = False,
        mode: str = "topic",
        group: str | None = None,
        group_settings: GroupSettings | None = None,
    ) -> NodeSubscription[T]:
        """A subscription whose ``callback`` (the message, or the message and its
        :class:`~emailmw.MessageInfo`) runs in the executor. ``qos_profile``: a
        :class:`~emailmw.qos.QoSProfile`, or a keep-last depth. ``mode``/``group``: a
        delivery mode (``docs/delivery-modes.md``); with ``stateful`` or ``stateless`` a
        message is acknowledged once its callback returned, and one whose callback raised
        is offered again, up to ``group_settings.max_deliveries`` (default 5), then
        quarantined."""
        del qos_overriding_options
        if raw:
            raise InvalidArgumentError(
                "raw subscriptions are not supported: messages are typed YAML"
            )
        _runnable(callback, "subscription")
        profile = (
            qos_profile if isinstance(qos_profile, QoSProfile) else QoSProfile(depth=qos_profile)
        )
        subscription = NodeSubscription(
            self,
            msg_type,
            self.resolve(topic),
            callback,
            profile,
            event_callbacks or SubscriptionEventCallbacks(),
            mode,
            group,
            callback_group,
            group_settings,
        )
        return self._add(self.subscriptions, subscription)

    def create_client(
        self,
        srv_type: ServiceType,
        srv_name: str,
        *,
        qos_profile: QoSProfile | None = None,
        callback_group: CallbackGroup | None = None,
    ) -> Client[Any]:
        del qos_profile
        client: Client[Any] = Client(
            self, srv_type, self.resolve(srv_name, "service name"), callback_group
        )
        return self._add(self.clients, client)

    def create_service(
        self,
        srv_type: ServiceType,
        srv_name: str,
        callback: Callable[[Any, Any], Any],
        *,
        qos_profile: QoSProfile | None = None,
        callback_group: CallbackGroup | None = None,
    ) -> Service:
        del qos_profile
        _runnable(callback, "service")
        service = Service(
            self, srv_type, self.resolve(srv_name, "service name"), callback, callback_group
        )
        return self._add(self.services, service)

    def create_timer(
        self,
        timer_period_sec: float,
        callback: Callable[..., Any] | None,
        callback_group: CallbackGroup | None = None,
        clock: Clock | None = None,
        autostart: bool = True,
    ) -> Timer:
        """A timer calling ``callback`` every ``timer_period_sec`` seconds while the node
        is spun (``autostart`` False: after :meth:`Timer.reset`)."""
        if callback is not None:
            _runnable(callback, "timer")
        timer = Timer(timer_period_sec, callback, None, clock, autostart=autostart)
        timer._attach(callback_group if callback_group is not None else self.default_callback_group)
        return self._add(self.timers, timer)

    def create_guard_condition(
        self, callback: Callable[[], Any], callback_group: CallbackGroup | None = None
    ) -> NodeGuardCondition:
        _runnable(callback, "guard condition")
        guard = NodeGuardCondition(
            callback,
            callback_group if callback_group is not None else self.default_callback_group,
        )
        return self._add(self.guards, guard)

    def create_rate(self, frequency: float, clock: Clock | None = None) -> Rate:
        """A :class:`Rate` of ``frequency`` Hz for a loop (its ``sleep`` raises
        ``ROSInterruptException`` once the context shuts down)."""
        return Rate(frequency, self.context, clock)

    def _remove(self, group: list[Any], entity: Any) -> bool:
        with self._lock:
            if entity not in group:
                return False
            group.remove(entity)
        entity.destroy()
        self._changed()
        return True

    def destroy_publisher(self, publisher: NodePublisher[Any]) -> bool:
        return self._remove(self.publishers, publisher)

    def destroy_subscription(self, subscription: NodeSubscription[Any]) -> bool:
        return self._remove(self.subscriptions, subscription)

    def destroy_client(self, client: Client[Any]) -> bool:
        return self._remove(self.clients, client)

    def destroy_service(self, service: Service) -> bool:
        return self._remove(self.services, service)

    def destroy_timer(self, timer: Timer) -> bool:
        return self._remove(self.timers, timer)

    def destroy_guard_condition(self, guard: NodeGuardCondition) -> bool:
        return self._remove(self.guards, guard)

    def destroy_rate(self, rate: Rate) -> bool:
        rate.destroy()
        return True

    def destroy_node(self) -> None:
        """Destroy every entity and leave the graph. Idempotent; works after the context
        shut down."""
        if self._destroyed:
            return
        self._destroyed = True
        if self.context.ok():
            try:
                announcer_of(self.context).remove(self)
            except Exception as exc:  # noqa: BLE001 - leaving is best effort
                _log.debug("leaving the graph failed: %s", exc)
        with self._lock:
            entities: list[Any] = [*self.publishers, *self.subscriptions, *self.clients,
                                   *self.services, *self.timers, *self.guards]  # fmt: skip
            for group in (self.publishers, self.subscriptions, self.clients, self.services,
                          self.timers, self.guards):  # fmt: skip
                group.clear()
            waitables, self.waitables = self.waitables, []
        for entity in [*entities, *waitables]:
            destroy = getattr(entity, "destroy", None)
            if destroy is not None:
                destroy()
        if self.executor is not None:
            self.executor.remove_node(self)

    # ------------------------------------------------------------------ the graph

    def _graph(self) -> Graph:
        return graph_of(self.context).graph()

    def get_topic_names_and_types(self, no_demangle: bool = False) -> list[tuple[str, list[str]]]:
        del no_demangle
        return sorted((t, sorted(k)) for t, k in self._graph().topics().items())

    def get_service_names_and_types(self) -> list[tuple[str, list[str]]]:
        return sorted((s, sorted(k)) for s, k in self._graph().services().items())

    def get_node_names(self) -> list[str]:
        return sorted(n.rpartition("/")[2] for n in self._graph().nodes)

    def get_fully_qualified_node_names(self) -> list[str]:
        return sorted(self._graph().nodes)

    def get_node_names_and_namespaces(self) -> list[tuple[str, str]]:
        return sorted(
            (n.rpartition("/")[2], n.rpartition("/")[0] or "/") for n in self._graph().nodes
        )

    def count_publishers(self, topic_name: str) -> int:
        topic = self.resolve(topic_name)
        return sum(1 for n in self._graph().nodes.values() for t, _ in n.publishers if t == topic)

    def count_subscribers(self, topic_name: str) -> int:
        topic = self.resolve(topic_name)
        return sum(
            1 for n in self._graph().nodes.values() for t, _ in n.subscriptions if t == topic
        )

    def count_services(self, service_name: str) -> int:
        return _servers(self._graph(), self.resolve(service_name, "service name"))

    def count_clients(self, service_name: str) -> int:
        service = self.resolve(service_name, "service name")
        return sum(1 for n in self._graph().nodes.values() for s, _ in n.clients if s == service)

    # ------------------------------------------------------------------ parameters

    def declare_parameter(
        self,
        name: str,
        value: Any = None,
        descriptor: Any = None,
        ignore_override: bool = False,
    ) -> Parameter[Any]:
        """Declare parameter ``name`` with ``value`` (or a ``Parameter.Type``: declared of
        that type, not set) and a ``descriptor`` (``rcl_interfaces/msg/ParameterDescriptor``);
        an override (``-p``, a params file, ``parameter_overrides``) wins over ``value``
        unless ``ignore_override``. Raises ``ParameterAlreadyDeclaredException``, and
        ``InvalidParameterValueException`` when a callback or the descriptor refuses it."""
        return self.declare_parameters("", [(name, value, descriptor)], ignore_override)[0]

    def declare_parameters(
        self,
        namespace: str,
        parameters: Iterable[tuple[Any, ...]],
        ignore_override: bool = False,
    ) -> list[Parameter[Any]]:
        """Declare each of ``parameters`` (``(name,)``, ``(name, value)`` or ``(name,
        value, descriptor)``), their names prefixed with ``namespace.``."""
        declared: list[Parameter[Any]] = []
        for item in parameters:
            name = f"{namespace}.{item[0]}" if namespace else item[0]
            value = item[1] if len(item) > 1 else None
            descriptor = item[2] if len(item) > 2 and item[2] is not None else None
            descriptor = _copy(descriptor) if descriptor is not None else ParameterDescriptor()
            descriptor.name = name
            with self._lock:
                if name in self._parameters:
                    raise ParameterAlreadyDeclaredException(name)
            kind: Parameter.Type | None = None
            if isinstance(value, Parameter.Type):
                kind, value = value, None
            if not ignore_override and name in self._overrides:
                value = self._overrides[name].value
            try:
                parameter = Parameter(name, value=value)
            except TypeError as exc:
                raise InvalidParameterValueException(name, value, str(exc)) from None
            if kind is not None and parameter.type_ == Parameter.Type.NOT_SET:
                descriptor.type = int(kind)
            elif kind is not None and parameter.type_ != kind:
                raise InvalidParameterTypeException(name, kind.name, value)
            elif not descriptor.dynamic_typing:
                descriptor.type = int(parameter.type_)
            result = self._apply([parameter], {name: descriptor}, declare=True)
            if not result.successful:
                raise InvalidParameterValueException(name, value, result.reason)
            declared.append(parameter)
        return declared

    def undeclare_parameter(self, name: str) -> None:
        with self._lock:
            if name not in self._parameters:
                raise ParameterNotDeclaredException(name)
            if self._descriptors[name].read_only:
                raise ParameterImmutableException(name)
            del self._parameters[name]
            del self._descriptors[name]

    def has_parameter(self, name: str) -> bool:
        with self._lock:
            return name in self._parameters

    def get_parameter(self, name: str) -> Parameter[Any]:
        """The declared parameter ``name`` (undeclared: ``ParameterNotDeclaredException``,
        or a not-set one with ``allow_undeclared_parameters``)."""
        with self._lock:
            found = self._parameters.get(name)
        if found is not None:
            return found
        if self._allow_undeclared:
            return Parameter(name, Parameter.Type.NOT_SET, None)
        raise ParameterNotDeclaredException(name)

    def get_parameter_or(
        self, name: str, alternative_value: Parameter[Any] | None = None
    ) -> Parameter[Any]:
        with self._lock:
            found = self._parameters.get(name)
        if found is not None:
            return found
        return alternative_value or Parameter(name, Parameter.Type.NOT_SET, None)

    def get_parameters(self, names: list[str]) -> list[Parameter[Any]]:
        return [self.get_parameter(n) for n in names]

    def get_parameters_by_prefix(self, prefix: str) -> dict[str, Parameter[Any]]:
        start = f"{prefix}." if prefix else ""
        with self._lock:
            return {n[len(start) :]: p for n, p in self._parameters.items() if n.startswith(start)}

    def get_parameter_type(self, name: str) -> Parameter.Type:
        return self.get_parameter(name).type_

    def get_parameter_types(self, names: list[str]) -> list[Parameter.Type]:
        with self._lock:
            return [
                self._parameters[n].type_ if n in self._parameters else Parameter.Type.NOT_SET
                for n in names
            ]

    def describe_parameter(self, name: str) -> Any:
        with self._lock:
            found = self._descriptors.get(name)
        if found is None:
            if self._allow_undeclared:
                return ParameterDescriptor(name=name)
            raise ParameterNotDeclaredException(name)
        return _copy(found)

    def describe_parameters(self, names: list[str]) -> list[Any]:
        return [self.describe_parameter(n) for n in names]

    def set_descriptor(self, name: str, descriptor: Any, alternative_value: Any = None) -> Any:
        """Replace the descriptor of ``name``; its value is checked against it
        (``alternative_value`` replaces a value it refuses). The value as set now."""
        current = self.get_parameter(name)
        descriptor = _copy(descriptor)
        descriptor.name = name
        value = alternative_value if alternative_value is not None else current.value
        result = self._apply([Parameter(name, value=value)], {name: descriptor}, declare=True)
        if not result.successful:
            raise InvalidParameterValueException(name, value, result.reason)
        return self.get_parameter(name).get_parameter_value()

    def list_parameters(self, prefixes: list[str], depth: int) -> Any:
        """The parameter names under ``prefixes`` (all, when empty) at most ``depth``
        levels down (0: any), and the prefixes found (rclpy's ``ListParametersResult``)."""
        result = ListParametersResult()
        with self._lock:
            names = sorted(self._parameters)
        for name in names:
            matches = not prefixes or any(name == p or name.startswith(p + ".") for p in prefixes)
            if not matches:
                continue
            levels = name.count(".") + 1
            base = max((p.count(".") + 1 for p in prefixes if name.startswith(p + ".")), default=0)
            if depth and levels - base > depth:
                continue
            result.names.append(name)
            prefix = name.rpartition(".")[0]
            if prefix and prefix not in result.prefixes:
                result.prefixes.append(prefix)
        return result

    def add_pre_set_parameters_callback(
        self, callback: Callable[[list[Parameter[Any]]], list[Parameter[Any]]]
    ) -> None:
        """``callback(parameters) -> parameters``: may change what is about to be set."""
        self._pre_set.insert(0, callback)

    def add_on_set_parameters_callback(
        self, callback: Callable[[list[Parameter[Any]]], Any]
    ) -> Callable[[list[Parameter[Any]]], Any]:
        """``callback(parameters) -> SetParametersResult``: accepts or refuses a set."""
        self._on_set.insert(0, callback)
        return callback

    def add_post_set_parameters_callback(
        self, callback: Callable[[list[Parameter[Any]]], None]
    ) -> None:
        """``callback(parameters)``: told of what was set."""
        self._post_set.insert(0, callback)

    def remove_pre_set_parameters_callback(self, callback: Any) -> None:
        self._pre_set.remove(callback)

    def remove_on_set_parameters_callback(self, callback: Any) -> None:
        self._on_set.remove(callback)

    def remove_post_set_parameters_callback(self, callback: Any) -> None:
        self._post_set.remove(callback)

    def set_parameters(self, parameter_list: list[Parameter[Any]]) -> list[Any]:
        """Set each parameter on its own: a ``SetParametersResult`` each. An undeclared
        one raises ``ParameterNotDeclaredException`` (unless
        ``allow_undeclared_parameters``)."""
        parameter_list = self._pre(parameter_list)
        self._check_declared(parameter_list)
        return [self._apply([p], {}) for p in parameter_list]

    def set_parameters_atomically(self, parameter_list: list[Parameter[Any]]) -> Any:
        """Set all of them, or none: one ``SetParametersResult``."""
        parameter_list = self._pre(parameter_list)
        self._check_declared(parameter_list)
        return self._apply(parameter_list, {})

    def _pre(self, parameters: list[Parameter[Any]]) -> list[Parameter[Any]]:
        for callback in self._pre_set:
            parameters = callback(parameters)
        return parameters

    def _check_declared(self, parameters: list[Parameter[Any]]) -> None:
        if self._allow_undeclared:
            return
        with self._lock:
            missing = [p.name for p in parameters if p.name not in self._parameters]
        if missing:
            raise ParameterNotDeclaredException(missing)

    def _apply(
        self,
        parameters: list[Parameter[Any]],
        descriptors: dict[str, Any],
        *,
        declare: bool = False,
    ) -> Any:
        """Check and set ``parameters`` together (descriptors: the new ones, when
        declaring), running the on-set and post-set callbacks."""
        with self._lock:
            for parameter in parameters:
                descriptor = (
                    descriptors.get(parameter.name)
                    or self._descriptors.get(parameter.name)
                    or ParameterDescriptor(name=parameter.name, dynamic_typing=True)
                )
                reason = _refusal(parameter, descriptor, declaring=declare)
                if reason:
                    return SetParametersResult(successful=False, reason=reason)
            for callback in self._on_set:
                result = callback(parameters)
                if not getattr(result, "successful", False):
                    return result
            for parameter in parameters:
                self._parameters[parameter.name] = parameter
                if parameter.name in descriptors:
                    self._descriptors[parameter.name] = descriptors[parameter.name]
                elif parameter.name not in self._descriptors:
                    self._descriptors[parameter.name] = ParameterDescriptor(
                        name=parameter.name, type=int(parameter.type_)
                    )
        for post in self._post_set:
            post(parameters)
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ parameter services

    def _start_parameter_services(self) -> None:
        prefix = self.get_fully_qualified_name()
        for name, kind, handler in (
            ("describe_parameters", DescribeParameters, self._srv_describe),
            ("get_parameters", GetParameters, self._srv_get),
            ("get_parameter_types", GetParameterTypes, self._srv_types),
            ("list_parameters", ListParameters, self._srv_list),
            ("set_parameters", SetParameters, self._srv_set),
            ("set_parameters_atomically", SetParametersAtomically, self._srv_set_atomically),
        ):
            self.create_service(kind, f"{prefix}/{name}", handler)

    def _srv_describe(self, request: Any, response: Any) -> Any:
        with self._lock:
            response.descriptors = [
                _copy(self._descriptors[n])
                if n in self._descriptors
                else ParameterDescriptor(name=n)
                for n in request.names
            ]
        return response

    def _srv_get(self, request: Any, response: Any) -> Any:
        with self._lock:
            response.values = [
                (
                    self._parameters[n]
                    if n in self._parameters
                    else Parameter(n, Parameter.Type.NOT_SET, None)
                ).get_parameter_value()
                for n in request.names
            ]
        return response

    def _srv_types(self, request: Any, response: Any) -> Any:
        response.types = [int(t) for t in self.get_parameter_types(request.names)]
        return response

    def _srv_list(self, request: Any, response: Any) -> Any:
        response.result = self.list_parameters(list(request.prefixes), request.depth)
        return response

    def _srv_set(self, request: Any, response: Any) -> Any:
        parameters = [Parameter.from_parameter_msg(p) for p in request.parameters]
        results = []
        for parameter in self._pre(parameters):
            if not self._allow_undeclared and not self.has_parameter(parameter.name):
                results.append(
                    SetParametersResult(
                        successful=False, reason=f"parameter {parameter.name!r} is not declared"
                    )
                )
                continue
            if parameter.type_ == Parameter.Type.NOT_SET:  # a parameter deleted (undeclared)
                results.append(self._delete(parameter.name))
                continue
            results.append(self._apply([parameter], {}))
        response.results = results
        return response

    def _delete(self, name: str) -> Any:
        """Undeclare ``name`` for a remote caller (``emailmw param delete``)."""
        try:
            self.undeclare_parameter(name)
        except (ParameterImmutableException, ParameterNotDeclaredException) as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _srv_set_atomically(self, request: Any, response: Any) -> Any:
        parameters = self._pre([Parameter.from_parameter_msg(p) for p in request.parameters])
        missing = [p.name for p in parameters if not self.has_parameter(p.name)]
        if missing and not self._allow_undeclared:
            response.result = SetParametersResult(
                successful=False, reason=f"parameters not declared: {missing}"
            )
        else:
            response.result = self._apply(parameters, {})
        return response


def _copy(message: Any) -> Any:
    """A copy of a message (a descriptor handed out or kept)."""
    return copy.deepcopy(message)


def _refusal(parameter: Parameter[Any], descriptor: Any, *, declaring: bool) -> str:
    """Why ``descriptor`` refuses ``parameter`` ('' when it does not)."""
    name, value = parameter.name, parameter.value
    if descriptor.read_only and not declaring:
        return f"Trying to set a read-only parameter: {name}."
    declared = Parameter.Type(descriptor.type)
    typed = not descriptor.dynamic_typing and declared != Parameter.Type.NOT_SET
    unset = parameter.type_ == Parameter.Type.NOT_SET and declaring
    if typed and parameter.type_ != declared and not unset:
        return (
            f"Wrong parameter type, parameter {name} is of type {declared.name}, "
            f"setting it to {parameter.type_.name} is not allowed."
        )
    if descriptor.integer_range and parameter.type_ == Parameter.Type.INTEGER:
        limits = descriptor.integer_range[0]
        low, high, step = limits.from_value, limits.to_value, limits.step
        if not low <= value <= high or (step and value != high and (value - low) % step):
            return f"Parameter {name} out of range. Min: {low}, Max: {high}, step: {step}"
    if descriptor.floating_point_range and parameter.type_ == Parameter.Type.DOUBLE:
        limits = descriptor.floating_point_range[0]
        low, high, step = limits.from_value, limits.to_value, limits.step
        tolerance = PARAM_REL_TOL * max(abs(low), abs(high), 1.0)
        outside = value < low - tolerance or value > high + tolerance
        off_step = step and abs(round((value - low) / step) * step + low - value) > tolerance
        if outside or (off_step and abs(value - high) > tolerance):
            return f"Parameter {name} out of range. Min: {low}, Max: {high}, step: {step}"
    return ""


def create_node(node_name: str, **kwargs: Any) -> Node:
    """A :class:`Node` (rclpy's ``rclpy.create_node``; the keyword arguments are
    ``Node``'s)."""
    return Node(node_name, **kwargs)
