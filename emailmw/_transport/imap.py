"""imapclient, the way emailmw uses it: one module for every IMAP connection of the project
(the native receiver, the group store, the pipeline's IMAP staging).

It opens a logged-in connection on a folder and holds the places that go below
imapclient's public API, each for a reason its docstring gives: a ``UID FETCH`` of an
open range (:func:`uid_fetch`), an IDLE wait that tells a closed connection from a quiet
one and sees what was read already (:func:`start_idle`, :func:`idle_check`), and the
new-mail announcements imaplib sets aside (:func:`stashed_news`). They use
``IMAPClient._imap`` (the imaplib connection), ``IMAPClient._idle_tag``,
``imapclient.imapclient._parse_untagged_response`` and ``IMAPClient._set_read_timeout``:
``pyproject.toml`` pins imapclient below its next major version for them, and
``tests/email`` exercise each against the real server.

Raw backend errors propagate: callers translate them with ``errors.imap_errors``.
"""

from __future__ import annotations

import contextlib
import datetime
import select
import socket
import ssl
import weakref
from typing import Any, Final

import imapclient
import imapclient.exceptions
from imapclient import response_parser

from .._core.config import DEFAULT_MAX_CONNECTIONS, Endpoint, Options, UserInfo
from .auth import imap_login
from .connections import Slot, take_slot

__all__ = [
    "COURIER_FOLDER_CHANGE_S",
    "body",
    "can_idle",
    "expunge_uids",
    "move_uids",
    "idle_check",
    "start_idle",
    "list_folders",
    "internal_ns",
    "is_courier",
    "on_courier",
    "open_account_folder",
    "open_imap_folder",
    "personal_prefix",
    "stashed_news",
    "uid_fetch",
]


class _CountedClient(imapclient.IMAPClient):  # type: ignore[misc]  # (untyped)
    """An imapclient connection holding a slot of its account's connection budget
    (``connections``), given back when it logs out or shuts down (or is collected)."""

    _slot: Slot | None = None

    def _keep(self, slot: Slot) -> None:
        self._slot = slot
        weakref.finalize(self, slot.release)

    def logout(self) -> Any:
        try:
            return super().logout()
        finally:
            if self._slot is not None:
                self._slot.release()

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            if self._slot is not None:
                self._slot.release()


def open_imap_folder(
    endpoint: Endpoint,
    user: UserInfo,
    *,
    context: ssl.SSLContext,
    starttls: bool,
    timeout: float,
    folder: str,
    readonly: bool,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> tuple[imapclient.IMAPClient, dict[bytes, Any]]:
    """A logged-in imapclient connection with ``folder`` selected (``readonly``: EXAMINE,
    except on Courier-IMAP, whose read-only sessions see UIDs of their own), and the
    SELECT's answer (with ``UIDNEXT`` always, asked with STATUS from a server whose SELECT
    leaves it out, as Courier's does): implicit TLS on ``imaps``, STARTTLS on ``imap``
    unless ``starttls`` is false. It holds one of the ``max_connections`` slots of its
    account in this process until it logs out or shuts down (``connections``: a
    :class:`~emailmw.ConnectionLimitError` when none is free). Raw backend errors
    propagate (callers translate them with ``errors.imap_errors``); a connection that
    failed half-way is shut down."""
    implicit = endpoint.scheme == "imaps"
    slot = take_slot(user.username, endpoint.url, max_connections, wait=timeout)
    try:
        client = _CountedClient(
            endpoint.host,
            port=endpoint.port,
            ssl=implicit,
            ssl_context=context if implicit else None,
            timeout=timeout,
        )
    except BaseException:
        slot.release()
        raise
    client._keep(slot)
    try:
        if not implicit and starttls:
            client.starttls(context)
        imap_login(client, user)
        # (read-write on Courier even for a reader that changes nothing: its read-only
        # sessions number new mail for themselves only, in name order, never recording
        # it, so UIDs and UIDVALIDITY seen read-only change from session to session)
        readonly = readonly and not on_courier(client)
        info: dict[bytes, Any] = client.select_folder(folder, readonly=readonly)
        if b"UIDNEXT" not in info:  # (Courier never says it on SELECT; STATUS does)
            info[b"UIDNEXT"] = client.folder_status(folder, [b"UIDNEXT"])[b"UIDNEXT"]
    except BaseException:
        with contextlib.suppress(Exception):
            client.shutdown()
        raise
    return client, info


def open_account_folder(
    options: Options, context: ssl.SSLContext, *, readonly: bool
) -> tuple[imapclient.IMAPClient, dict[bytes, Any]]:
    """:func:`open_imap_folder` on the IMAP account and folder of ``options`` (its user,
    STARTTLS setting and timeout)."""
    assert options.user is not None
    return open_imap_folder(
        options.user.imap,
        options.user,
        context=context,
        starttls=options.tls.starttls,
        timeout=options.timeout,
        folder=options.folder,
        readonly=readonly,
        max_connections=options.limits.max_connections,
    )


def expunge_uids(client: imapclient.IMAPClient, uids: list[int]) -> None:
    """Expunge ``uids`` (flagged ``\\Deleted``): ``UID EXPUNGE`` where the server has
    UIDPLUS (RFC 4315); else a plain ``EXPUNGE``, which also removes any other message of
    the folder flagged ``\\Deleted`` (no server without UIDPLUS offers better)."""
    if client.has_capability("UIDPLUS"):
        client.uid_expunge(uids)
    else:
        client.expunge()


def move_uids(client: imapclient.IMAPClient, uids: list[int], folder: str) -> None:
    """Move ``uids`` to ``folder``: ``UID MOVE`` where the server has MOVE (RFC 6851);
    else ``COPY``, flag ``\\Deleted``, expunge (:func:`expunge_uids`): not atomic, a
    copy may stay behind when the connection drops in between (found again, flagged as a
    repeat by emailmw's receivers)."""
    if client.has_capability("MOVE"):
        client.move(uids, folder)
        return
    client.copy(uids, folder)
    client.delete_messages(uids, silent=True)
    expunge_uids(client, uids)


def list_folders(client: imapclient.IMAPClient) -> list[tuple[tuple[str, ...], str]]:
    """``LIST "" "*"``: each folder's attributes (``\\HasNoChildren``, a SPECIAL-USE
    role ...) and name, as text."""
    return [
        (tuple(f.decode() if isinstance(f, bytes) else str(f) for f in flags), str(name))
        for flags, _, name in client.list_folders()
    ]


def personal_prefix(client: imapclient.IMAPClient) -> str:
    """The prefix of the personal namespace (RFC 2342): ``""`` on Dovecot, ``INBOX.`` on
    Courier-IMAP, under which an account's own folders are made."""
    if not client.has_capability("NAMESPACE"):
        return ""
    personal = client.namespace().personal
    if not personal:
        return ""
    prefix = personal[0][0]
    return prefix.decode() if isinstance(prefix, bytes) else str(prefix or "")


def can_idle(client: imapclient.IMAPClient) -> bool:
    """Whether the server offers IDLE (RFC 2177) that tells of new mail when it comes;
    without it a receiver keeps polling. Courier-IMAP offers IDLE but, as Debian and its
    own defaults set it up (``IMAP_ENHANCEDIDLE=0``), looks at the folder only every
    ``IMAP_IDLE_TIMEOUT`` (60 s) while in it, which its capabilities do not tell: a
    receiver on Courier polls (every ``polling-period``)."""
    return bool(client.has_capability("IDLE")) and not on_courier(client)


#: what Courier-IMAP takes to delete or rename a folder (it waits 2 s in it; measured)
COURIER_FOLDER_CHANGE_S: Final = 2.0


def is_courier(greeting: bytes | str) -> bool:
    """Whether an IMAP greeting is Courier-IMAP's (``* OK [...] Courier-IMAP ready.``)."""
    text = greeting.decode("ascii", "replace") if isinstance(greeting, bytes) else greeting
    return "Courier-IMAP" in text


def on_courier(client: imapclient.IMAPClient) -> bool:
    """Whether ``client`` is connected to Courier-IMAP (its greeting says so)."""
    return is_courier(getattr(client, "welcome", b"") or b"")


def body(item: dict[bytes, Any]) -> bytes | None:
    raw = item.get(b"BODY[]")
    return raw if isinstance(raw, bytes) else None


def uid_fetch(
    client: imapclient.IMAPClient, uid_set: str, items: str, need: bytes
) -> dict[int, dict[bytes, Any]]:
    """``UID FETCH uid_set items`` in one round trip, keyed by UID: the items that carry a
    field starting with ``need`` (one of those asked for).

    ``IMAPClient.fetch`` cannot take a ``n:*`` range (it filters its result through
    ``int(messages)``), so the command goes through the underlying imaplib connection's
    public ``uid()`` and the answer through imapclient's own FETCH parser. The answer may
    hold unsolicited FETCH responses too (another session changed a message's flags:
    ``* 3 FETCH (FLAGS (...) MODSEQ (...))``, with no UID or no field asked for); keyed by
    UID blindly, they became messages that do not exist (a sequence number taken for a
    UID), so only answers with their UID and the ``need`` field count. Note that ``n:*``
    also returns the highest message when its UID is below ``n``; callers filter.
    """
    typ, data = client._imap.uid("FETCH", uid_set, items)
    if typ != "OK":
        raise imapclient.exceptions.IMAPClientError(f"UID FETCH failed: {data!r}")
    if not data or data == [None]:
        return {}
    parsed = response_parser.parse_fetch_response(data, client.normalise_times, False)
    found: dict[int, dict[bytes, Any]] = {}
    for item in parsed.values():
        uid = item.get(b"UID")
        if isinstance(uid, int) and any(key.startswith(need) for key in item):
            found.setdefault(uid, {}).update(item)
    return found


def internal_ns(moment: object) -> int | None:
    """An INTERNALDATE as imapclient parsed it, in ns since the epoch."""
    if not isinstance(moment, datetime.datetime):
        return None
    return int(moment.timestamp()) * 1_000_000_000


def _readable(sock: socket.socket, timeout: float) -> bool:
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLPRI)
    return bool(poller.poll(max(0, int(timeout * 1000))))


def _waiting(client: imapclient.IMAPClient, sock: socket.socket) -> bool | None:
    """Whether a byte can be read at once (``sock`` non-blocking): one imaplib read into
    its buffer with an earlier answer, one TLS decrypted, or one on the socket; None when
    the connection ended."""
    try:
        if client._imap.file.peek(1):  # (its buffer; else one read, which may not wait)
            return True
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return False  # (TLS: no data yet; what came was a record without any)
    if isinstance(sock, ssl.SSLSocket):
        return None  # (TLS says end of stream with an empty read)
    try:  # (a plain socket's empty read is "nothing yet" or the end: the kernel tells)
        return None if sock.recv(1, socket.MSG_PEEK) == b"" else True
    except BlockingIOError:
        return False


def _can_read(client: imapclient.IMAPClient, timeout: float) -> bool:
    """Whether a line (or the end of the connection) can be read within ``timeout``
    seconds: what waits in imaplib's buffer counts, which a wait on the socket alone
    misses (a server's ``* 3 EXISTS`` in the packet that carried ``+ idling`` sat there
    until the next email came)."""
    sock = client.socket()
    sock.settimeout(None)
    sock.setblocking(False)
    try:
        state = _waiting(client, sock)
        if state is False and _readable(sock, timeout):
            state = _waiting(client, sock)
        return state is not False  # (the end too: reading it raises imaplib's abort)
    finally:
        sock.setblocking(True)
        client._set_read_timeout()


def start_idle(client: imapclient.IMAPClient) -> None:
    """Put the server into IDLE (RFC 2177): imapclient's ``idle()``, except that an
    untagged response before the continuation (``* 4 EXISTS``: news since the last
    command) is set aside for :func:`stashed_news` instead of failing the command (which
    dropped the connection). A refused IDLE raises ``IMAPClientError``."""
    imap = client._imap
    tag = imap._command("IDLE")
    client._idle_tag = tag
    while imap._get_response() is not None:
        if imap.tagged_commands.get(tag) is not None:  # (the server answered IDLE: refused)
            typ, data = imap.tagged_commands.pop(tag)
            raise imapclient.exceptions.IMAPClientError(f"IDLE refused: {typ} {data}")


def idle_check(client: imapclient.IMAPClient, timeout: float) -> list[Any]:
    """What the server said during IDLE within ``timeout`` seconds: imapclient's
    ``idle_check``, except that what was already read counts (:func:`_can_read`) and a
    closed connection raises instead of looking like a quiet one (``idle_check`` returns
    ``[]`` on EOF, and a dead socket is readable at once: a receiver kicked by the server
    looped at 100 % CPU and received nothing). A ``BYE`` from the server raises too. A
    line begun is read whole (within the connection's timeout)."""
    responses: list[Any] = []
    while _can_read(client, timeout if not responses else 0):
        line = client._imap._get_line()  # EOF: imaplib's abort, which propagates
        response = imapclient.imapclient._parse_untagged_response(line)
        if response and response[0] == b"BYE":
            raise imapclient.exceptions.IMAPClientAbortError(
                f"server closed the session: {line.decode('utf-8', 'replace')}"
            )
        responses.append(response)
    return responses


def stashed_news(client: imapclient.IMAPClient) -> bool:
    """Whether imaplib set aside an untagged ``EXISTS``/``RECENT`` while answering an earlier
    command (Dovecot may announce ``* n EXISTS`` in the answer to a UID FETCH; imaplib keeps
    such lines where no later NOOP shows them); takes them out of the stash."""
    stash = client._imap.untagged_responses
    found = False
    for key in ("EXISTS", "RECENT"):
        if stash.pop(key, None):
            found = True
    return found
