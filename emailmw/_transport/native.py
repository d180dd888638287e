"""The native transport: aiosmtplib to send, imapclient to receive.

Sender: one persistent authenticated SMTP connection owned by a background event loop.
``send()`` validates and serializes the email in the caller's thread (so bad input raises
at once), puts it in a bounded outbox and returns: publishing never waits for the network.
A full outbox blocks the caller (up to the configured timeout, then :class:`SendError`):
back-pressure, never a silent drop. Transient failures reconnect with backoff and retry;
permanent refusals (unknown recipient, message refused) are logged and reported by the next
:meth:`NativeSender.flush`.

Receiver: one persistent IMAP connection with the folder selected (read-only for
``on-receive: keep``). New mail is fetched in one ``UID FETCH n:* (BODY.PEEK[])``. Waiting is
adaptive, because Dovecot delays IDLE notifications by a fixed 500 ms while delivery takes
10-25 ms: while mail flows it polls with NOOP every ``poll.interval``; after
``poll.idle-after`` quiet seconds it waits in IDLE (no traffic, no CPU), re-issued every
``poll.idle-refresh`` seconds. On a connection failure it raises :class:`ReceiveError`; the
next call reconnects and resumes from the last UID it handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from email.utils import parseaddr
from typing import Any, Final, TypeVar

import aiosmtplib
import imapclient
import imapclient.exceptions
from imapclient import response_parser

from .._config import Endpoint, Options, UserInfo
from .._exceptions import (
    AuthenticationError,
    ClosedError,
    ConnectError,
    ReceiveError,
    SendError,
    TLSError,
    TransportError,
)
from .._log import get_logger
from .._types import Email
from .._wire import build
from .base import EmailReceiver, EmailSender
from .common import (
    ResumePosition,
    envelope_recipients,
    hand_out,
    parse_batch,
    prepare_outgoing,
    ssl_context,
)

__all__ = ["NativeReceiver", "NativeSender"]

_log = get_logger("native")
T = TypeVar("T")
_BACKOFF_MAX: Final = 5.0
_IDLE_SLICE: Final = 0.25  # how often a blocked IDLE looks at wakeup()/close()


def _is_tls_failure(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, ssl.SSLError):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


# ----------------------------------------------------------------------------- sender


class NativeSender(EmailSender):
    """aiosmtplib sender with a bounded outbox. Thread-safe."""

    def __init__(self, options: Options) -> None:
        assert options.user is not None
        self._user: UserInfo = options.user
        self._endpoint: Endpoint = options.user.smtp
        self._server = self._endpoint.url
        self._options = options
        self._ssl = ssl_context(options.tls)
        self.address = options.recipients.from_
        self._closed = False
        self._smtp: aiosmtplib.SMTP | None = None
        self._slots = threading.BoundedSemaphore(options.outbox_size)
        self._cond = threading.Condition()
        self._pending = 0
        self._failures: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="emailmw-smtp", daemon=True
        )
        self._thread.start()
        self._queue: asyncio.Queue[tuple[str, list[str], bytes, str] | None] = self._call(
            self._make_queue()
        )
        try:
            self._call(self._connect(), timeout=options.timeout + 5)
        except BaseException:
            self._stop_loop()
            raise
        self._drainer = asyncio.run_coroutine_threadsafe(self._drain(), self._loop)

    def __repr__(self) -> str:
        return f"<NativeSender {self._server} as {self._user.username}>"

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    @staticmethod
    async def _make_queue() -> asyncio.Queue[tuple[str, list[str], bytes, str] | None]:
        return asyncio.Queue()

    async def _connect(self) -> None:
        implicit = self._endpoint.scheme == "smtps"
        starttls = not implicit and self._options.tls.starttls
        smtp = aiosmtplib.SMTP(
            hostname=self._endpoint.host,
            port=self._endpoint.port,
            use_tls=implicit,
            start_tls=starttls,  # required on smtp:// unless tls.starttls is false
            tls_context=self._ssl,
            validate_certs=self._options.tls.verify,
            timeout=self._options.timeout,
        )
        try:
            await smtp.connect()
            await smtp.login(self._user.username, self._user.password)
        except aiosmtplib.SMTPAuthenticationError as exc:
            smtp.close()
            raise AuthenticationError(
                f"login as {self._user.username} refused ({exc.code})", server=self._server
            ) from exc
        except (aiosmtplib.SMTPException, OSError) as exc:
            smtp.close()
            if _is_tls_failure(exc):
                raise TLSError(f"TLS handshake failed: {exc}", server=self._server) from exc
            raise ConnectError(f"cannot connect: {exc}", server=self._server) from exc
        self._smtp = smtp
        _log.debug("connected to %s", self._server)

    def send(self, email: Email) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed")
        email = prepare_outgoing(email, self.address)
        raw = build(email, max_size=self._options.max_message_size)
        recipients = envelope_recipients(email)
        if not recipients:
            raise SendError("the email has no recipients", server=self._server)
        assert email.message_id is not None
        if not self._slots.acquire(timeout=self._options.timeout):
            raise SendError(
                f"outbox full ({self._options.outbox_size} emails) for "
                f"{self._options.timeout} s: the server does not keep up",
                server=self._server,
            )
        with self._cond:
            self._pending += 1
        item = (self._sender_address(email), recipients, raw, email.message_id)
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _sender_address(self, email: Email) -> str:
        return parseaddr(email.from_)[1] or self._user.username

    async def _drain(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            try:
                await self._deliver(*item)
            finally:
                self._slots.release()
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    async def _deliver(self, from_: str, rcpts: list[str], raw: bytes, message_id: str) -> None:
        backoff = 0.1
        while True:
            try:
                if self._smtp is None or not self._smtp.is_connected:
                    await self._connect()
                assert self._smtp is not None
                refused, _ = await self._smtp.sendmail(from_, rcpts, raw)
                if refused:
                    self._fail(f"{message_id}: recipients refused: {', '.join(refused)}")
                return
            except (
                aiosmtplib.SMTPRecipientsRefused,
                aiosmtplib.SMTPSenderRefused,
                aiosmtplib.SMTPDataError,
            ) as exc:
                code = getattr(exc, "code", 550)  # all recipients refused: permanent
                if not 400 <= code < 500:  # 5xx: permanent, reported by flush()
                    self._fail(f"{message_id} refused by the server: {exc}")
                    return
                _log.warning("%s deferred by the server (%s); retrying", message_id, exc)
            except AuthenticationError as exc:
                _log.error("%s", exc)
            except (TransportError, aiosmtplib.SMTPException, OSError) as exc:
                if self._closed and backoff >= _BACKOFF_MAX:
                    self._fail(f"{message_id} not sent before close: {exc}")
                    return
                _log.warning(
                    "sending %s failed (%s); reconnecting in %.1f s", message_id, exc, backoff
                )
            if self._smtp is not None:
                self._smtp.close()
                self._smtp = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)

    def _fail(self, message: str) -> None:
        _log.error("%s: %s", self._server, message)
        with self._cond:
            self._failures.append(message)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the server accepted everything sent so far. Raises :class:`SendError`
        for emails the server refused since the last flush; False on timeout."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._pending == 0, timeout)
            failures, self._failures = self._failures, []
        if failures:
            raise SendError(
                f"{len(failures)} email(s) refused: " + "; ".join(failures[:5]), server=self._server
            )
        return done

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(SendError):
            if not self.flush(self._options.timeout):
                _log.warning("closing %s with %d unsent emails", self._server, self._pending)
        self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
        with contextlib.suppress(Exception):
            self._drainer.result(5)
        self._stop_loop()

    def _stop_loop(self) -> None:
        async def quit_() -> None:
            if self._smtp is not None and self._smtp.is_connected:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._smtp.quit(), 2)
            self._smtp = None

        with contextlib.suppress(Exception):
            self._call(quit_(), timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


# ----------------------------------------------------------------------------- receiver


def _body(item: dict[bytes, Any]) -> bytes | None:
    raw = item.get(b"BODY[]")
    return raw if isinstance(raw, bytes) else None


def _uid_fetch_from(client: imapclient.IMAPClient, first: int) -> dict[int, dict[bytes, Any]]:
    """``UID FETCH first:* (BODY.PEEK[])``: every message from UID ``first`` on, one round trip.

    ``IMAPClient.fetch`` cannot take a ``n:*`` range (it filters its result through
    ``int(messages)``), so the command goes through the underlying imaplib connection's
    public ``uid()`` and the answer through imapclient's own FETCH parser. Note that
    ``n:*`` also returns the highest message when its UID is below ``n``; callers filter.
    """
    typ, data = client._imap.uid("FETCH", f"{first}:*", "(BODY.PEEK[])")
    if typ != "OK":
        raise imapclient.exceptions.IMAPClientError(f"UID FETCH failed: {data!r}")
    if not data or data == [None]:
        return {}
    parsed: dict[int, dict[bytes, Any]] = response_parser.parse_fetch_response(
        data, client.normalise_times, True
    )
    return parsed


class NativeReceiver(EmailReceiver):
    """imapclient receiver with adaptive NOOP polling / IDLE. See the module docstring."""

    def __init__(self, options: Options) -> None:
        assert options.user is not None
        self._options = options
        self._user: UserInfo = options.user
        self._endpoint: Endpoint = options.user.imap
        self._server = self._endpoint.url
        self._where = f"{self._user.username}/{options.folder}"
        self._ssl = ssl_context(options.tls)
        self._readonly = options.on_receive == "keep"
        self._position = ResumePosition(options, self._user.username)
        self._client: imapclient.IMAPClient | None = None
        self._closed = False
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._check = True
        self._last_activity = time.monotonic()
        self._mode = "poll"
        with self._lock:
            self._connect()

    def __repr__(self) -> str:
        return f"<NativeReceiver {self._server} {self._where}>"

    @property
    def mode(self) -> str:
        """How a blocked :meth:`receive` waits right now: ``"poll"`` (NOOP every
        ``poll.interval``) or ``"idle"`` (IMAP IDLE). For monitoring and tests."""
        return self._mode

    # -- connection -------------------------------------------------------------------

    def _translate(self, exc: BaseException, doing: str) -> TransportError:
        if isinstance(exc, imapclient.exceptions.LoginError):
            return AuthenticationError(
                f"login as {self._user.username} refused", server=self._server
            )
        if _is_tls_failure(exc):
            return TLSError(f"TLS handshake failed: {exc}", server=self._server)
        if isinstance(exc, OSError) and self._client is None:
            return ConnectError(f"cannot connect: {exc}", server=self._server)
        return ReceiveError(f"{doing} failed: {exc}", server=self._server)

    def _open_client(self, *, readonly: bool) -> tuple[imapclient.IMAPClient, dict[bytes, Any]]:
        """A logged-in connection with the folder selected (raw backend errors propagate)."""
        implicit = self._endpoint.scheme == "imaps"
        client = imapclient.IMAPClient(
            self._endpoint.host,
            port=self._endpoint.port,
            ssl=implicit,
            ssl_context=self._ssl if implicit else None,
            timeout=self._options.timeout,
        )
        try:
            if not implicit and self._options.tls.starttls:
                client.starttls(self._ssl)
            client.login(self._user.username, self._user.password)
            info: dict[bytes, Any] = client.select_folder(self._options.folder, readonly=readonly)
        except BaseException:
            with contextlib.suppress(Exception):
                client.shutdown()
            raise
        return client, info

    def _connect(self) -> None:
        try:
            client, info = self._open_client(readonly=self._readonly)
        except (imapclient.exceptions.IMAPClientError, OSError) as exc:
            raise self._translate(exc, "connecting") from exc
        self._client = client
        next_uid = self._position.start(int(info[b"UIDVALIDITY"]), int(info[b"UIDNEXT"]))
        self._check = True  # mail may be waiting at or after next_uid
        _log.debug("connected to %s, %s from UID %d", self._server, self._where, next_uid)

    def _drop_connection(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.shutdown()
            self._client = None

    # -- receiving --------------------------------------------------------------------

    def receive(self, timeout: float | None = None) -> list[Email]:
        with self._lock:
            if self._closed:
                raise ClosedError(f"{self!r} is closed")
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                return self._receive(deadline)
            except (imapclient.exceptions.IMAPClientError, OSError) as exc:
                self._drop_connection()
                raise self._translate(exc, "receiving") from exc

    def _remaining(self, deadline: float | None) -> float:
        return float("inf") if deadline is None else deadline - time.monotonic()

    def _receive(self, deadline: float | None) -> list[Email]:
        while True:
            if self._client is None:
                self._connect()
            while self._check:  # fetch for as long as the server announces news
                emails = self._fetch_new()
                if emails:
                    return emails
            if self._wake.is_set() or self._closed:
                self._wake.clear()
                return []
            remaining = self._remaining(deadline)
            if remaining <= 0:
                return []
            if time.monotonic() - self._last_activity < self._options.poll.idle_after:
                if self._wake.wait(min(self._options.poll.interval, remaining)):
                    continue
                assert self._client is not None
                self._check = self._announces_mail(self._client.noop()[1])
            else:
                self._idle(deadline)

    def _announces_mail(self, responses: list[Any]) -> bool:
        """True when ``responses`` (or responses imaplib stashed while answering an earlier
        command) announce new messages. Dovecot may announce ``* n EXISTS`` in the answer
        to a UID FETCH; imaplib keeps such untagged lines aside, where no later NOOP shows
        them, so they are collected here too."""
        news = any(
            isinstance(r, tuple) and len(r) >= 2 and r[1] in (b"EXISTS", b"RECENT")
            for r in responses
        )
        if self._client is not None:
            stash = self._client._imap.untagged_responses
            for key in ("EXISTS", "RECENT"):
                if stash.pop(key, None):
                    news = True
        return news

    def _idle(self, deadline: float | None) -> None:
        client = self._client
        assert client is not None
        client.idle()
        started = time.monotonic()
        self._mode = "idle"
        try:
            while not (self._wake.is_set() or self._closed):
                remaining = self._remaining(deadline)
                refresh_in = self._options.poll.idle_refresh - (time.monotonic() - started)
                if remaining <= 0 or refresh_in <= 0:
                    break
                if self._announces_mail(client.idle_check(min(_IDLE_SLICE, remaining, refresh_in))):
                    self._check = True
                    self._last_activity = time.monotonic()
                    break
        finally:
            self._mode = "poll"
            _, responses = client.idle_done()
            if self._announces_mail(responses):
                self._check = True

    def _fetch_new(self) -> list[Email]:
        client = self._client
        assert client is not None
        assert self._position.next_uid is not None
        self._check = False
        first = self._position.next_uid
        data = _uid_fetch_from(client, first)
        self._check = self._announces_mail([])
        uids = sorted(uid for uid in data if uid >= first)
        if not uids:
            return []
        self._last_activity = time.monotonic()
        return hand_out(
            {uid: _body(data[uid]) for uid in uids},
            position=self._position,
            where=self._where,
            max_size=self._options.max_message_size,
            apply_on_receive=self._apply_on_receive,
        )

    def _apply_on_receive(self, uids: list[int]) -> None:
        action = self._options.on_receive
        if action == "keep" or not uids or self._client is None:
            return
        try:
            if action == "seen":
                self._client.add_flags(uids, [imapclient.SEEN], silent=True)
            elif action == "delete":
                self._client.delete_messages(uids, silent=True)
                self._client.uid_expunge(uids)
            else:
                self._client.move(uids, action.partition(":")[2])
        except imapclient.exceptions.IMAPClientError as exc:
            _log.warning(
                "on-receive %s failed for UIDs %s in %s: %s", action, uids, self._where, exc
            )

    def history(self, subject: str, limit: int) -> list[Email]:
        """IMAP ``SEARCH`` on a short-lived connection of its own (the main one may be in
        IDLE): the newest ``limit`` routable emails with exactly this Subject."""
        try:
            client, _ = self._open_client(readonly=True)
            with client:
                uids = sorted(client.search(["HEADER", "SUBJECT", subject], charset="UTF-8"))
                found: list[Email] = []
                # SEARCH matches substrings: walk back from the newest until enough match
                for end in range(len(uids), 0, -max(limit, 50)):
                    batch = uids[max(0, end - max(limit, 50)) : end]
                    data = client.fetch(batch, ["BODY.PEEK[]"])
                    older = [
                        e
                        for _, e in parse_batch(
                            {uid: _body(data.get(uid, {})) for uid in batch},
                            where=self._where,
                            max_size=self._options.max_message_size,
                        )
                        if e.subject == subject
                    ]
                    found = older + found
                    if len(found) >= limit:
                        break
                return found[-limit:] if limit > 0 else []
        except (imapclient.exceptions.IMAPClientError, OSError) as exc:
            raise self._translate(exc, "reading history") from exc

    def wakeup(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        with self._lock:
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.logout()
                self._drop_connection()
