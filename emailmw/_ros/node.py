"""The ROS-style layer's :class:`Node` (rclpy's shape, ``emailmw.node``): its name, its
parameters, the entities, timers and rates it creates (``entities``, ``timers``); the
executors that run their callbacks are in ``executor``.

Built on the core entities. Callbacks run in an executor's ``spin*()``, each entity's in
its callback group (``emailmw.callback_groups``; a node's default group is mutually
exclusive). Every node entity is an :class:`Executable`: the executors know nothing else
of it. Service responses complete :class:`~emailmw.task.Future` objects as soon as they
arrive (on the polling thread), so :meth:`Client.call` works from any thread, spun or not.
Callbacks may be ``async def``: the executor drives their coroutines (an ``await`` on a
future suspends the callback, not the executor).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from .._core.config import BatchPolicy
from .._core.errors import (
    EmailMWError,
    InvalidArgumentError,
    InvalidParameterTypeException,
    InvalidParameterValueException,
    ParameterAlreadyDeclaredException,
    ParameterImmutableException,
    ParameterNotDeclaredException,
)
from .._core.futures import Future
from .._core.interfaces import (
    ServiceType,
)
from .._core.log import get_logger
from .._core.names import resolve_name, validate_namespace, validate_node_name
from .._core.qos import QoSProfile
from .._core.ros_args import RosArgs, parse_ros_args
from .._core.ros_logging import (
    RcutilsLogger,
    get_logger_level,
    set_levels_from_args,
    set_logger_level,
)
from .._core.ros_logging import get_logger as get_ros_logger
from .._delivery.context import Context, resolve
from .._delivery.graph import Graph, announcer_of, graph_of
from .._delivery.groups import GroupSettings
from ..rcl_interfaces.msg import (
    ListParametersResult,
    LoggerLevel,
    ParameterDescriptor,
    SetLoggerLevelsResult,
    SetParametersResult,
)
from ..rcl_interfaces.srv import (
    DescribeParameters,
    GetLoggerLevels,
    GetParameters,
    GetParameterTypes,
    ListParameters,
    SetLoggerLevels,
    SetParameters,
    SetParametersAtomically,
)
from ..rosgraph_msgs.msg import Clock as ClockMessage
from .callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from .entities import (
    Client,
    ContentFilterOptions,
    NodeGuardCondition,
    NodePublisher,
    NodeSubscription,
    Service,
    SubscriptionEventCallbacks,
    _servers,
)
from .events import MatchedEvents, QoSPublisherMatchedInfo, QoSSubscriptionMatchedInfo
from .executable import Executable, NodeExecutor, _runnable
from .parameters import Parameter
from .rosout import Rosout
from .time import Clock, ROSClock, Time
from .timers import Rate, Timer, TimerInfo

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
        announce_period: float | None = None,
    ) -> None:
        self.context = resolve(context)
        own = parse_ros_args(cli_args)
        self._args: RosArgs = self.context.ros_args.merged(own) if use_global_arguments else own
        set_levels_from_args(own.log_levels)
        self._name = validate_node_name(self._args.node_name or node_name)
        self._namespace = validate_namespace(self._args.namespace or namespace or "/")
        if announce_period is None:  # (the configuration's announce-period, 30 s)
            announce_period = self.context.options.announce_period
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
        self._clock_subscription: NodeSubscription[Any] | None = None
        # rclpy's default: the node's log lines on /rosout, while someone reads it
        self._rosout = Rosout(self.context, self._logger.name) if enable_rosout else None
        announcer_of(self.context).add(self)
        try:
            self.declare_parameter("use_sim_time", False)
            if automatically_declare_parameters_from_overrides:
                for name, parameter in self._overrides.items():
                    if name not in self._parameters:
                        self.declare_parameter(name, parameter.value)
            if start_parameter_services:
                self._start_parameter_services()
            if enable_logger_service:
                self._start_logger_services()
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
        """The node's ROS clock: the system clock, or, while the ``use_sim_time``
        parameter is true, the time ``/clock`` last said (zero before it said any)."""
        return self._clock

    def _follow_sim_time(self, enabled: bool) -> None:
        """rclpy's time source: with ``use_sim_time`` the node's clock reads what
        ``/clock`` (``rosgraph_msgs/msg/Clock``) says, received as the node is spun."""
        with self._lock:
            if enabled and self._clock_subscription is None:
                self._clock_subscription = self.create_subscription(
                    ClockMessage, "/clock", self._on_clock, QoSProfile(depth=1)
                )
            elif not enabled and self._clock_subscription is not None:
                self.destroy_subscription(self._clock_subscription)
                self._clock_subscription = None
        self._clock._set_ros_time_is_active(enabled)

    def _on_clock(self, message: Any) -> None:
        self._clock.set_ros_time_override(Time.from_msg(message.clock))

    def resolve(self, name: str, what: str = "topic name") -> str:
        """``name`` resolved as this node resolves it, then remapped (``-r``)."""
        expanded = resolve_name(name, self._name, self._namespace, what)
        return self._args.remap(expanded, self._name, self._namespace)

    def resolve_topic_name(self, topic: str, *, only_expand: bool = False) -> str:
        expanded = resolve_name(topic, self._name, self._namespace, "topic name")
        return expanded if only_expand else self._args.remap(expanded, self._name, self._namespace)

    def resolve_service_name(self, service: str, *, only_expand: bool = False) -> str:
        expanded = resolve_name(service, self._name, self._namespace, "service name")
        return expanded if only_expand else self._args.remap(expanded, self._name, self._namespace)

    def executables(self) -> list[Executable]:
        """What an executor runs of this node: its subscriptions, services, clients (a
        response is work), timers, guard conditions and other waitables (actions)."""
        with self._lock:
            return [*self.subscriptions, *self.services, *self.clients, *self.timers,
                    *self.guards, *self.waitables]  # fmt: skip

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
        del qos_overriding_options, publisher_class
        profile = (
            qos_profile if isinstance(qos_profile, QoSProfile) else QoSProfile(depth=qos_profile)
        )
        publisher = NodePublisher(self, msg_type, self.resolve(topic), profile, batch, compress)
        matched = getattr(event_callbacks, "matched", None)
        if matched is not None:
            publisher._events = self._matched(
                lambda: self.count_subscribers(publisher.topic), matched,
                QoSPublisherMatchedInfo, callback_group,
            )  # fmt: skip
        return self._add(self.publishers, publisher)

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
        content_filter_options: ContentFilterOptions | None = None,
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
        quarantined. ``raw``: the callback gets the message as ROS 2 serializes it (CDR
        bytes, ``emailmw.serialization``; needs the bag extra). ``content_filter_options``:
        only the messages its expression holds for reach the callback (rclpy's)."""
        del qos_overriding_options
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
            raw=raw,
            content_filter=content_filter_options,
        )
        if event_callbacks is not None and event_callbacks.matched is not None:
            subscription._events = self._matched(
                lambda: self.count_publishers(subscription.topic), event_callbacks.matched,
                QoSSubscriptionMatchedInfo, callback_group,
            )  # fmt: skip
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
        # the node's clock by default, as rclpy's: simulated time when use_sim_time is on
        timer = Timer(timer_period_sec, callback, None, clock or self._clock, autostart=autostart)
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
        """A :class:`Rate` of ``frequency`` Hz for a loop on ``clock`` (default: this
        node's, as rclpy's: simulated time with ``use_sim_time``); its ``sleep`` raises
        ``ROSInterruptException`` once the context shuts down."""
        return Rate(frequency, self.context, clock if clock is not None else self.get_clock())

    def _remove(self, group: list[Any], entity: Any) -> bool:
        with self._lock:
            if entity not in group:
                return False
            group.remove(entity)
        entity.destroy()
        self._changed()
        return True

    def _matched(
        self,
        count: Callable[[], int],
        callback: Callable[[Any], Any],
        info_type: Any,
        group: CallbackGroup | None,
    ) -> MatchedEvents:
        """A ``matched`` event callback, run in this node's executor (``events.py``)."""
        monitor = graph_of(self.context)
        events = MatchedEvents(
            count, callback, info_type, monitor.add_listener, monitor.remove_listener,
            group or self.default_callback_group,
        )  # fmt: skip
        self.add_waitable(events)
        return events

    def _unmatched(self, entity: Any) -> None:
        events = getattr(entity, "_events", None)
        if events is not None:
            self.remove_waitable(events)
            events.destroy()

    def destroy_publisher(self, publisher: NodePublisher[Any]) -> bool:
        self._unmatched(publisher)
        return self._remove(self.publishers, publisher)

    def destroy_subscription(self, subscription: NodeSubscription[Any]) -> bool:
        self._unmatched(subscription)
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
        if self._rosout is not None:
            self._rosout.close()
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
            sim_time = None
            for parameter in parameters:
                self._parameters[parameter.name] = parameter
                if parameter.name == "use_sim_time":
                    sim_time = bool(parameter.value)
                if parameter.name in descriptors:
                    self._descriptors[parameter.name] = descriptors[parameter.name]
                elif parameter.name not in self._descriptors:
                    self._descriptors[parameter.name] = ParameterDescriptor(
                        name=parameter.name, type=int(parameter.type_)
                    )
        if sim_time is not None:
            self._follow_sim_time(sim_time)
        for post in self._post_set:
            post(parameters)
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ logger services

    def _start_logger_services(self) -> None:
        """rclpy's ``enable_logger_service=True``: ``~/get_logger_levels`` and
        ``~/set_logger_levels`` (``rcl_interfaces``), any logger of the process by name."""
        prefix = self.get_fully_qualified_name()
        self.create_service(GetLoggerLevels, f"{prefix}/get_logger_levels", _srv_get_levels)
        self.create_service(SetLoggerLevels, f"{prefix}/set_logger_levels", _srv_set_levels)

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


def _srv_get_levels(request: Any, response: Any) -> Any:
    """Each named logger's own level (0, unset, for one without), as rclpy answers."""
    response.levels = [LoggerLevel(name=n, level=int(get_logger_level(n))) for n in request.names]
    return response


def _srv_set_levels(request: Any, response: Any) -> Any:
    """Set each named logger's level; a level that is none of rcutils' is refused with
    rclpy's reason."""
    results = []
    for level in request.levels:
        try:
            set_logger_level(level.name, int(level.level))
        except (ValueError, EmailMWError):
            reason = "Failed reason: Invalid logger level."
            results.append(SetLoggerLevelsResult(successful=False, reason=reason))
        else:
            results.append(SetLoggerLevelsResult(successful=True, reason=""))
    response.results = results
    return response
