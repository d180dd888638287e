"""The curl transport: libcurl through pycurl, rmw_email's design in Python.

:class:`CurlContext` holds one easy handle and the connection settings for one server (URL
from the configuration, any port, STARTTLS required on plain URLs, CA file, certificate and
host verification on by default, ``EMAILMW_CURL_VERBOSE=1`` for a protocol trace with the
credentials redacted). :class:`CurlExecutor` runs one SMTP send or one IMAP command on it and
translates pycurl errors into emailmw's exceptions, each naming the server. libcurl keeps the
connection open between commands.

The receiver polls every ``polling-period``: ``SELECT`` (a sync point that reports UIDNEXT
and UIDVALIDITY; never EXAMINE, whose read-only session numbers new mail for itself only on
Courier-IMAP), then, when UIDNEXT moved, ``UID FETCH n:* (UID RFC822.SIZE)`` and one
``UID FETCH`` of the bodies of a bounded batch (:class:`~.common.MailboxReceiver`). libcurl
hands the literals of a custom FETCH to the header callback line by line (its write callback
gets only the first line, curl issue 18847), so the executor collects that stream and
:func:`parse_fetch_stream` cuts the messages out by their literal lengths.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Final

import pycurl

from .._core.config import Endpoint, Options, UserInfo
from .._core.errors import (
    AuthenticationError,
    ClosedError,
    ConnectionLimitError,
    InvalidArgumentError,
    ReceiveError,
    SendError,
    TransportError,
)
from .._core.log import get_logger, redact
from .._core.types import Email
from .auth import curl_login_options
from .base import IncomingEmail
from .budget import ReceiveBudget
from .common import (
    MailboxReceiver,
    uid_set,
    unpack_fetched,
    warn_if_unverified,
)
from .connections import Slot, take_slot
from .errors import curl_errors, recipients_refused
from .outbox import Outbox, Submission, Submitter

__all__ = [
    "CurlContext",
    "CurlExecutor",
    "CurlReceiver",
    "CurlSender",
    "parse_fetch_stream",
    "parse_list",
    "parse_sizes",
    "parse_namespace",
    "parse_status",
]

_log = get_logger("curl")

# an authentication command: (IMAP tag) AUTHENTICATE|AUTH mechanism [initial response]
_AUTH_COMMAND: Final = re.compile(rb"^((?:\S+ )?(?:AUTHENTICATE|AUTH) +\S+)", re.IGNORECASE)
_LOGIN_COMMAND: Final = re.compile(rb"^((?:\S+ )?LOGIN)\b", re.IGNORECASE)
# the server asks for more of an authentication exchange: SMTP 334, IMAP "+"
_AUTH_CONTINUES: Final = re.compile(rb"^(?:334[ -]|\+)")
_REDACTED: Final = b" [credentials redacted]"
_FETCH_RE: Final = re.compile(rb"\* \d+ FETCH \(([^\r\n{]*)\{(\d+)\}\r\n")
_UID_RE: Final = re.compile(rb"UID (\d+)")
_STATUS_RE: Final = {
    "uidnext": re.compile(rb"\[UIDNEXT (\d+)\]"),
    "uidvalidity": re.compile(rb"\[UIDVALIDITY (\d+)\]"),
}
_STATUS_UIDNEXT_RE: Final = re.compile(rb"^\* STATUS .*[( ]UIDNEXT (\d+)[ )]", re.MULTILINE)


def parse_status(data: bytes, status: bytes = b"") -> dict[str, int]:
    """UIDNEXT and UIDVALIDITY from a SELECT response, UIDNEXT from the answer to
    a ``STATUS (UIDNEXT)`` (``status``) where the SELECT leaves it out (Courier's does);
    raises if missing."""
    out = {}
    for key, pattern in _STATUS_RE.items():
        found = pattern.search(data)
        if found is None and key == "uidnext":
            found = _STATUS_UIDNEXT_RE.search(status)
        if found is None:
            raise InvalidArgumentError(f"no {key.upper()} in the SELECT response")
        out[key] = int(found.group(1))
    return out


#: the SIZE line of an EHLO answer (RFC 1870)
_EHLO_SIZE: Final = re.compile(rb"^250[- ]SIZE[ \t]+(\d{1,15})", re.MULTILINE | re.IGNORECASE)
#: a server's refusal: SMTP 4xx/5xx, IMAP's tagged NO/BAD or an untagged BYE
_REFUSAL: Final = re.compile(rb"^(?:[45]\d\d[ -]|\S+ (?:NO|BAD)\b|\* BYE\b)")
#: an SMTP RCPT command libcurl sends, and the last line of an SMTP answer
_RCPT: Final = re.compile(rb"^RCPT TO:<([^>]*)>", re.IGNORECASE)
_FINAL_REPLY: Final = re.compile(rb"^(\d{3})(?: (.*)|\r?\n?$)", re.DOTALL)
#: libcurl's CURLOPT_MAIL_RCPT_ALLOWFAILS (7.69; pycurl names it not): a recipient refused
#: is not the end of the transaction, which goes on for the others
_MAIL_RCPT_ALLOWFAILS: Final = 290
_SIZE_LINE_RE: Final = re.compile(rb"^\* \d+ FETCH \((.*)\)\r?$", re.MULTILINE)
_SIZE_RE: Final = re.compile(rb"RFC822\.SIZE (\d+)")
_DATE_RE: Final = re.compile(
    rb'INTERNALDATE " ?(\d{1,2})-([A-Za-z]{3})-(\d{4}) (\d\d):(\d\d):(\d\d) ([+-])(\d\d)(\d\d)"'
)
_MONTHS: Final = {m: i for i, m in enumerate(
    (b"jan", b"feb", b"mar", b"apr", b"may", b"jun", b"jul", b"aug", b"sep", b"oct", b"nov",
     b"dec"), start=1)}  # fmt: skip


def parse_sizes(data: bytes) -> dict[int, tuple[int, int | None]]:
    """UID -> (size, server arrival in ns or None) from a ``UID FETCH ... (UID RFC822.SIZE
    INTERNALDATE)`` response (lines without a UID or a size are other sessions' news)."""
    sizes: dict[int, tuple[int, int | None]] = {}
    for line in _SIZE_LINE_RE.finditer(data):
        uid, size = _UID_RE.search(line.group(1)), _SIZE_RE.search(line.group(1))
        if uid is not None and size is not None:
            date = _DATE_RE.search(line.group(1))
            sizes[int(uid.group(1))] = (int(size.group(1)), _arrival(date))
    return sizes


def _arrival(found: re.Match[bytes] | None) -> int | None:
    """An INTERNALDATE ("25-Nov-2026 02:56:13 +0000") in ns since the epoch."""
    if found is None:
        return None
    day, month, year, hour, minute, second, sign, zh, zm = found.groups()
    offset = datetime.timedelta(hours=int(zh), minutes=int(zm)) * (-1 if sign == b"-" else 1)
    try:
        moment = datetime.datetime(
            int(year), _MONTHS[month.lower()], int(day), int(hour), int(minute), int(second),
            tzinfo=datetime.timezone(offset),
        )  # fmt: skip
    except (KeyError, ValueError):
        return None
    return int(moment.timestamp()) * 1_000_000_000


def parse_fetch_stream(data: bytes) -> tuple[list[tuple[int, bytes]], bool]:
    """Messages ``(uid, raw)`` in a custom ``UID FETCH (UID BODY.PEEK[])`` response stream.

    The second value is False when the stream could not be framed completely (a literal
    shorter than announced): the caller then refetches those UIDs one by one.
    """
    out: list[tuple[int, bytes]] = []
    pos = 0
    complete = True
    while True:
        match = _FETCH_RE.search(data, pos)
        if match is None:
            break
        size = int(match.group(2))
        start = match.end()
        literal = data[start : start + size]
        if len(literal) != size:
            complete = False
            break
        end = data.find(b"\r\n", start + size)
        tail = data[start + size : end if end != -1 else len(data)]
        uid = _UID_RE.search(match.group(1)) or _UID_RE.search(tail)
        if uid is None:
            complete = False
        else:
            out.append((int(uid.group(1)), literal))
        pos = start + size
    return out, complete


_LIST_RE: Final = re.compile(
    rb'^\* LIST \(([^)]*)\) (?:"(?:[^"\\]|\\.)*"|NIL) (?:"((?:[^"\\]|\\.)*)"|([^\s"{]+))\r?$',
    re.M,
)


_NAMESPACE_RE: Final = re.compile(rb'^\* NAMESPACE \(\("((?:[^"\\]|\\.)*)"', re.MULTILINE)


def parse_namespace(answer: bytes) -> str:
    """The personal namespace's prefix in a ``NAMESPACE`` answer (RFC 2342): the first
    quoted string of its first list (``""`` when the answer has none)."""
    found = _NAMESPACE_RE.search(answer)
    if found is None:
        return ""
    return re.sub(rb"\\(.)", rb"\1", found.group(1)).decode("utf-8", "replace")


def parse_list(answer: bytes) -> list[tuple[tuple[str, ...], str]]:
    """The folders of a ``LIST`` answer: each one's attributes and name, as the server
    wrote it (quoted or atom; a name sent as a literal is left out)."""
    out = []
    for match in _LIST_RE.finditer(answer):
        quoted, atom = match.group(2), match.group(3)
        name = re.sub(rb"\\(.)", rb"\1", quoted) if quoted is not None else atom
        attributes = tuple(match.group(1).decode("ascii", "replace").split())
        out.append((attributes, name.decode("utf-8", "replace")))
    return out


class CurlContext:
    """One libcurl easy handle set up for one server and account. Not thread-safe: the
    executor serializes its use."""

    def __init__(self, endpoint: Endpoint, user: UserInfo, options: Options) -> None:
        self.endpoint = endpoint
        self.server = endpoint.url
        handle = pycurl.Curl()
        handle.setopt(pycurl.MAXCONNECTS, 1)
        self._user = user
        self._secret = user.secret()
        curl_login_options(handle, user, self._secret)
        handle.setopt(pycurl.CONNECTTIMEOUT_MS, int(options.timeout * 1000))
        handle.setopt(pycurl.TIMEOUT_MS, int(options.timeout * 1000))
        handle.setopt(pycurl.NOSIGNAL, 1)
        warn_if_unverified(options.tls, self.server)
        handle.setopt(pycurl.SSL_VERIFYPEER, 1 if options.tls.verify else 0)
        handle.setopt(pycurl.SSL_VERIFYHOST, 2 if options.tls.verify else 0)
        if options.tls.ca_file:
            handle.setopt(pycurl.CAINFO, options.tls.ca_file)
        else:
            # the pycurl wheel's libcurl may look elsewhere: trust what Python trusts
            defaults = ssl.get_default_verify_paths()
            if defaults.cafile:
                handle.setopt(pycurl.CAINFO, defaults.cafile)
            if defaults.capath:
                handle.setopt(pycurl.CAPATH, defaults.capath)
        if endpoint.scheme in ("smtp", "imap"):
            handle.setopt(
                pycurl.USE_SSL, pycurl.USESSL_ALL if options.tls.starttls else pycurl.USESSL_NONE
            )
        self._authenticating = False
        self._verbose = os.environ.get("EMAILMW_CURL_VERBOSE", "").strip() not in (
            "", "0", "false",
        )  # fmt: skip
        #: the SMTP ``SIZE`` the server advertised in its EHLO answer (None: not yet)
        self.size_limit: int | None = None
        #: the server's last refusal in this transfer (SMTP: what it said, e.g. its 4.7.x)
        self.last_reply = ""
        #: SMTP: the recipients the server refused in this transfer, with its answers
        self.refused: dict[str, tuple[int, str]] = {}
        self._rcpt: str | None = None  # (the recipient whose RCPT awaits its answer)
        self._watching = self._verbose or endpoint.scheme in ("smtp", "smtps")
        if self._watching:
            # (what the server answers, read as it comes: SIZE, and the verbose log)
            handle.setopt(pycurl.VERBOSE, 1)
            handle.setopt(pycurl.DEBUGFUNCTION, self._debug)
        self.handle = handle
        # an IMAP handle is one connection of its account's budget (``connections``), given
        # back when it closes (or is collected)
        self._slot: Slot | None = None
        if endpoint.scheme in ("imap", "imaps"):
            slot = take_slot(
                user.username, self.server, options.limits.max_connections, wait=options.timeout
            )
            weakref.finalize(self, slot.release)
            self._slot = slot

    @contextlib.contextmanager
    def watching_replies(self) -> Iterator[None]:
        """Read what the server answers during the block (IMAP does not otherwise: a
        refused login tried once more says why, e.g. a connection limit)."""
        if self._watching:
            yield
            return
        self.handle.setopt(pycurl.VERBOSE, 1)
        self.handle.setopt(pycurl.DEBUGFUNCTION, self._debug)
        try:
            yield
        finally:
            self.handle.setopt(pycurl.VERBOSE, 0)

    @property
    def username(self) -> str:
        return self._user.username

    def renew_login(self, refused: bool) -> bool:
        """Before a transfer (``refused`` False): log the next connection in with the
        credential's current secret (a token about to expire is fetched anew). After a
        refused login (True): with a fresh secret; False when there is none to try."""
        secret = self._user.refresh(self._secret) if refused else self._user.secret()
        if secret is None:
            return False
        if secret != self._secret:
            self._secret = secret
            curl_login_options(self.handle, self._user, secret)
        return True

    def _debug(self, kind: int, data: bytes) -> None:
        if kind == pycurl.INFOTYPE_HEADER_OUT and (rcpt := _RCPT.match(data)):
            self._rcpt = rcpt.group(1).decode("utf-8", "replace")
        if kind == pycurl.INFOTYPE_HEADER_IN and _REFUSAL.match(data):
            self.last_reply = data[:300].decode("utf-8", "replace")
        if kind == pycurl.INFOTYPE_HEADER_IN and self._rcpt is not None:
            answer = _FINAL_REPLY.match(data)
            if answer is not None:  # (the last line of the RCPT's answer)
                code = int(answer.group(1))
                if code >= 400:
                    text = (answer.group(2) or b"")[:300].decode("utf-8", "replace").strip()
                    self.refused[self._rcpt] = (code, text)
                self._rcpt = None
        if kind == pycurl.INFOTYPE_HEADER_IN and (found := _EHLO_SIZE.search(data)):
            size = int(found.group(1))
            self.size_limit = size if size > 0 else None
        if not self._verbose:
            return
        if kind not in (
            pycurl.INFOTYPE_TEXT,
            pycurl.INFOTYPE_HEADER_IN,
            pycurl.INFOTYPE_HEADER_OUT,
        ):
            return
        direction = {pycurl.INFOTYPE_HEADER_IN: "<", pycurl.INFOTYPE_HEADER_OUT: ">"}.get(kind, "*")
        for raw_line in data.splitlines():
            if kind == pycurl.INFOTYPE_HEADER_OUT:
                line = self._redacted(raw_line)
            else:
                line = raw_line
                if kind == pycurl.INFOTYPE_HEADER_IN:
                    self._authenticating = self._authenticating and bool(
                        _AUTH_CONTINUES.match(raw_line)
                    )
            _log.debug(
                "curl %s %s %s", self.server, direction, redact(line.decode("utf-8", "replace"))
            )

    def _redacted(self, line: bytes) -> bytes:
        """An outgoing line as it may be logged, judged by what it is: everything a client
        sends in an authentication exchange (the initial response of ``AUTH PLAIN``, each
        line it sends while the server asks for more, the arguments of ``LOGIN``) is
        replaced, whatever it looks like."""
        if self._authenticating:
            return _REDACTED.strip()
        command = _AUTH_COMMAND.match(line)
        if command is not None:
            self._authenticating = True  # until the server stops asking (334 / "+")
            return command.group(1) + (_REDACTED if line[command.end() :].strip() else b"")
        login = _LOGIN_COMMAND.match(line)
        if login is not None:
            return login.group(1) + _REDACTED
        return line

    def url(self, path: str = "") -> str:
        return f"{self.endpoint.url}/{path}"

    def close(self) -> None:
        self.handle.close()
        if self._slot is not None:
            self._slot.release()


class CurlExecutor:
    """Runs one SMTP send or one IMAP command at a time on a :class:`CurlContext`.

    Thread-safe (one lock). Every pycurl error becomes an emailmw error naming the server:
    :class:`AuthenticationError`, :class:`ConnectError`, :class:`TLSError`, else
    ``failure`` (:class:`SendError` or :class:`ReceiveError`).
    """

    def __init__(self, context: CurlContext | Callable[[], CurlContext],
                 failure: type[TransportError], server: str = "", *,
                 remake: Callable[[], CurlContext] | None = None) -> None:  # fmt: skip
        # (a factory: the handle, one connection of the account's budget, is made at the
        # first command: a receiver made while its account was full; ``remake`` makes it
        # again at the first command after :meth:`disconnect`)
        self._made = context if isinstance(context, CurlContext) else None
        self._make = None if isinstance(context, CurlContext) else context
        self._remake = remake
        self.server = context.server if isinstance(context, CurlContext) else server
        self._failure = failure
        self._lock = threading.Lock()
        self._making = threading.Lock()

    @property
    def _context(self) -> CurlContext:
        made = self._made
        if made is None:
            with self._making:
                if self._made is None:
                    assert self._make is not None
                    self._made = self._make()  # (ConnectionLimitError while still full)
                made = self._made
        return made

    def _perform(self, doing: str, setup: Callable[[pycurl.Curl], None]) -> None:
        """One transfer; a refused login (nothing was done) is tried once more with a
        fresh secret when the credential has one (an OAuth2 token that expired)."""
        handle = self._context.handle
        with self._lock:
            self._context.renew_login(refused=False)
            self._context.last_reply = ""
            self._context.refused = {}
            setup(handle)
            said = lambda: self._context.last_reply  # noqa: E731
            user = self._context.username
            try:
                with curl_errors(self.server, doing, self._failure, self._last_answer, said, user):
                    handle.perform()
            except AuthenticationError:
                # once more: with a fresh secret if there is one, reading what the server
                # says (a refusal for too many connections is not a wrong password)
                self._context.renew_login(refused=True)
                self._context.last_reply = ""
                self._context.refused = {}
                setup(handle)
                with (
                    self._context.watching_replies(),
                    curl_errors(self.server, doing, self._failure, self._last_answer, said, user),
                ):
                    handle.perform()

    def _last_answer(self) -> int:
        """The server's last answer code (0: none): 4xx or none is worth another try."""
        return int(self._context.handle.getinfo(pycurl.RESPONSE_CODE) or 0)

    def send_mail(self, from_: str, recipients: list[str], raw: bytes) -> None:
        """One SMTP transaction: MAIL FROM, RCPT TO each recipient, DATA (dot-stuffed)."""
        sent = 0

        def read(size: int) -> bytes:
            nonlocal sent
            chunk = raw[sent : sent + size]
            sent += len(chunk)
            return chunk

        def setup(handle: pycurl.Curl) -> None:
            nonlocal sent
            sent = 0  # (again from the start when the transfer is tried once more)
            handle.setopt(pycurl.URL, self._context.url())
            handle.setopt(pycurl.MAIL_FROM, f"<{from_}>")
            handle.setopt(pycurl.MAIL_RCPT, recipients)
            handle.setopt(_MAIL_RCPT_ALLOWFAILS, 1)  # (the others get it: see submit)
            handle.setopt(pycurl.UPLOAD, 1)
            handle.setopt(pycurl.INFILESIZE_LARGE, len(raw))
            handle.setopt(pycurl.READFUNCTION, read)

        self._perform("sending", setup)

    def smtp_command(self, command: str) -> None:
        """One SMTP command without a transaction (``NOOP``, ``RSET``)."""

        def setup(handle: pycurl.Curl) -> None:
            handle.setopt(pycurl.URL, self._context.url())
            handle.unsetopt(pycurl.MAIL_RCPT)  # (else libcurl would VRFY each recipient)
            handle.setopt(pycurl.CUSTOMREQUEST, command)
            handle.setopt(pycurl.UPLOAD, 0)
            handle.setopt(pycurl.WRITEFUNCTION, lambda data: None)

        try:
            self._perform(command, setup)
        finally:
            self._context.handle.unsetopt(pycurl.CUSTOMREQUEST)

    def imap(self, command: str) -> bytes:
        """Run one IMAP command (no mailbox in the URL, so libcurl selects nothing itself);
        returns everything the server answered: untagged lines and literals."""
        chunks: list[bytes] = []

        def setup(handle: pycurl.Curl) -> None:
            handle.setopt(pycurl.URL, self._context.url())
            handle.setopt(pycurl.CUSTOMREQUEST, command)
            handle.setopt(pycurl.UPLOAD, 0)
            handle.setopt(pycurl.WRITEFUNCTION, chunks.append)
            handle.setopt(pycurl.HEADERFUNCTION, chunks.append)

        try:
            self._perform(command if len(command) <= 80 else command[:77] + "...", setup)
        finally:
            self._context.handle.unsetopt(pycurl.CUSTOMREQUEST)
        return b"".join(chunks)

    def fetch_uid(self, folder: str, uid: int) -> bytes:
        """One message by URL (``FOLDER/;UID=n``): the fallback when a FETCH stream could
        not be framed."""
        body: list[bytes] = []

        def setup(handle: pycurl.Curl) -> None:
            handle.setopt(pycurl.URL, self._context.url(f"{folder}/;UID={uid}"))
            handle.setopt(pycurl.UPLOAD, 0)
            handle.setopt(pycurl.WRITEFUNCTION, body.append)
            handle.setopt(pycurl.HEADERFUNCTION, lambda _: None)

        self._perform(f"fetching UID {uid}", setup)
        return b"".join(body)

    def disconnect(self) -> None:
        """Close the connection (its slot given back); the next command connects again
        (needs ``remake``)."""
        assert self._remake is not None
        with self._lock, self._making:
            if self._made is not None:
                self._made.close()
                self._made, self._make = None, self._remake

    def close(self) -> None:
        with self._lock:
            if self._made is not None:  # (never made: nothing to close)
                self._made.close()


class CurlSubmitter(Submitter):
    """SMTP through libcurl: one transaction per :meth:`submit`, on a connection libcurl
    keeps open between them."""

    def __init__(self, options: Options) -> None:
        assert options.user is not None
        self._context = CurlContext(options.user.smtp, options.user, options)
        self._executor = CurlExecutor(self._context, SendError)
        self.server = self._executor.server

    @property  # (read from what libcurl saw: EHLO)
    def size_limit(self) -> int | None:  # type: ignore[override]
        """The ``SIZE`` the server advertised when libcurl last connected (EHLO)."""
        return self._context.size_limit

    def connect(self) -> None:
        """A NOOP on the connection libcurl keeps (its EHLO answer gives the SIZE)."""
        if self._context.size_limit is None:
            self._executor.smtp_command("NOOP")

    def submit(self, envelope: Submission) -> None:
        what = envelope.message_id
        try:
            self._executor.send_mail(envelope.sender, list(envelope.recipients), envelope.raw)
        except SendError as exc:  # libcurl names no recipient: say which email went where
            refused = self._context.refused
            if refused and set(refused) >= set(envelope.recipients):  # (every one refused)
                raise recipients_refused(what, refused, self.server, accepted_others=False) from exc
            detail = str(exc).removeprefix(f"{exc.server}: ")
            said = self._context.last_reply.strip()
            if said and said not in detail:  # (the server's own words, always)
                detail = f"{detail}: {said}"
            raise SendError(
                f"{what} to {', '.join(envelope.recipients)}: {detail}",
                server=exc.server,
                temporary=exc.temporary,
                throttled=exc.throttled,
            ) from exc
        if self._context.refused:  # accepted for the others: not sent again
            raise recipients_refused(
                what, dict(self._context.refused), self.server, accepted_others=True
            )

    def close(self) -> None:
        self._executor.close()


class CurlSender(Outbox):
    """The curl transport's sender: an :class:`~.outbox.Outbox` over libcurl."""

    def __init__(self, options: Options) -> None:
        super().__init__(CurlSubmitter(options), options)

    def __repr__(self) -> str:
        return f"<CurlSender {self._server}>"


class CurlReceiver(MailboxReceiver):
    """Polls with SELECT -> UIDNEXT -> UID FETCH every ``polling-period``."""

    def __init__(self, options: Options, budget: ReceiveBudget | None = None) -> None:
        assert options.user is not None
        super().__init__(options, options.user.username, budget)
        self._folder = options.folder
        user = options.user
        self._period = options.polling_period_ns / 1e9
        self._capabilities: frozenset[bytes] | None = None
        self._lock = threading.Lock()

        def make() -> CurlContext:
            return CurlContext(user.imap, user, options)

        try:
            context: CurlContext | Callable[[], CurlContext] = make()
        except ConnectionLimitError as exc:
            self._connect_later(exc)
            context = make
        self._executor = CurlExecutor(context, ReceiveError, server=user.imap.url, remake=make)
        if callable(context):
            return  # (it logs in at its first receive)
        with self._lock:
            # log in now (a bad password fails at construction) and fix the start position;
            # fetching waits for the first receive(), so nothing is lost here
            try:
                self._select_folder()
            except ConnectionLimitError as exc:
                self._connect_later(exc)

    def __repr__(self) -> str:
        return f"<CurlReceiver {self._where}>"

    def _select_folder(self) -> tuple[int, int]:
        """(Re)select the folder; returns (first UID to fetch, UIDNEXT)."""
        try:
            selected = self._executor.imap(f'SELECT "{self._folder}"')
            asked = b""
            if _STATUS_RE["uidnext"].search(selected) is None:
                asked = self._executor.imap(f'STATUS "{self._folder}" (UIDNEXT)')
            status = parse_status(selected, asked)
        except ValueError as exc:
            raise ReceiveError(str(exc), server=self._executor.server) from exc
        return self._started(status["uidvalidity"], status["uidnext"]), status["uidnext"]

    # -- IMAP commands of the shared core --------------------------------------------------

    def _sizes(self, uid_set: str) -> dict[int, tuple[int, int | None]]:
        return parse_sizes(
            self._executor.imap(f"UID FETCH {uid_set} (UID RFC822.SIZE INTERNALDATE)")
        )

    def _bodies(self, uids: list[int]) -> dict[int, bytes | None]:
        stream = self._executor.imap(f"UID FETCH {uid_set(uids)} (UID BODY.PEEK[])")
        messages, complete = parse_fetch_stream(stream)
        found: dict[int, bytes | None] = dict(messages)
        if not complete:
            _log.warning("FETCH stream from %s incomplete: fetching one by one", self._where)
            for uid in uids:
                if uid not in found and self._exists(uid):
                    found[uid] = self._executor.fetch_uid(self._folder, uid)
        return found

    def _exists(self, uid: int) -> bool:
        return f" {uid}".encode() in self._executor.imap(f"UID SEARCH UID {uid}")

    def _apply(self, action: str, uids: list[int]) -> None:
        ids = uid_set(uids)
        if action == "seen":
            self._executor.imap(f"UID STORE {ids} +FLAGS.SILENT (\\Seen)")
        elif action == "delete":
            self._executor.imap(f"UID STORE {ids} +FLAGS.SILENT (\\Deleted)")
            self._expunge(ids)
        else:
            named = action.partition(":")[2]
            folder = self._role_folder(named)
            try:
                self._move(ids, folder)
            except ReceiveError:
                # libcurl opens a new connection after a failed command: nothing selected
                if not named.startswith("\\"):  # (a role's folder exists: the server said so)
                    with contextlib.suppress(ReceiveError):  # a folder nobody made yet
                        self._executor.imap(f'CREATE "{folder}"')
                self._select_folder()
                self._move(ids, folder)

    def _list_folders(self) -> list[tuple[tuple[str, ...], str]]:
        return parse_list(self._executor.imap('LIST "" "*"'))

    def _personal_prefix(self) -> str:
        if not self._has("NAMESPACE"):
            return ""
        return parse_namespace(self._executor.imap("NAMESPACE"))

    def _has(self, capability: str) -> bool:
        """Whether the server offers ``capability`` (asked once: ``CAPABILITY``)."""
        if self._capabilities is None:
            answer = self._executor.imap("CAPABILITY").upper()
            self._capabilities = frozenset(answer.replace(b"\r\n", b" ").split())
        return capability.encode() in self._capabilities

    def _expunge(self, ids: str) -> None:
        """``UID EXPUNGE`` with UIDPLUS (RFC 4315), else ``EXPUNGE`` (the folder's every
        message flagged ``\\Deleted``)."""
        self._executor.imap(f"UID EXPUNGE {ids}" if self._has("UIDPLUS") else "EXPUNGE")

    def _move(self, ids: str, folder: str) -> None:
        """``UID MOVE`` with MOVE (RFC 6851), else ``UID COPY``, ``\\Deleted``, expunge."""
        if self._has("MOVE"):
            self._executor.imap(f'UID MOVE {ids} "{folder}"')
            return
        self._executor.imap(f'UID COPY {ids} "{folder}"')
        self._executor.imap(f"UID STORE {ids} +FLAGS.SILENT (\\Deleted)")
        self._expunge(ids)

    # -- receiving --------------------------------------------------------------------

    def _poll(self) -> tuple[list[IncomingEmail], bool]:
        if self._waiting_for_room:  # back-pressure: mail waits on the server
            return [], False
        first, uidnext = self._select_folder()
        if uidnext <= first and not self._refetch:
            return [], False
        emails, more = self._fetch_new()
        self._apply_actions()  # the quarantine of what could not be parsed
        return emails, more

    def receive_incoming(self, timeout: float | None = None) -> list[IncomingEmail]:
        with self._lock:
            if self._closed:
                raise ClosedError(f"{self!r} is closed")
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                self._nudge.clear()
                self._apply_actions()
                emails, more = self._poll()
                if emails:
                    return emails
                if self._take_wakeup():
                    return []
                if more and not self._waiting_for_room:
                    continue
                wait = self._period
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return []
                self._nudge.wait(wait)

    def history(self, subject: str, limit: int) -> list[Email]:
        """``UID SEARCH HEADER SUBJECT`` then one ``UID FETCH`` of the newest matches.

        ASCII subjects only: a non-ASCII one needs a SEARCH literal, which libcurl's custom
        commands cannot carry.
        """
        if not subject.isascii():
            raise NotImplementedError("the curl transport searches ASCII subjects only")
        quoted = subject.replace("\\", "\\\\").replace('"', '\\"')
        self._executor.imap(f'SELECT "{self._folder}"')
        answer = self._executor.imap(f'UID SEARCH HEADER SUBJECT "{quoted}"')
        uids = sorted(
            int(n)
            for line in answer.splitlines()
            if line.startswith(b"* SEARCH")
            for n in line.split()[2:]
        )
        if not uids or limit <= 0:
            return []
        wanted = uids[-max(limit * 4, 50) :]
        stream = self._executor.imap(f"UID FETCH {','.join(map(str, wanted))} (UID BODY.PEEK[])")
        messages, _ = parse_fetch_stream(stream)
        found = [
            f.email
            for f in unpack_fetched(
                dict(messages), where=self._where, max_size=self._options.max_message_size
            )
            if f.email is not None and f.email.subject == subject
        ]
        return found[-limit:]

    def _hang_up(self) -> None:
        self._apply_actions()  # what was settled still gets its action
        self._executor.disconnect()

    def close(self) -> None:
        self._closed = True
        self._nudge.set()
        with self._lock:
            self._apply_actions()  # what was settled last still gets its action
            self._executor.close()
            self._stop_budget()
