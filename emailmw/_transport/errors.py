"""The error boundary of every backend: small context managers (httpcore's
``map_exceptions`` idea) that turn what aiosmtplib, imapclient and pycurl raise into
emailmw's :class:`~emailmw.TransportError` tree, each naming the server, with
``raise ... from exc``. Nothing outside this module translates a backend's exception.

Each manager imports its backend when it is entered, so using one transport never imports
another's library.
"""

from __future__ import annotations

import contextlib
import functools
import re
import ssl
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from .._core.errors import (
    AuthenticationError,
    ConnectError,
    ConnectionLimitError,
    ReceiveError,
    SendError,
    TLSError,
    TransportError,
)
from .replies import recipient_may_retry, reply_kind

__all__ = [
    "curl_errors",
    "connection_limit",
    "imap_errors",
    "is_throttle",
    "is_tls_failure",
    "recipients_refused",
    "refusals_said",
    "smtp_login_errors",
    "smtp_send_errors",
]


def is_tls_failure(exc: BaseException | None) -> bool:
    """Whether ``exc`` or anything in its chain is an :class:`ssl.SSLError`."""
    while exc is not None:
        if isinstance(exc, ssl.SSLError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# ----------------------------------------------------------------------------- IMAP

#: how servers say an account has too many connections: Dovecot ("Maximum number of
#: connections from user+IP exceeded"), Gmail ("Too many simultaneous connections"),
#: Courier ("Maximum connection limit reached"), the LIMIT response code (RFC 5530)
_CONNECTION_LIMIT: Final = re.compile(
    r"maximum number of connections|too many simultaneous connections|"
    r"maximum connection limit|\[LIMIT\]|too many connections",
    re.I,
)


def connection_limit(text: str) -> bool:
    """Whether a server's refusal says the account has as many connections as allowed."""
    return bool(_CONNECTION_LIMIT.search(text))


def _limit_error(username: str, server: str) -> ConnectionLimitError:
    return ConnectionLimitError(
        f"the server refuses another connection for {username}: the account has as many "
        "open as it allows (Dovecot's mail_max_userip_connections, 10 by default): close "
        "other clients of the account, or have the limit raised",
        server=server,
    )


@contextlib.contextmanager
def imap_errors(server: str, doing: str, *, username: str, connected: bool) -> Iterator[None]:
    """imapclient's and the socket's errors: a refused login is an
    :class:`AuthenticationError`, a TLS failure a :class:`TLSError`, a socket error before
    any connection a :class:`ConnectError`, anything else a :class:`ReceiveError` saying
    what was being ``doing``."""
    import imapclient.exceptions

    try:
        yield
    except (imapclient.exceptions.IMAPClientError, OSError) as exc:
        error: TransportError
        if connection_limit(str(exc)):
            error = _limit_error(username, server)
        elif isinstance(exc, imapclient.exceptions.LoginError):
            error = AuthenticationError(f"login as {username} refused", server=server)
        elif is_tls_failure(exc):
            error = TLSError(f"TLS handshake failed: {exc}", server=server)
        elif isinstance(exc, OSError) and not connected:
            error = ConnectError(f"cannot connect: {exc}", server=server)
        else:
            error = ReceiveError(f"{doing} failed: {exc}", server=server)
        raise error from exc


# ----------------------------------------------------------------------------- SMTP


@contextlib.contextmanager
def smtp_login_errors(server: str, username: str) -> Iterator[None]:
    """Connecting and logging in with aiosmtplib: a refused login is an
    :class:`AuthenticationError` (a 4xx refusal, such as an authentication service
    restarting, a temporary :class:`SendError`), a TLS failure a :class:`TLSError`, any
    other failure a :class:`ConnectError`."""
    import aiosmtplib

    try:
        yield
    except aiosmtplib.SMTPAuthenticationError as exc:
        if 400 <= exc.code < 500:
            raise _refused(exc, "login failed for now", server) from exc
        raise AuthenticationError(
            f"login as {username} refused ({exc.code})", server=server
        ) from exc
    except (aiosmtplib.SMTPException, OSError) as exc:
        if is_tls_failure(exc):
            raise TLSError(f"TLS handshake failed: {exc}", server=server) from exc
        raise ConnectError(f"cannot connect: {exc}", server=server) from exc


@contextlib.contextmanager
def smtp_send_errors(server: str, what: str, *, broken: Callable[[], None]) -> Iterator[None]:
    """One aiosmtplib transaction (``what``: the email): every recipient refused is a
    :class:`SendError`, temporary when every refusal was 4xx; any other refusal a
    :class:`SendError` (temporary for 4xx), a lost connection a :class:`ConnectError`.
    ``broken()`` is called first for those two: the connection is not to be reused."""
    import aiosmtplib

    try:
        yield
    except aiosmtplib.SMTPRecipientsRefused as exc:
        raise recipients_refused(
            what,
            {r.recipient: (r.code, str(r.message)) for r in exc.recipients},
            server,
            accepted_others=False,
        ) from exc
    except aiosmtplib.SMTPResponseException as exc:  # sender refused, data refused, ...
        broken()
        raise _refused(exc, f"{what} refused", server) from exc
    except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
        broken()
        raise ConnectError(f"sending {what} failed: {exc}", server=server) from exc


def _refused(exc: object, what: str, server: str) -> SendError:
    code = int(getattr(exc, "code", 0))
    text = str(getattr(exc, "message", exc))
    kind = reply_kind(code, text)
    return SendError(
        f"{what}: {exc}",
        server=server,
        temporary=400 <= code < 500 or (kind == "recipient" and recipient_may_retry(code, text)),
        throttled=kind == "throttle",
    )


def refusals_said(refused: Mapping[str, tuple[int, str]]) -> str:
    """Refused recipients in the server's words: ``a@x (552 5.2.2 Mailbox full), ...``."""
    return ", ".join(f"{r} ({code} {text.strip()})" for r, (code, text) in refused.items())


def recipients_refused(
    what: str, refused: Mapping[str, tuple[int, str]], server: str, *, accepted_others: bool
) -> SendError:
    """The :class:`SendError` of a transaction whose server refused ``refused`` (each
    recipient with its answer), in its words: temporary when every one of them may take it
    later, throttled when an answer says the sender sends too much (read by its codes,
    :mod:`.replies`)."""
    said = refusals_said(refused)
    others = " (accepted for the others)" if accepted_others else ""
    return SendError(
        f"{what}: recipients refused: {said}{others}",
        server=server,
        temporary=all(recipient_may_retry(*answer) for answer in refused.values()),
        throttled=any(reply_kind(*answer) == "throttle" for answer in refused.values()),
        recipients=refused,
    )


def is_throttle(code: int, text: str) -> bool:
    """Whether an SMTP answer says the account sends too much (a rate or quota, to wait
    out), read by its codes first (:func:`.replies.reply_kind`)."""
    return reply_kind(code, text) == "throttle"


# ----------------------------------------------------------------------------- curl


@functools.cache
def _curl_codes() -> tuple[frozenset[int], frozenset[int], frozenset[int]]:
    """libcurl's error codes for (no connection, a TLS failure, a refused login)."""
    import pycurl

    connect = frozenset(
        {
            pycurl.E_COULDNT_RESOLVE_HOST,
            pycurl.E_COULDNT_CONNECT,
            pycurl.E_OPERATION_TIMEDOUT,
            pycurl.E_COULDNT_RESOLVE_PROXY,
        }
    )
    tls = frozenset(
        {
            pycurl.E_SSL_CONNECT_ERROR,
            pycurl.E_PEER_FAILED_VERIFICATION,
            pycurl.E_SSL_CACERT_BADFILE,
            pycurl.E_USE_SSL_FAILED,
            pycurl.E_SSL_CERTPROBLEM,
            pycurl.E_SSL_CIPHER,
            pycurl.E_SSL_ENGINE_NOTFOUND,
            pycurl.E_SSL_ISSUER_ERROR,
            pycurl.E_SSL_PINNEDPUBKEYNOTMATCH,
            pycurl.E_SSL_INVALIDCERTSTATUS,
            pycurl.E_SSL_CRL_BADFILE,
        }
    )
    return connect, tls, frozenset({pycurl.E_LOGIN_DENIED})


@contextlib.contextmanager
def curl_errors(
    server: str,
    doing: str,
    failure: type[TransportError],
    answer: Callable[[], int],
    said: Callable[[], str] = lambda: "",
    username: str | None = None,
) -> Iterator[None]:
    """One libcurl transfer: a refused login (not a 4xx answer) is an
    :class:`AuthenticationError`, a TLS failure a :class:`TLSError`, no connection a
    :class:`ConnectError`, anything else ``failure`` (:class:`SendError`, permanent only when
    the server's last ``answer()`` was a 5xx refusal: a connection lost after a 2xx or 3xx,
    such as 354 while the message was uploading, is temporary, the server having accepted
    nothing; or :class:`ReceiveError`) saying what was being ``doing``."""
    import pycurl

    try:
        yield
    except pycurl.error as exc:
        connect, tls, auth = _curl_codes()
        code = exc.args[0] if exc.args else -1
        detail = exc.args[1] if len(exc.args) > 1 else str(exc)
        last = answer()
        error: TransportError
        if code in auth and connection_limit(said()):
            error = _limit_error(username or "the account", server)
        elif code in auth and not (400 <= last < 500):
            error = AuthenticationError(f"login refused: {detail}", server=server)
        elif code in tls:
            error = TLSError(f"TLS failed: {detail}", server=server)
        elif code in connect:
            error = ConnectError(f"cannot connect: {detail}", server=server)
        elif failure is SendError:
            error = SendError(
                f"{doing} failed: {detail} (curl error {code})",
                server=server,
                temporary=not 500 <= last < 600,
                throttled=is_throttle(last, f"{detail} {said()}"),
            )
        else:
            error = failure(f"{doing} failed: {detail} (curl error {code})", server=server)
        raise error from exc
