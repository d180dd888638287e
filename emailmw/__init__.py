"""emailmw: ROS-style publish/subscribe and services through ordinary email.

The public API lives here; everything in ``emailmw._*`` is private. Layers, bottom up:
transports (``EmailSender``/``EmailReceiver``), the polling manager, the subscription and
service handlers, the :class:`Context`, the entities, and wait sets on top.
"""

from ._core.config import NO_BATCH, BatchPolicy, Endpoint, Options, UserInfo
from ._core.errors import (
    AuthenticationError,
    ClosedError,
    ConfigError,
    ConnectError,
    ConnectionLimitError,
    ContextAlreadyInitializedError,
    ContextError,
    ContextNotInitializedError,
    EmailMWError,
    ForeignEmailError,
    GuardConditionAlreadyInUseError,
    InterfaceError,
    InvalidCallbackError,
    InvalidHeaderError,
    InvalidNameError,
    MalformedEmailError,
    MessageTooLargeError,
    PermissionDeniedError,
    ReceiveError,
    RemoteError,
    RoutingError,
    SecurityError,
    SendError,
    ServiceTimeoutError,
    TLSError,
    TransportError,
    TypeMismatchError,
    UndecryptableError,
    UnknownRequestError,
)
from ._core.futures import Future
from ._core.interfaces import (
    ActionType,
    ServiceType,
    deserialize,
    get_interface,
    interface_names,
    message,
    serialize,
    service,
)
from ._core.protocol import Recipients
from ._core.qos import DeadlineMissed, DurabilityPolicy, HistoryPolicy, MessageLost, QoSProfile
from ._core.types import (
    Ack,
    Email,
    Gid,
    Headers,
    MessageInfo,
    RequestId,
    ServiceInfo,
    ServiceRequest,
)
from ._core.waitables import GuardCondition
from ._core.wire import build as build_email
from ._core.wire import parse as parse_email
from ._delivery.context import (
    Context,
    IntraprocessNetwork,
    get_default_context,
    get_rmw_implementation_identifier,
    init,
    ok,
    open_transport,
    shutdown,
    try_shutdown,
)
from ._delivery.entities import Publisher, ServiceClient, ServiceServer, Subscription
from ._delivery.waitset import (
    WaitResult,
    WaitSet,
    wait_for_message,
    wait_for_message_with_info,
    wait_for_request,
    wait_for_request_with_info,
    wait_for_response,
    wait_for_response_with_info,
)
from ._faces.gateway import Gateway, load_gateway
from ._ros.executor import (
    Executor,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
    get_global_executor,
    spin,
    spin_once,
    spin_until_future_complete,
)
from ._ros.node import (
    Client,
    Node,
    NodeGuardCondition,
    NodePublisher,
    NodeSubscription,
    Service,
    SubscriptionEventCallbacks,
    Timer,
    create_node,
)
from ._security import Keystore
from ._transport.base import EmailReceiver, EmailSender, IncomingEmail
from ._transport.group import GroupSettings
from ._transport.intraprocess import (
    IntraprocessReceiver,
    IntraprocessSender,
    intraprocess_pair,
)

__version__ = "0.1.0"


from . import (
    callback_groups,
    clock,
    duration,
    exceptions,
    executors,
    logging,
    node,
    parameter,
    qos,
    signals,
    task,
    time,
    utilities,
)
from .parameter import Parameter

#: submodules imported when first named (``emailmw.std_msgs``), not with ``import emailmw``:
#: a program pays only for the message packages and faces it uses
_LAZY: frozenset[str] = frozenset({
    "action", "action_msgs", "builtin_interfaces", "example_interfaces", "floctrl",
    "geometry_msgs", "interfaces", "rcl_interfaces", "rosgraph_msgs", "std_msgs", "stem",
    "unique_identifier_msgs", "ymp",
})  # fmt: skip


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'emailmw' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

__all__ = [
    "Ack",
    "ActionType",
    "Parameter",
    "action",
    "callback_groups",
    "clock",
    "duration",
    "executors",
    "exceptions",
    "interfaces",
    "logging",
    "node",
    "parameter",
    "qos",
    "signals",
    "task",
    "time",
    "utilities",
    "create_node",
    "get_global_executor",
    "get_rmw_implementation_identifier",
    "try_shutdown",
    "action_msgs",
    "geometry_msgs",
    "rcl_interfaces",
    "unique_identifier_msgs",
    "floctrl",
    "stem",
    "ymp",
    "Client",
    "Executor",
    "Gateway",
    "GroupSettings",
    "Keystore",
    "Future",
    "MultiThreadedExecutor",
    "Node",
    "NodeGuardCondition",
    "NodePublisher",
    "NodeSubscription",
    "Service",
    "ServiceType",
    "SingleThreadedExecutor",
    "SubscriptionEventCallbacks",
    "Timer",
    "DeadlineMissed",
    "DurabilityPolicy",
    "HistoryPolicy",
    "MessageLost",
    "QoSProfile",
    "TypeMismatchError",
    "builtin_interfaces",
    "deserialize",
    "example_interfaces",
    "get_interface",
    "interface_names",
    "message",
    "serialize",
    "service",
    "spin",
    "spin_once",
    "spin_until_future_complete",
    "std_msgs",
    "AuthenticationError",
    "ClosedError",
    "ConfigError",
    "ConnectError",
    "ConnectionLimitError",
    "Context",
    "ContextAlreadyInitializedError",
    "ContextError",
    "ContextNotInitializedError",
    "Email",
    "EmailMWError",
    "EmailReceiver",
    "EmailSender",
    "Endpoint",
    "ForeignEmailError",
    "Gid",
    "GuardCondition",
    "GuardConditionAlreadyInUseError",
    "Headers",
    "IncomingEmail",
    "IntraprocessNetwork",
    "IntraprocessReceiver",
    "IntraprocessSender",
    "InterfaceError",
    "InvalidCallbackError",
    "InvalidHeaderError",
    "InvalidNameError",
    "MalformedEmailError",
    "MessageInfo",
    "MessageTooLargeError",
    "PermissionDeniedError",
    "Options",
    "BatchPolicy",
    "NO_BATCH",
    "Publisher",
    "ReceiveError",
    "RemoteError",
    "RoutingError",
    "SecurityError",
    "Recipients",
    "RequestId",
    "SendError",
    "ServiceClient",
    "ServiceInfo",
    "ServiceRequest",
    "ServiceServer",
    "ServiceTimeoutError",
    "Subscription",
    "TLSError",
    "TransportError",
    "UndecryptableError",
    "UnknownRequestError",
    "UserInfo",
    "WaitResult",
    "WaitSet",
    "__version__",
    "build_email",
    "get_default_context",
    "init",
    "load_gateway",
    "intraprocess_pair",
    "ok",
    "open_transport",
    "parse_email",
    "shutdown",
    "wait_for_message",
    "wait_for_message_with_info",
    "wait_for_request",
    "wait_for_request_with_info",
    "wait_for_response",
    "wait_for_response_with_info",
]
