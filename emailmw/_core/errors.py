"""The single exception tree of emailmw.

Every error emailmw raises on purpose derives from :class:`EmailMWError`. Errors that are
also a standard error category (a bad argument, a timeout) derive from the standard class
too, so ``except ValueError`` and ``except TimeoutError`` keep working.

Backend exceptions (pycurl, imaplib/imapclient, aiosmtplib, OSError, ssl) are translated at
the transport boundary with ``raise ... from exc``: the original is kept as ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "ArgumentTypeError",
    "AuthenticationError",
    "ClosedError",
    "ConfigError",
    "ConnectError",
    "ConnectionLimitError",
    "ContextAlreadyInitializedError",
    "ContextError",
    "ContextNotInitializedError",
    "ForeignEmailError",
    "EmailMWError",
    "RemoteError",
    "RoutingError",
    "GuardConditionAlreadyInUseError",
    "InvalidCallbackError",
    "InvalidArgumentError",
    "InvalidHeaderError",
    "InterfaceError",
    "InvalidNameError",
    "MalformedEmailError",
    "MessageTooLargeError",
    "NotFoundError",
    "PermissionDeniedError",
    "ReceiveError",
    "SendError",
    "SecurityError",
    "ServiceTimeoutError",
    "ShutdownException",
    "StateError",
    "TLSError",
    "TimeoutException",
    "TransportError",
    "TypeMismatchError",
    "UnknownRequestError",
    "UndecryptableError",
    "ParameterException",
    "ParameterNotDeclaredException",
    "ParameterAlreadyDeclaredException",
    "InvalidParameterException",
    "InvalidParameterTypeException",
    "InvalidParameterValueException",
    "ParameterImmutableException",
    "ParameterUninitializedException",
    "ROSInterruptException",
    "ExternalShutdownException",
]


class EmailMWError(Exception):
    """Base class of every error raised by emailmw."""


class ConfigError(EmailMWError, ValueError):
    """The configuration is invalid.

    The message names the file (or ``<dict>``), the key and what was expected.
    """

    def __init__(self, message: str, *, source: str = "<dict>", key: str | None = None) -> None:
        self.message = message
        self.source = source
        self.key = key
        where = source if key is None else f"{source}: key '{key}'"
        super().__init__(f"{where}: {message}")


def yaml_error(exc: Exception, source: str) -> ConfigError:
    """``exc`` (a ``yaml.YAMLError``) as one line, ``source:line:col: what is wrong``
    (PyYAML's own message spans several lines and quotes the text)."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return ConfigError(f"{problem} ({context})" if context else problem, source=where)


class InterfaceError(EmailMWError, ValueError):
    """An interface definition (``.msg``, ``.srv``, ``.action``) that cannot be read: the
    message names the file, the line and what is wrong."""


class InvalidNameError(EmailMWError, ValueError):
    """A topic or service name is empty or contains CR, LF or NUL."""


class InvalidCallbackError(EmailMWError, TypeError):
    """A callback emailmw cannot run: a coroutine function (``async def``)."""


class InvalidHeaderError(EmailMWError, ValueError):
    """A header name or value cannot be put on the wire safely (CR/LF, reserved name, ...)."""


class MessageTooLargeError(EmailMWError, ValueError):
    """A message body is larger than the configured ``max-message-size``."""


class MalformedEmailError(EmailMWError):
    """Bytes that claim to be an email could not be parsed into an :class:`Email`."""


class ForeignEmailError(EmailMWError):
    """A well-formed email that emailmw does not carry (multipart, HTML, a bounce, ...):
    not a malformed one.

    Receivers leave such mail where it is; the pipeline counts it as foreign.
    """


class TypeMismatchError(EmailMWError, TypeError):
    """A typed entity received data of another type, or data that does not fit its type."""


class ContextError(EmailMWError):
    """Base class for context life-cycle errors."""


class ContextAlreadyInitializedError(ContextError):
    """``emailmw.init()`` was called twice without ``emailmw.shutdown()`` in between."""


class ContextNotInitializedError(ContextError):
    """The default context is used before ``emailmw.init()`` (or after ``shutdown()``)."""


class ClosedError(EmailMWError):
    """The object (entity, context, transport) was closed and cannot be used any more."""


class GuardConditionAlreadyInUseError(EmailMWError):
    """A guard condition is already part of another wait set."""


class ServiceTimeoutError(EmailMWError, TimeoutError):
    """A blocking service call got no response within its timeout."""


class UnknownRequestError(EmailMWError, KeyError):
    """``send_response`` names a request this server never handed out (or already answered)."""


class TransportError(EmailMWError):
    """Base class for errors talking to a mail server.

    ``server`` names the server (``smtps://host:port``); it never contains credentials.
    """

    def __init__(self, message: str, *, server: str | None = None) -> None:
        self.server = server
        super().__init__(message if server is None else f"{server}: {message}")


class ConnectError(TransportError):
    """The server could not be reached (refused, unreachable, timed out)."""


class ConnectionLimitError(ConnectError):
    """The server refuses another connection for the account: it has as many open as the
    server allows (Dovecot's ``mail_max_userip_connections``, 10 by default; Gmail's 15).
    Not a wrong password: close other clients of the account, or have the limit raised."""

    #: True when this process itself holds every connection its ``max-connections``
    #: allows: nothing outside it will give one back, so waiting would not help
    held_here: bool = False


class AuthenticationError(TransportError):
    """The server rejected the username or password."""


class TLSError(TransportError):
    """The TLS handshake failed, usually because the certificate is not trusted."""


class SendError(TransportError):
    """The SMTP server refused or failed to accept an email.

    ``temporary`` is True when trying again later may succeed (a 4xx answer, no answer):
    senders retry those themselves; False for a permanent refusal (5xx). ``throttled``: the
    server refused for the sender's rate or quota (``421``, ``4.7.x``, ``x.4.5``,
    ``4.3.2``; temporary too): the outbox holds all sending for a while instead of retrying
    at once. ``recipients``: the recipients the server refused, each with its answer (code,
    text): the transaction's other recipients were accepted; a mailbox full (``x.2.2``)
    concerns its recipient only. Empty when the whole transaction failed.
    """

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        temporary: bool = False,
        throttled: bool = False,
        recipients: Mapping[str, tuple[int, str]] | None = None,
    ):
        self.temporary = temporary or throttled
        self.throttled = throttled
        self.recipients: Mapping[str, tuple[int, str]] = dict(recipients or {})
        super().__init__(message, server=server)


class ReceiveError(TransportError):
    """Fetching email over IMAP failed."""


class SecurityError(EmailMWError):
    """A keystore, key or permissions file is unusable (missing, malformed, readable by
    others), or a security setting cannot be honoured. The message names the file and says
    what to do."""


class PermissionDeniedError(SecurityError, PermissionError):
    """The context's identity has no grant for this (publish, subscribe, call or serve a
    name) in the permissions file."""


class UndecryptableError(SecurityError):
    """An encrypted body is not for this identity (no key of it among the recipients) or
    does not decrypt."""


class RoutingError(EmailMWError, ValueError):
    """A routed message cannot be sent as asked: a malformed address, or no route to its
    hub (``docs/addressing.md``)."""


class RemoteError(EmailMWError):
    """The other side answered with an error (a Stem ``error`` reply)."""


# ----------------------------------------------------------------------------- rclpy's names
# emailmw.exceptions offers these under rclpy.exceptions' names: a ported program's
# ``except ParameterNotDeclaredException`` works as in rclpy.


class ParameterException(EmailMWError):
    """A parameter operation that cannot be done; the message names the parameter(s)."""

    def __init__(self, error_msg: str, parameters: str | list[str]) -> None:
        super().__init__(f"{error_msg}: {parameters}")


class ParameterNotDeclaredException(ParameterException):
    def __init__(self, parameters: str | list[str]) -> None:
        super().__init__("Invalid access to undeclared parameter(s)", parameters)


class ParameterAlreadyDeclaredException(ParameterException):
    def __init__(self, parameters: str | list[str]) -> None:
        super().__init__("Parameter(s) already declared", parameters)


class InvalidParameterException(ParameterException):
    def __init__(self, parameter_name: str) -> None:
        super().__init__("Invalid parameter name", parameter_name)


class InvalidParameterTypeException(ParameterException, TypeError):
    def __init__(self, parameter_name: str, expected_type: str, given: object) -> None:
        super().__init__(
            f"Trying to set parameter to {given!r}, a value of another type than the "
            f"expected {expected_type}",
            parameter_name,
        )


class InvalidParameterValueException(ParameterException, ValueError):
    def __init__(self, parameter_name: str, value: object, reason: str) -> None:
        super().__init__(f"Value {value!r} is invalid: {reason}", parameter_name)


class ParameterImmutableException(ParameterException):
    def __init__(self, parameter_name: str) -> None:
        super().__init__("Attempted to modify read-only parameter", parameter_name)


class ParameterUninitializedException(ParameterException):
    def __init__(self, parameter_name: str) -> None:
        super().__init__("The parameter is not initialized", parameter_name)


class ROSInterruptException(EmailMWError):
    """Raised from a wait (``Rate.sleep``) once the context shut down."""

    def __init__(self) -> None:
        super().__init__("emailmw.shutdown() has been called")


class ExternalShutdownException(EmailMWError):
    """Raised out of ``spin*`` when the context shut down while spinning (rclpy's
    ``rclpy.executors.ExternalShutdownException``)."""


class InvalidArgumentError(EmailMWError, ValueError):
    """An argument out of its range or malformed (a :class:`ValueError` too)."""


class ArgumentTypeError(EmailMWError, TypeError):
    """An argument of the wrong type (a :class:`TypeError` too)."""


class NotFoundError(EmailMWError, KeyError):
    """A name that names nothing known: a QoS preset, an interface (a :class:`KeyError`
    too)."""


class StateError(EmailMWError, RuntimeError):
    """What the object's state does not allow now: a node already in another executor, a
    thread started twice (a :class:`RuntimeError` too)."""


class ShutdownException(EmailMWError):
    """The executor was shut down (rclpy's, kept for code that catches it)."""


class TimeoutException(EmailMWError):
    """No work within the timeout (rclpy's, kept for code that catches it)."""
