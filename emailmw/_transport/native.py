"""The native transport: aiosmtplib to send, imapclient to receive.

Sender: one persistent authenticated SMTP connection owned by a background event loop
(:class:`AiosmtplibSubmitter`), under the shared :class:`~.outbox.Outbox`, which gives
``send()`` its guarantee (``server``, ``spool`` or ``memory``) and retries what failed for
now.

Receiver: one persistent IMAP connection with the folder selected (read-only unless mail is
flagged, deleted or moved), on the shared :class:`~.common.MailboxReceiver`: new mail is
fetched in bounded batches (``UID FETCH n:* (UID RFC822.SIZE)``, then the bodies). Waiting is
adaptive, because Dovecot delays IDLE notifications by a fixed 500 ms while delivery takes
10-25 ms: while mail flows it polls with NOOP every ``poll.interval``; after
``poll.idle-after`` quiet seconds it waits in IDLE (no traffic, no CPU), re-issued every
``poll.idle-refresh`` seconds. A connection the server closes (in IDLE too: a kick, a
restart, a UIDVALIDITY change) raises :class:`ReceiveError`; the next call reconnects and
resumes from the position (see :class:`~.common.ResumePosition`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, Final, TypeVar

import aiosmtplib
import imapclient
import imapclient.exceptions

from .._core.config import Endpoint, Options, UserInfo
from .._core.errors import (
    ClosedError,
    ConnectError,
    ConnectionLimitError,
    ReceiveError,
    TransportError,
)
from .._core.log import get_logger
from .._core.types import Email
from .auth import smtp_login
from .base import IncomingEmail
from .budget import ReceiveBudget
from .common import (
    MailboxReceiver,
    ssl_context,
    uid_set,
    unpack_fetched,
)
from .errors import imap_errors, recipients_refused, smtp_login_errors, smtp_send_errors
from .imap import (
    body,
    can_idle,
    expunge_uids,
    idle_check,
    internal_ns,
    list_folders,
    move_uids,
    open_account_folder,
    personal_prefix,
    start_idle,
    stashed_news,
    uid_fetch,
)
from .outbox import Outbox, Submission, Submitter

__all__ = ["NativeReceiver", "NativeSender"]

_log = get_logger("native")
T = TypeVar("T")
_IDLE_SLICE: Final = 0.25  # how often a blocked IDLE looks at wakeup()/close()
_ROOM_WAIT: Final = 60.0  # a receiver waiting for room in the budget NOOPs this often


# ----------------------------------------------------------------------------- sender


class AiosmtplibSubmitter(Submitter):
    """One authenticated aiosmtplib connection, owned by an event loop thread of its own;
    :meth:`submit` waits for its transaction. Connects at construction (a wrong password
    or an untrusted certificate fails there) and again after any failure."""

    def __init__(self, options: Options) -> None:
        assert options.user is not None
        self._user: UserInfo = options.user
        self._endpoint: Endpoint = options.user.smtp
        self.server = self._endpoint.url
        self._options = options
        self._ssl = ssl_context(options.tls, self.server)
        self._smtp: aiosmtplib.SMTP | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="emailmw-smtp", daemon=True
        )
        self._thread.start()
        try:
            self._call(self._connect())
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(2 * self._options.timeout + 5)
        except TimeoutError as exc:
            future.cancel()
            raise ConnectError("no answer from the server", server=self.server) from exc

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
            with smtp_login_errors(self.server, self._user.username):
                await smtp.connect()
                await smtp_login(smtp, self._user)
                advertised = smtp.esmtp_extensions.get("size", "")
                if advertised.isdigit() and int(advertised) > 0:
                    self.size_limit = int(advertised)
        except TransportError:
            smtp.close()
            raise
        self._smtp = smtp
        _log.debug("connected to %s", self.server)

    def submit(self, envelope: Submission) -> None:
        self._call(self._submit(envelope))

    def connect(self) -> None:
        self._call(self._ensure_connected())

    async def _ensure_connected(self) -> None:
        if self._smtp is None or not self._smtp.is_connected:
            await self._connect()

    async def _submit(self, envelope: Submission) -> None:
        if self._smtp is None or not self._smtp.is_connected:
            await self._connect()
        smtp = self._smtp
        assert smtp is not None
        what = envelope.message_id
        with smtp_send_errors(self.server, what, broken=self._drop):
            refused, _ = await smtp.sendmail(
                envelope.sender, list(envelope.recipients), envelope.raw
            )
        if refused:  # accepted for the others: not sent again
            raise recipients_refused(
                what,
                {r: (answer.code, str(answer.message)) for r, answer in refused.items()},
                self.server,
                accepted_others=True,
            )

    def _drop(self) -> None:
        if self._smtp is not None:
            self._smtp.close()
            self._smtp = None

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop_loop()

    def _stop_loop(self) -> None:
        async def quit_() -> None:
            if self._smtp is not None and self._smtp.is_connected:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._smtp.quit(), 2)
            self._smtp = None

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(quit_(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


class NativeSender(Outbox):
    """The native transport's sender: an :class:`~.outbox.Outbox` over aiosmtplib."""

    def __init__(self, options: Options) -> None:
        assert options.user is not None
        self._username = options.user.username
        super().__init__(AiosmtplibSubmitter(options), options)

    def __repr__(self) -> str:
        return f"<NativeSender {self._server} as {self._username}>"


# ----------------------------------------------------------------------------- receiver


class NativeReceiver(MailboxReceiver):
    """imapclient receiver with adaptive NOOP polling / IDLE. See the module docstring."""

    def __init__(self, options: Options, budget: ReceiveBudget | None = None) -> None:
        assert options.user is not None
        super().__init__(options, options.user.username, budget)
        self._user: UserInfo = options.user
        self._endpoint: Endpoint = options.user.imap
        self._server = self._endpoint.url
        self._ssl = ssl_context(options.tls, self._server)
        # read-only unless mail is to be flagged, deleted or moved
        self._readonly = options.on_receive == "keep" and not options.quarantine
        self._client: imapclient.IMAPClient | None = None
        self._lock = threading.Lock()
        self._check = True
        self._last_activity = time.monotonic()
        self._mode = "poll"
        with self._lock:
            try:
                self._connect()
            except ConnectionLimitError as exc:
                self._connect_later(exc)

    def __repr__(self) -> str:
        return f"<NativeReceiver {self._server} {self._where}>"

    @property
    def mode(self) -> str:
        """How a blocked :meth:`receive` waits right now: ``"poll"`` (NOOP every
        ``poll.interval``) or ``"idle"`` (IMAP IDLE). For monitoring and tests."""
        return self._mode

    # -- connection -------------------------------------------------------------------

    def _open_client(self, *, readonly: bool) -> tuple[imapclient.IMAPClient, dict[bytes, Any]]:
        """A logged-in connection with the folder selected (raw backend errors propagate)."""
        return open_account_folder(self._options, self._ssl, readonly=readonly)

    def _connect(self) -> None:
        with imap_errors(self._server, "connecting", username=self._user.username, connected=False):
            client, info = self._open_client(readonly=self._readonly)
        self._client = client
        first = self._started(int(info[b"UIDVALIDITY"]), int(info[b"UIDNEXT"]))
        self._check = True  # mail may be waiting at or after the first UID
        _log.debug("connected to %s, %s from UID %d", self._server, self._where, first)

    def _drop_connection(self) -> None:
        self._mode = "poll"
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.shutdown()
            self._client = None

    # -- IMAP commands of the shared core --------------------------------------------------

    def _sizes(self, uid_set: str) -> dict[int, tuple[int, int | None]]:
        assert self._client is not None
        found = uid_fetch(self._client, uid_set, "(UID RFC822.SIZE INTERNALDATE)", b"RFC822.SIZE")
        return {
            uid: (int(item.get(b"RFC822.SIZE", 0)), internal_ns(item.get(b"INTERNALDATE")))
            for uid, item in found.items()
        }

    def _bodies(self, uids: list[int]) -> dict[int, bytes | None]:
        assert self._client is not None
        found = uid_fetch(self._client, uid_set(uids), "(UID BODY.PEEK[])", b"BODY[]")
        return {uid: body(item) for uid, item in found.items()}

    def _apply(self, action: str, uids: list[int]) -> None:
        client = self._client
        if client is None:
            raise ReceiveError("not connected", server=self._server)
        if action == "seen":
            client.add_flags(uids, [imapclient.SEEN], silent=True)
        elif action == "delete":
            client.delete_messages(uids, silent=True)
            expunge_uids(client, uids)
        else:
            named = action.partition(":")[2]
            folder = self._role_folder(named)
            try:
                move_uids(client, uids, folder)
            except imapclient.exceptions.IMAPClientError:
                if named.startswith("\\") or client.folder_exists(folder):
                    raise  # (a role's folder exists: the server said so)
                client.create_folder(folder)  # a quarantine folder nobody made yet
                move_uids(client, uids, folder)

    def _list_folders(self) -> list[tuple[tuple[str, ...], str]]:
        client = self._client
        if client is None:
            raise ReceiveError("not connected", server=self._server)
        return list_folders(client)

    def _personal_prefix(self) -> str:
        client = self._client
        if client is None:
            raise ReceiveError("not connected", server=self._server)
        return personal_prefix(client)

    # -- receiving --------------------------------------------------------------------

    def receive_incoming(self, timeout: float | None = None) -> list[IncomingEmail]:
        with self._lock:
            if self._closed:
                raise ClosedError(f"{self!r} is closed")
            deadline = None if timeout is None else time.monotonic() + timeout
            # (a socket error here has ended the connection: connecting again is next)
            with imap_errors(
                self._server, "receiving", username=self._user.username, connected=False
            ):
                try:
                    return self._receive(deadline)
                except (imapclient.exceptions.IMAPClientError, OSError):
                    self._drop_connection()
                    raise

    def _remaining(self, deadline: float | None) -> float:
        return float("inf") if deadline is None else deadline - time.monotonic()

    def _receive(self, deadline: float | None) -> list[IncomingEmail]:
        while True:
            if self._client is None:
                self._connect()
            self._nudge.clear()
            self._apply_actions()
            # fetch for as long as the server announces news and the budget has room
            while self._check and not self._waiting_for_room:
                self._check = False
                emails, more = self._fetch_new()
                self._check = more or self._announces_mail([])
                if emails or more:
                    self._last_activity = time.monotonic()
                self._apply_actions()  # the quarantine of what could not be parsed
                if emails:
                    return emails
            if self._take_wakeup():
                return []
            remaining = self._remaining(deadline)
            if remaining <= 0:
                return []
            if self._waiting_for_room:  # back-pressure: mail waits on the server
                if not self._nudge.wait(min(_ROOM_WAIT, remaining)):
                    assert self._client is not None
                    self._client.noop()  # (a long wait: the connection kept alive)
                continue
            if time.monotonic() - self._last_activity < self._options.poll.idle_after:
                if self._nudge.wait(min(self._options.poll.interval, remaining)):
                    continue
                assert self._client is not None
                self._check = self._announces_mail(self._client.noop()[1])
            elif self._client is not None and not can_idle(self._client):
                # (a server without IDLE: polled, every polling-period once mail is quiet)
                period = self._options.polling_period_ns / 1e9
                if self._nudge.wait(min(period, remaining)):
                    continue
                assert self._client is not None
                self._check = self._announces_mail(self._client.noop()[1])
            else:  # (out of IDLE in time for a mailbox action that failed to be tried again)
                retry = self._actions.retry_at()
                self._idle(deadline if retry is None else min(deadline or retry, retry))

    def _announces_mail(self, responses: list[Any]) -> bool:
        """True when ``responses`` (or responses imaplib stashed while answering an earlier
        command) announce new messages. Dovecot may announce ``* n EXISTS`` in the answer
        to a UID FETCH; imaplib keeps such untagged lines aside, where no later NOOP shows
        them, so they are collected here too."""
        news = any(
            isinstance(r, tuple) and len(r) >= 2 and r[1] in (b"EXISTS", b"RECENT")
            for r in responses
        )
        if self._client is not None and stashed_news(self._client):
            news = True
        return news

    def _idle(self, deadline: float | None) -> None:
        client = self._client
        assert client is not None
        start_idle(client)
        started = time.monotonic()
        self._mode = "idle"
        if self._announces_mail([]):  # (news said before the server was idling)
            self._check = True
        while not (self._check or self._nudge.is_set() or self._closed):
            remaining = self._remaining(deadline)
            refresh_in = self._options.poll.idle_refresh - (time.monotonic() - started)
            if remaining <= 0 or refresh_in <= 0:
                break
            if self._announces_mail(idle_check(client, min(_IDLE_SLICE, remaining, refresh_in))):
                self._check = True
                self._last_activity = time.monotonic()
                break
        self._mode = "poll"
        _, responses = client.idle_done()
        if self._announces_mail(responses):
            self._check = True

    def history(self, subject: str, limit: int) -> list[Email]:
        """IMAP ``SEARCH`` on a short-lived connection of its own (the main one may be in
        IDLE): the newest ``limit`` routable emails with exactly this Subject."""
        connected = self._client is not None
        with imap_errors(
            self._server, "reading history", username=self._user.username, connected=connected
        ):
            client, _ = self._open_client(readonly=True)
            with client:
                uids = sorted(client.search(["HEADER", "SUBJECT", subject], charset="UTF-8"))
                found: list[Email] = []
                # SEARCH matches substrings: walk back from the newest until enough match
                for end in range(len(uids), 0, -max(limit, 50)):
                    batch = uids[max(0, end - max(limit, 50)) : end]
                    data = client.fetch(batch, ["BODY.PEEK[]"])
                    older = [
                        f.email
                        for f in unpack_fetched(
                            {uid: body(data.get(uid, {})) for uid in batch},
                            where=self._where,
                            max_size=self._options.max_message_size,
                        )
                        if f.email is not None and f.email.subject == subject
                    ]
                    found = older + found
                    if len(found) >= limit:
                        break
                return found[-limit:] if limit > 0 else []

    def _hang_up(self) -> None:
        if self._client is not None:
            self._apply_actions()  # what was settled last still gets its action
            with contextlib.suppress(Exception):
                self._client.logout()
            self._drop_connection()

    def close(self) -> None:
        self._closed = True
        self._nudge.set()
        with self._lock:
            self._hang_up()
            self._stop_budget()
