"""What the account's two servers say, step by step, for ``emailmw doctor``: the facts of
each step (addresses, certificate, greeting, folders, quota, the server's clock) or the one
line saying why it failed, after which the later steps are not tried. No decisions: the
doctor judges the facts (``emailmw/_doctor.py``).

The probe never logs in over a connection whose certificate failed verification (unless
``tls.verify`` is off, as the transports do), and the only change it makes to the account
is the clock probe's: a folder of its own, created, given one tiny email, and deleted.
The certificate is read over a second connection that verifies nothing and sends no
credentials. Errors of the backends are translated here, as everywhere, by ``errors``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import email.utils
import re
import socket
import ssl
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .._core.config import Endpoint, Options
from .._core.errors import EmailMWError
from .auth import imap_login, smtp_login
from .common import folder_roles, ssl_context
from .connections import take_slot
from .errors import imap_errors, smtp_login_errors
from .imap import list_folders

__all__ = ["Certificate", "ServerProbe", "probe_imap", "probe_smtp"]


@dataclass(frozen=True)
class Certificate:
    """The server's certificate as presented (not necessarily valid)."""

    subject: str
    issuer: str
    not_before: dt.datetime
    not_after: dt.datetime
    names: tuple[str, ...]


@dataclass(frozen=True)
class ServerProbe:
    """The facts of one server. A step that failed has its ``*_error``; the steps after it
    were not tried (their facts are empty)."""

    protocol: str  # "smtp" | "imap"
    endpoint: Endpoint
    addresses: tuple[str, ...] = ()
    resolve_error: str | None = None
    connect_error: str | None = None
    #: "implicit", "starttls" or "none" (tls.starttls false on a plain URL)
    tls: str = "none"
    certificate: Certificate | None = None
    certificate_error: str | None = None
    #: why verifying the chain or the host name failed (OpenSSL's reason); None: it did not
    verify_error: str | None = None
    verified: bool = False
    login_error: str | None = None
    logged_in: bool = False
    greeting: str = ""
    folders: tuple[str, ...] = ()
    #: the IMAP server's capabilities (upper case), once logged in
    capabilities: frozenset[str] = frozenset()
    #: SPECIAL-USE role (lower case, ``\\trash``) -> the folder the server gives it
    roles: Mapping[str, str] = field(default_factory=dict)
    folder_error: str | None = None
    #: (used, limit) of the STORAGE quota in KiB; None when the server reports none
    quota: tuple[int, int] | None = None
    #: the server's clock and the local clock at the same moment (seconds since the epoch)
    server_time: float | None = None
    local_time: float | None = None
    time_source: str = ""
    time_error: str | None = None


def _certificate(der: bytes | None) -> Certificate | None:
    if not der:
        return None
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = tuple(
            [str(n) for n in alt.get_values_for_type(x509.DNSName)]
            + [str(n) for n in alt.get_values_for_type(x509.IPAddress)]
        )
    except x509.ExtensionNotFound:
        names = ()
    return Certificate(
        cert.subject.rfc4514_string(),
        cert.issuer.rfc4514_string(),
        cert.not_valid_before_utc,
        cert.not_valid_after_utc,
        names,
    )


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _verify_error(exc: BaseException) -> str | None:
    """OpenSSL's reason when ``exc`` (or its chain) is a failed certificate verification."""
    while exc is not None:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return str(exc.verify_message or exc.reason or exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def _reach(probe: ServerProbe, timeout: float) -> ServerProbe:
    """Resolve and connect (TCP only)."""
    host, port = probe.endpoint.host, probe.endpoint.port
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return replace(probe, resolve_error=f"cannot resolve {host}: {exc}")
    addresses = tuple(dict.fromkeys(str(info[4][0]) for info in found))
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        return replace(
            probe, addresses=addresses, connect_error=f"cannot connect to {host}:{port}: {exc}"
        )
    return replace(probe, addresses=addresses)


def _tls_mode(endpoint: Endpoint, options: Options) -> str:
    if endpoint.scheme in ("smtps", "imaps"):
        return "implicit"
    return "starttls" if options.tls.starttls else "none"


_DATE = re.compile(
    r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), )?"
    r"\d{1,2} \w{3} \d{4} \d{2}:\d{2}:\d{2} (?:[+-]\d{4}|GMT|UTC?)"
)


def _greeting_time(greeting: str) -> float | None:
    """The date an SMTP greeting carries (many servers say it), as seconds since the epoch."""
    match = _DATE.search(greeting)
    if match is None:
        return None
    try:
        return email.utils.parsedate_to_datetime(match.group(0)).timestamp()
    except (TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------- SMTP


def probe_smtp(options: Options) -> ServerProbe:
    """The facts of the account's SMTP server (resolving, TCP, TLS, greeting, login)."""
    assert options.user is not None
    probe = _reach(ServerProbe("smtp", options.user.smtp), options.timeout)
    if probe.resolve_error or probe.connect_error:
        return probe
    return asyncio.run(_smtp(probe, options))


async def _smtp(probe: ServerProbe, options: Options) -> ServerProbe:
    import aiosmtplib

    assert options.user is not None
    endpoint, user = probe.endpoint, options.user
    mode = _tls_mode(endpoint, options)
    probe = replace(probe, tls=mode)

    def client(context: ssl.SSLContext) -> aiosmtplib.SMTP:
        return aiosmtplib.SMTP(
            hostname=endpoint.host,
            port=endpoint.port,
            use_tls=mode == "implicit",
            start_tls=mode == "starttls",
            tls_context=context,
            validate_certs=context.verify_mode != ssl.CERT_NONE,
            timeout=options.timeout,
        )

    if mode != "none":  # the certificate, over a connection that sends nothing
        smtp = client(_unverified())
        try:
            await smtp.connect()
            ssl_object = smtp.transport.get_extra_info("ssl_object") if smtp.transport else None
            der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
            probe = replace(probe, certificate=_certificate(der))
        except (aiosmtplib.SMTPException, OSError, ValueError) as exc:
            probe = replace(probe, certificate_error=f"TLS handshake failed: {exc}")
            return probe
        finally:
            smtp.close()
    smtp = client(ssl_context(options.tls, str(endpoint)))
    try:
        with smtp_login_errors(str(endpoint), user.username):
            greeting = await smtp.connect()
            probe = replace(probe, verified=mode != "none" and options.tls.verify,
                            greeting=greeting.message)  # fmt: skip
            await smtp_login(smtp, user)
        probe = replace(probe, logged_in=True)
    except EmailMWError as exc:
        reason = _verify_error(exc)
        if reason is not None:
            return replace(probe, verify_error=reason)
        return replace(probe, login_error=str(exc))
    finally:
        smtp.close()
    moment = _greeting_time(probe.greeting)
    if moment is not None:
        probe = replace(probe, server_time=moment, local_time=time.time(),
                        time_source="the SMTP greeting")  # fmt: skip
    return probe


# ----------------------------------------------------------------------------- IMAP


def probe_imap(options: Options, *, clock: bool = True) -> ServerProbe:
    """The facts of the account's IMAP server (resolving, TCP, TLS, login, its folders and
    quota; with ``clock``, the server's clock by the INTERNALDATE of a probe email)."""
    assert options.user is not None
    probe = _reach(ServerProbe("imap", options.user.imap), options.timeout)
    if probe.resolve_error or probe.connect_error:
        return probe
    import imapclient

    endpoint, user = probe.endpoint, options.user
    mode = _tls_mode(endpoint, options)
    probe = replace(probe, tls=mode)

    def connect(context: ssl.SSLContext) -> imapclient.IMAPClient:
        client = imapclient.IMAPClient(
            endpoint.host,
            port=endpoint.port,
            ssl=mode == "implicit",
            ssl_context=context if mode == "implicit" else None,
            timeout=options.timeout,
        )
        if mode == "starttls":
            try:
                client.starttls(context)
            except BaseException:
                with contextlib.suppress(Exception):
                    client.shutdown()
                raise
        return client

    server = str(endpoint)
    if mode != "none":
        try:
            with imap_errors(server, "reading the certificate", username=user.username,
                             connected=False):  # fmt: skip
                reader = connect(_unverified())
                try:
                    der = reader.socket().getpeercert(binary_form=True)
                finally:
                    with contextlib.suppress(Exception):
                        reader.logout()
            probe = replace(probe, certificate=_certificate(der))
        except EmailMWError as exc:
            return replace(probe, certificate_error=str(exc))
    try:  # (a session the server counts: one of the account's max-connections)
        slot = take_slot(user.username, endpoint.url, options.limits.max_connections,
                         wait=options.timeout)  # fmt: skip
    except EmailMWError as exc:
        return replace(probe, login_error=str(exc))
    try:
        with imap_errors(server, "logging in", username=user.username, connected=False):
            client = connect(ssl_context(options.tls, server))
    except EmailMWError as exc:
        slot.release()
        reason = _verify_error(exc)
        return (
            replace(probe, verify_error=reason) if reason else replace(probe, login_error=str(exc))
        )
    probe = replace(probe, verified=mode != "none" and options.tls.verify)
    try:
        try:
            with imap_errors(server, "logging in", username=user.username, connected=True):
                imap_login(client, user)
        except EmailMWError as exc:
            return replace(probe, login_error=str(exc))
        probe = replace(probe, logged_in=True)
        return _account(probe, client, options, clock=clock)
    finally:
        with contextlib.suppress(Exception):
            client.logout()
        slot.release()


def _account(probe: ServerProbe, client: Any, options: Options, *, clock: bool) -> ServerProbe:
    assert options.user is not None
    server, username = str(probe.endpoint), options.user.username
    try:
        with imap_errors(server, "listing folders", username=username, connected=True):
            listed = list_folders(client)
            folders = tuple(name for _, name in listed)
            capabilities = set(client.capabilities())
            quota = None
            if b"QUOTA" in capabilities:
                _, quotas = client.get_quota_root(options.folder)
                for item in quotas:
                    if str(item.resource).upper() == "STORAGE":
                        quota = (int(item.usage), int(item.limit))
    except EmailMWError as exc:
        return replace(probe, folder_error=str(exc))
    greeting = bytes(getattr(client, "welcome", b"") or b"").decode("utf-8", "replace")
    probe = replace(
        probe, folders=folders, quota=quota, roles=folder_roles(listed),
        capabilities=frozenset(c.decode().upper() for c in capabilities), greeting=greeting,
    )  # fmt: skip
    if clock and probe.server_time is None:
        probe = _clock(probe, client, server, username)
    return probe


def _clock(probe: ServerProbe, client: Any, server: str, username: str) -> ServerProbe:
    """The server's clock: the INTERNALDATE it gives a probe email appended to a folder of
    the probe's own (deleted afterwards), against the local clock half-way through."""
    folder = f"emailmw-doctor-{uuid.uuid4().hex[:8]}"
    raw = (
        b"From: emailmw doctor <doctor@emailmw.invalid>\r\nSubject: emailmw doctor clock "
        b"probe\r\n\r\nThis folder is emailmw doctor's; it deletes it at once.\r\n"
    )
    try:
        with imap_errors(server, "the clock probe", username=username, connected=True):
            client.create_folder(folder)
            try:
                before = time.time()
                client.append(folder, raw, flags=(b"\\Seen",))
                after = time.time()
                client.select_folder(folder, readonly=True)
                found = client.fetch(client.search("ALL"), ["INTERNALDATE"])
                client.unselect_folder()
            finally:
                with contextlib.suppress(Exception):
                    client.delete_folder(folder)
    except EmailMWError as exc:
        return replace(probe, time_error=str(exc))
    stamps = [item.get(b"INTERNALDATE") for item in found.values()]
    if not stamps or not isinstance(stamps[0], dt.datetime):
        return replace(probe, time_error="the server gave the probe email no INTERNALDATE")
    moment = stamps[0]
    if moment.tzinfo is None:  # imapclient gives local time unless told otherwise
        moment = moment.astimezone()
    return replace(
        probe,
        server_time=moment.timestamp(),
        local_time=(before + after) / 2,
        time_source="the INTERNALDATE of a probe email",
    )
