"""emailmw: ROS-style publish/subscribe and services through ordinary email.

The public API lives here; everything in ``emailmw._*`` is private. Layers, bottom up:
transports (``EmailSender``/``EmailReceiver``), the polling manager, the subscription and
service handlers, the :class:`Context`, the entities, and wait sets on top.
"""

from ._config import Endpoint, Options, UserInfo
from ._context import Context, get_default_context, init, ok, open_transport, shutdown
from ._entities import Publisher, ServiceClient, ServiceServer, Subscription
from ._exceptions import (
    AuthenticationError,
    ClosedError,
    ConfigError,
    ConnectError,
    ContextAlreadyInitializedError,
    ContextError,
    ContextNotInitializedError,
    EmailMWError,
    GuardConditionAlreadyInUseError,
    InvalidCallbackError,
    InvalidHeaderError,
    InvalidNameError,
    MalformedEmailError,
    MessageTooLargeError,
    ReceiveError,
    SendError,
    ServiceTimeoutError,
    TLSError,
    TransportError,
    UnknownRequestError,
)
from ._executor import (
    Executor,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
    spin,
    spin_once,
    spin_until_future_complete,
)
from ._interfaces import (
    ServiceType,
    TypeMismatchError,
    deserialize,
    example_interfaces,
    get_interface,
    interface_names,
    message,
    serialize,
    service,
    std_msgs,
)
from ._interfaces import builtin_interfaces as builtin_interfaces
from ._node import (
    Client,
    Future,
    Node,
    NodeGuardCondition,
    NodePublisher,
    NodeSubscription,
    Service,
    SubscriptionEventCallbacks,
    Timer,
)
from ._protocol import Recipients
from ._qos import DeadlineMissed, DurabilityPolicy, HistoryPolicy, MessageLost, QoSProfile
from ._transport.base import EmailReceiver, EmailSender, IncomingEmail
from ._transport.intraprocess import IntraprocessReceiver, IntraprocessSender, intraprocess_pair
from ._types import Email, Gid, Headers, MessageInfo, RequestId, ServiceInfo, ServiceRequest
from ._waitable import GuardCondition
from ._waitset import (
    WaitResult,
    WaitSet,
    wait_for_message,
    wait_for_message_with_info,
    wait_for_request,
    wait_for_request_with_info,
    wait_for_response,
    wait_for_response_with_info,
)
from ._wire import ForeignEmailError
from ._wire import build as build_email
from ._wire import parse as parse_email

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Executor",
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
    "IntraprocessReceiver",
    "IntraprocessSender",
    "InvalidCallbackError",
    "InvalidHeaderError",
    "InvalidNameError",
    "MalformedEmailError",
    "MessageInfo",
    "MessageTooLargeError",
    "Options",
    "Publisher",
    "ReceiveError",
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
    "UnknownRequestError",
    "UserInfo",
    "WaitResult",
    "WaitSet",
    "__version__",
    "build_email",
    "get_default_context",
    "init",
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
