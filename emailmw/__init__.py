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
from ._protocol import Recipients
from ._transport.base import EmailReceiver, EmailSender
from ._transport.intraprocess import IntraprocessReceiver, IntraprocessSender, intraprocess_pair
from ._types import Email, Gid, Headers, MessageInfo, RequestId, ServiceInfo, ServiceRequest
from ._waitset import (
    GuardCondition,
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
    "IntraprocessReceiver",
    "IntraprocessSender",
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
