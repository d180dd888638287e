"""The group protocol's store over IMAP (``docs/delivery-modes.md``): one imapclient
connection of the group's account, whichever transport the context uses.

Folders of group ``g``: ``emailmw-g-members`` (one record per member: Subject = its name,
liveness = the record's MODSEQ, changed by toggling the ``$Alive`` keyword),
``emailmw-g-claims-MEMBER`` (what that member holds), ``emailmw-g-done-MEMBER`` (what it
processed: an archive says who processed what, ``emailmw analyze``'s ``group_stats``).
Claims and takeovers are moves (``UID MOVE``, RFC 6851) made while holding the group's
claim lock, the folder ``emailmw-g-lock``: of sessions creating it at once, at most one is
answered OK (a ``mkdir``; Dovecot may also answer every one ALREADYEXISTS and make it all
the same: a lock that names no holder is broken after half an expiry); the taker names
itself by the keyword ``$Locking`` on its lock marker, a second record of each member in the
members folder (``Subject: lock MEMBER``: a flag on the member's own record would change
its liveness token); the others read the lock by LIST: the lock folder itself is never
opened, as opening it races its deletion,
while neither Dovecot's MOVE (a copy and an expunge: two sessions moving one message at
once can both copy it) nor its conditional STORE (checked against each session's own view:
two sessions racing can both pass) decides between sessions. ``DeliveryN`` (a keyword) says
how many applications got a message, ``$Taken`` that it was taken over from a member that
failed.

Servers differ (Courier-IMAP has neither MOVE nor CONDSTORE, and keeps every folder under
the personal namespace ``INBOX.``): the folders are made under the personal namespace the
server names (RFC 2342); without MOVE a move is ``UID COPY``, ``\\Deleted`` and an
expunge, which the claim lock makes as safe as a MOVE between sessions, and a claim first
flags what it claims ``$Claimed``: a claim cut short between its copy and its expunge (the
member died) leaves that flag on what stays in the inbox, which the next claim marks
``$Taken`` and ``Delivery1`` (the copy made may be processed too: this one is handed out
as a redelivery, never silently twice); without CONDSTORE a member's liveness token is a
keyword ``$Beat0`` ... ``$Beat99`` it puts in place of the last one at each heartbeat.

Backend errors become :class:`~emailmw.ReceiveError` (and its kin) here; the connection is
opened again on the next call after a failure.
"""

from __future__ import annotations

import contextlib
import email.header
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import imapclient

from ..._core.config import Options
from ..._core.errors import ConnectionLimitError
from ..._core.log import get_logger
from ..common import ssl_context, uid_set
from ..errors import imap_errors
from ..imap import (
    COURIER_FOLDER_CHANGE_S,
    body,
    expunge_uids,
    move_uids,
    on_courier,
    open_account_folder,
    personal_prefix,
    uid_fetch,
)
from .model import GroupStore, Head, Holding, MemberRecord, stream_of

__all__ = ["ImapGroupStore"]

T = TypeVar("T")
_log = get_logger("groups")
_DELIVERY: Final = re.compile(rb"^Delivery(\d{1,3})$")
_ALIVE: Final = "$Alive"
_LOCKING: Final = "$Locking"
_MARKER: Final = "lock "  # the Subject of a member's lock marker: "lock MEMBER"
_TAKEN: Final = "$Taken"
_CLAIMED: Final = "$Claimed"  # (without MOVE: see the module's docstring)
_CLAIM_BY: Final = "$ClaimBy"  # + the claiming member's name (without MOVE)
_BEAT: Final = "$Beat"  # (without CONDSTORE: the liveness token, $Beat0 ... $Beat99)
_BEATS: Final = 100


def _count(flags: Sequence[bytes]) -> int:
    """How many applications got a message: its highest ``DeliveryN`` keyword (0: none)."""
    found = [int(m.group(1)) for f in flags if (m := _DELIVERY.match(f))]
    return max(found, default=0)


#: a batch email's record of how many of its messages (from the first) applications got:
#: the number's bits as keywords ``$Given0`` ... ``$Given13`` (a batch carries at most
#: 10,000 messages), so that a claims folder needs 14 keyword names at most, whatever its
#: batches (Cyrus allows 128 per mailbox)
_GIVEN: Final = "$Given"
_GIVEN_BITS: Final = 14
_GIVEN_FLAG: Final = re.compile(rb"^\$Given(\d{1,2})$", re.IGNORECASE)


def _given(flags: Sequence[bytes]) -> int:
    """A batch email's record of how many of its messages applications got (0: none)."""
    bits = {int(m.group(1)) for f in flags if (m := _GIVEN_FLAG.match(f))}
    return sum(1 << bit for bit in bits if bit < _GIVEN_BITS)


def _given_flags(given: int) -> list[str]:
    return [f"{_GIVEN}{bit}" for bit in range(_GIVEN_BITS) if given >> bit & 1]


class ImapGroupStore(GroupStore):
    """The folders of group ``group`` in the account of ``options``. Connects when made (a
    wrong password fails there); made while other processes or clients hold every
    connection the account allows (the machine's ``max-connections`` slots, or the server
    refusing one more), it is made without (:attr:`refusal` says why) and connects at its
    first command instead, which the member's rounds retry with the polling backoff: a
    member started on a full account joins once a connection is free. One beyond what
    this process itself may hold is :class:`~emailmw.ConnectionLimitError` at once."""

    def __init__(self, options: Options, group: str) -> None:
        assert options.user is not None
        self._options = options
        self._user = options.user
        self._server = options.user.imap.url
        self._ssl = ssl_context(options.tls, self._server)
        self._group = group
        self._prefix = f"emailmw-{group}-"  # (under the personal namespace once connected)
        self._client: imapclient.IMAPClient | None = None
        self._selected: str | None = None
        self._folders: set[str] = set()
        self._move_command = self._condstore = True  # (what the server offers: connecting)
        self._beats = 0
        try:
            self._run("connecting", lambda c: None)
        except ConnectionLimitError as exc:
            if exc.held_here:
                raise  # (this process holds them all: none will be given back)
            self.refusal = str(exc)

    @property
    def connected(self) -> bool:
        return self._client is not None

    @property
    def _lock_name(self) -> str:
        return f"{self._prefix}lock"

    # ---------------------------------------------------------------- plumbing

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            with imap_errors(self._server, doing, username=self._user.username, connected=True):
                yield
        except Exception:
            self._drop()
            raise

    def _run(self, doing: str, work: Callable[[imapclient.IMAPClient], T]) -> T:
        with self._errors(doing):
            if self._client is None:
                client, _ = open_account_folder(self._options, self._ssl, readonly=False)
                if on_courier(client):
                    self.slow_release = COURIER_FOLDER_CHANGE_S
                self._move_command = client.has_capability("MOVE")
                self._condstore = client.has_capability("CONDSTORE")
                self._prefix = f"{personal_prefix(client)}emailmw-{self._group}-"
                self._client = client
                self._selected = self._options.folder
            return work(self._client)

    def _drop(self) -> None:
        self._folders = set()  # (another member may have removed one meanwhile)
        client, self._client, self._selected = self._client, None, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.shutdown()

    def _select(self, client: imapclient.IMAPClient, folder: str) -> None:
        if self._selected != folder:
            self._ensure(client, folder)
            client.select_folder(folder)
            self._selected = folder

    def _ensure(self, client: imapclient.IMAPClient, folder: str) -> None:
        if folder in self._folders or folder == self._options.folder:
            return
        if not client.folder_exists(folder):
            _create(client, folder)
        self._folders.add(folder)

    def _members_folder(self) -> str:
        return f"{self._prefix}members"

    def _claims(self, member: str) -> str:
        return f"{self._prefix}claims-{member}"

    def _view(self, client: imapclient.IMAPClient, folder: str) -> None:
        """Select ``folder`` with this session's view of it up to date: one selected already
        is brought up to date (NOOP): Dovecot ignores, in a SEARCH, STORE or MOVE, what
        other sessions moved in or away since this one last heard of it."""
        if self._selected == folder:
            client.noop()
        else:
            self._select(client, folder)

    def _all(self, client: imapclient.IMAPClient, folder: str) -> list[int]:
        """The UIDs in ``folder`` now."""
        self._view(client, folder)
        return sorted(int(u) for u in client.search(["ALL"]))

    # ---------------------------------------------------------------- membership

    def members(self) -> list[MemberRecord]:
        def work(client: imapclient.IMAPClient) -> list[MemberRecord]:
            uids = self._all(client, self._members_folder())
            if not uids:
                return []
            token = "MODSEQ " if self._condstore else ""
            found = uid_fetch(
                client,
                uid_set(uids),
                f"(UID {token}FLAGS BODY.PEEK[HEADER.FIELDS (SUBJECT)])",
                b"BODY[HEADER",
            )
            records: dict[str, tuple[int, int]] = {}  # member -> (record UID, token)
            markers: dict[str, tuple[int, bool]] = {}  # member -> (marker UID, locking)
            for uid, item in sorted(found.items()):
                subject = _fields(item).get("subject", "")
                if subject.startswith(_MARKER):
                    locking = _has(item.get(b"FLAGS", ()), _LOCKING)
                    markers[subject.removeprefix(_MARKER)] = (uid, locking)
                elif self._condstore:
                    records[subject] = (uid, int(item.get(b"MODSEQ", (0,))[0]))
                else:
                    records[subject] = (uid, _beat(item.get(b"FLAGS", ())))
            found_records = []
            for member, (uid, modseq) in records.items():
                marker, locking = markers.get(member, (0, False))
                found_records.append(MemberRecord(member, uid, modseq, locking, marker))
            return found_records

        return self._run("reading the group's members", work)

    def join(self, member: str) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._ensure(client, self._members_folder())
            # its lock marker first, then its record (a member is known by its record)
            for subject in (f"{_MARKER}{member}", member):
                client.append(self._members_folder(), f"Subject: {subject}\r\n\r\n".encode())

        self._run("joining the group", work)

    def beat(self, member: str, order: int, on: bool) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            if self._condstore:  # (the record's MODSEQ changes)
                self._flag(client, order, _ALIVE, on)
                return
            self._beats = (self._beats + 1) % _BEATS
            self._view(client, self._members_folder())
            client.set_flags([order], [f"{_BEAT}{self._beats}"], silent=True)

        self._run("heartbeating", work)

    def remove_member(self, record: MemberRecord) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._view(client, self._members_folder())
            uids = [uid for uid in (record.order, record.marker) if uid]
            if uids:  # (none: a claims folder whose member has no record)
                client.delete_messages(uids, silent=True)
                expunge_uids(client, uids)
            folder = self._claims(record.member)
            if client.folder_exists(folder) and not self._all(client, folder):
                self._select(client, self._options.folder)
                _remove(client, folder)
                self._folders.discard(folder)

        self._run("removing a dead member", work)

    def claimants(self) -> list[str]:
        head = self._claims("")

        def work(client: imapclient.IMAPClient) -> list[str]:
            found = client.list_folders("", f"{head}*")
            return [name.removeprefix(head) for _, _, name in found if name.startswith(head)]

        return self._run("listing the claims folders", work)

    # ---------------------------------------------------------------- messages

    def inbox(self) -> list[int]:
        return self._run("searching the inbox", lambda c: self._all(c, self._options.folder))

    def headers(self, uids: Sequence[int]) -> dict[int, Head]:
        def work(client: imapclient.IMAPClient) -> dict[int, Head]:
            self._select(client, self._options.folder)
            found = uid_fetch(
                client,
                uid_set(list(uids)),
                "(UID RFC822.SIZE FLAGS BODY.PEEK[HEADER.FIELDS "
                "(SUBJECT SOURCE-TIMESTAMP ROUTE-TO BATCH-COUNT PART-OF PUBLISHER-GID "
                "PUBLISHER-SEQUENCE-NUMBER)])",
                b"BODY[HEADER",
            )
            out = {}
            for uid, item in found.items():
                fields = _fields(item)
                stamp = fields.get("source-timestamp", "0")
                out[uid] = Head(
                    _decode(fields.get("subject", "")),
                    int(stamp) if stamp.isdigit() and len(stamp) < 20 else 0,
                    fields.get("route-to", ""),
                    int(item.get(b"RFC822.SIZE", 0)),
                    _number(fields.get("batch-count", "0")),
                    fields.get("part-of", "")[:998],
                    _count(item.get(b"FLAGS", ())),
                    *stream_of(fields),
                )
            return out

        return self._run("reading subjects", work)

    def _move(self, client: imapclient.IMAPClient, uids: Sequence[int], target: str,
              *, claiming: str = "") -> None:  # fmt: skip
        """``UID MOVE`` those of ``uids`` still in the selected folder. Dovecot refuses a
        whole MOVE (``NO [EXPUNGEISSUED]``) when another session moved one of them first:
        then this session catches up (NOOP) and moves what is left. Without MOVE: a copy,
        ``\\Deleted`` and an expunge (``claiming``, the claiming member: marked first,
        see :func:`doubtful_claims`)."""
        self._ensure(client, target)
        client.noop()  # a MOVE ignores UIDs this session has not been told of yet
        if not self._move_command:
            flags = client.get_flags(list(uids))  # (those still here)
            if not flags:
                return
            if claiming:
                mine = _CLAIM_BY + claiming
                client.add_flags(list(flags), [_CLAIMED, mine], silent=True)
                client.noop()  # (the marks other sessions made meanwhile: told of now)
                after = client.get_flags(list(flags))
                doubts = doubtful_claims(flags, after, claiming)
                if doubts:  # (as got by one application: another copy may be)
                    client.add_flags(sorted(doubts), [_TAKEN, "Delivery1"], silent=True)
                flags = after
            move_uids(client, sorted(flags), target)
            return
        wanted = list(uids)
        for _ in range(5):
            if not wanted:
                return
            try:
                client.move(wanted, target)
                return
            except imapclient.exceptions.IMAPClientError as exc:
                if "EXPUNGEISSUED" not in str(exc):
                    raise
            client.noop()
            present = {int(u) for u in client.search(["UID", uid_set(wanted)])}
            wanted = [u for u in wanted if u in present]
        raise imapclient.exceptions.IMAPClientError("MOVE kept failing: messages moving away")

    def try_lock(self, record: MemberRecord) -> bool:
        def work(client: imapclient.IMAPClient) -> bool:
            if not _made(client, self._lock_name):
                return False
            # named by its lock marker, for the others to judge it alive or dead by its
            # record (a flag on the record itself would change its liveness token)
            self._flag(client, record.marker, _LOCKING, True)
            return True

        return self._run("taking the claim lock", work)

    def unlock(self, record: MemberRecord) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._flag(client, record.marker, _LOCKING, False)
            self._select(client, self._options.folder)  # (never in a folder that goes)
            _delete(client, self._lock_name)

        self._run("releasing the claim lock", work)

    def _flag(self, client: imapclient.IMAPClient, uid: int, flag: str, on: bool) -> None:
        """Set (or clear) ``flag`` on the message ``uid`` of the members folder."""
        if not uid:
            return  # (a member that has no lock marker)
        self._view(client, self._members_folder())  # (a record appended by another session)
        if on:
            client.add_flags([uid], [flag], silent=True)
        else:
            client.remove_flags([uid], [flag], silent=True)

    def locked(self) -> bool:
        # LIST only: opening the lock folder (even a STATUS) races its deletion, and
        # Dovecot may then make it again
        return self._run(
            "reading the claim lock",
            lambda c: bool(c.list_folders("", self._lock_name)),
        )

    def break_lock(self, holder: MemberRecord | None) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            if holder is not None:
                self._flag(client, holder.marker, _LOCKING, False)
            self._select(client, self._options.folder)
            _delete(client, self._lock_name)

        self._run("breaking the claim lock", work)

    def claim(self, uids: Sequence[int], member: str) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._select(client, self._options.folder)
            self._move(client, uids, self._claims(member), claiming=member)

        self._run("claiming", work)

    def claimed(self, member: str) -> list[int]:
        folder = self._claims(member)

        def work(client: imapclient.IMAPClient) -> list[int]:
            if folder not in self._folders and not client.folder_exists(folder):
                return []  # (a removed member's: not made again by looking)
            return self._all(client, folder)

        return self._run("reading claims", work)

    def claimed_parts(self, member: str) -> dict[int, str]:
        folder = self._claims(member)

        def work(client: imapclient.IMAPClient) -> dict[int, str]:
            if folder not in self._folders and not client.folder_exists(folder):
                return {}
            self._view(client, folder)
            found = uid_fetch(client, "1:*", "(UID BODY.PEEK[HEADER.FIELDS (PART-OF)])",
                              b"BODY[HEADER")  # fmt: skip
            return {
                uid: of[:998] for uid, item in found.items() if (of := _fields(item).get("part-of"))
            }

        return self._run("reading claims", work)

    def holding(self, member: str) -> dict[int, Holding]:
        folder = self._claims(member)

        def work(client: imapclient.IMAPClient) -> dict[int, Holding]:
            if folder not in self._folders and not client.folder_exists(folder):
                return {}
            self._view(client, folder)
            found = uid_fetch(
                client,
                "1:*",
                "(UID RFC822.SIZE FLAGS BODY.PEEK[HEADER.FIELDS (BATCH-COUNT PART-OF)])",
                b"RFC822.SIZE",
            )
            return {
                uid: Holding(
                    int(item.get(b"RFC822.SIZE", 0)),
                    _count(item.get(b"FLAGS", ())),
                    _has(item.get(b"FLAGS", ()), _TAKEN),
                    _number(fields.get("batch-count", "0")),
                    bool(fields.get("part-of")),
                    _given(item.get(b"FLAGS", ())),
                )
                for uid, item in found.items()
                for fields in (_fields(item),)
            }

        return self._run("reading claims", work)

    def take(self, uids: Sequence[int], dead: str, member: str) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._view(client, self._claims(dead))
            client.add_flags(list(uids), [_TAKEN], silent=True)
            self._move(client, uids, self._claims(member))

        self._run("taking a dead member's claims", work)

    def fetch(self, member: str, uids: Sequence[int]) -> dict[int, bytes]:
        def work(client: imapclient.IMAPClient) -> dict[int, bytes]:
            self._select(client, self._claims(member))
            found = uid_fetch(client, uid_set(list(uids)), "(UID BODY.PEEK[])", b"BODY[]")
            return {uid: body(item) or b"" for uid, item in found.items() if uid in uids}

        return self._run("fetching claims", work)

    def mark(self, member: str, uid: int, delivered: int, given: int = 0) -> bool:
        flags = [f"Delivery{delivered}", *_given_flags(given)]

        def work(client: imapclient.IMAPClient) -> bool:
            self._view(client, self._claims(member))  # a STORE ignores UIDs not seen yet
            client.add_flags([uid], flags, silent=True)
            # still there with it once the moves of other sessions are heard of: a move
            # that took it before the STORE leaves nothing here, one after takes the flag
            client.noop()
            found = uid_fetch(client, str(uid), "(UID FLAGS)", b"FLAGS").get(uid)
            if found is None or _count(found.get(b"FLAGS", ())) < delivered:
                return False
            # the bits of an earlier, smaller record go (until then it reads larger: a
            # message flagged that no application had, never the other way round)
            if given and _given(found.get(b"FLAGS", ())) != given:
                stale = set(_given_flags(_given(found.get(b"FLAGS", ())))) - set(flags)
                client.remove_flags([uid], sorted(stale), silent=True)
            return True

        return self._run("recording a delivery", work)

    def settle(self, member: str, uids: Sequence[int], folder: str | None) -> None:
        target = folder or f"{self._prefix}done-{member}"

        def work(client: imapclient.IMAPClient) -> None:
            self._select(client, self._claims(member))
            self._move(client, uids, target)

        self._run("settling", work)

    def give_back(self, member: str, uids: Sequence[int]) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._select(client, self._claims(member))
            client.add_flags(list(uids), [_TAKEN], silent=True)
            self._move(client, uids, self._options.folder)

        self._run("giving claims back to the inbox", work)

    def offer(self, raw: bytes, delivered: int) -> None:
        flags = [f"Delivery{delivered}"] if 0 < delivered < 1000 else []

        def work(client: imapclient.IMAPClient) -> None:
            client.append(self._options.folder, raw, flags=flags)

        self._run("offering a message again", work)

    @property
    def inbox_folder(self) -> str:
        return self._options.folder

    def close(self) -> None:
        self._drop()


def _made(client: imapclient.IMAPClient, folder: str) -> bool:
    """Create ``folder``: True when this session made it, False when it exists already (a
    refusal names that in words of the server's: ``ALREADYEXISTS``, "already exists", or
    none, as Courier's "Cannot create this folder": then LIST tells). A refusal of a
    folder that is not there, twice, raises."""
    for attempt in range(2):
        try:
            client.create_folder(folder)
            return True
        except imapclient.exceptions.IMAPClientError as exc:
            if "ALREADYEXISTS" in str(exc) or "exists" in str(exc).lower():
                return False
            if client.list_folders("", folder):
                return False
            if attempt:
                raise
    return False


def _create(client: imapclient.IMAPClient, folder: str) -> None:
    """Create ``folder``, which exists afterwards whatever the answer said (see
    ``try_lock``): a folder made just now by another member is no failure either."""
    _made(client, folder)


def _remove(client: imapclient.IMAPClient, folder: str) -> None:
    """Delete ``folder`` now. Cyrus deletes by renaming to ``DELETED.<name>.<second>``
    (its default ``delete_mode: delayed``): a second delete of the same name within a
    second answers "Mailbox already exists" and leaves the folder. Then the folder is
    renamed aside (a name of its own, freed at once) and that is deleted."""
    try:
        client.delete_folder(folder)
    except imapclient.exceptions.IMAPClientError as exc:
        if "exists" not in str(exc).lower():
            raise
        aside = f"{folder}-gone-{uuid.uuid4().hex[:12]}"
        client.rename_folder(folder, aside)
        client.delete_folder(aside)


def _delete(client: imapclient.IMAPClient, folder: str) -> None:
    """Delete ``folder``; one another session deleted first is no failure (logged)."""
    try:
        _remove(client, folder)
    except imapclient.exceptions.IMAPClientError as exc:
        _log.debug("deleting %s: %s", folder, exc)


def _uids(text: str) -> set[int]:
    """The UIDs of an IMAP sequence set such as ``1:3,7``."""
    found: set[int] = set()
    for part in text.strip().split(","):
        low, _, high = part.partition(":")
        if low.isdigit() and (not high or high.isdigit()):
            found.update(range(int(low), int(high or low) + 1))
    return found


def doubtful_claims(
    before: Mapping[int, Sequence[bytes]], after: Mapping[int, Sequence[bytes]], member: str
) -> set[int]:
    """Which of the messages ``member`` is claiming without MOVE (a copy, then an expunge)
    another copy of may be processed, so its copy is handed out as a redelivery: ``before``
    are the messages' flags read before it marked them ``$Claimed`` and ``$ClaimBy`` +
    its name, ``after`` those read after. Marked already before (a claim cut short between
    its copy and its expunge, by any member), or marked by another member after (two
    members claiming at once: the claim lock was broken while its holder only stalled).

    Of members claiming one message at once, at most one finds it undoubted: each reads
    after its own mark, and the one that marked later sees the earlier mark. A message
    gone from ``after`` is copied by nobody here (another session expunged it)."""
    own = (_CLAIM_BY + member).lower().encode()
    prefix = _CLAIM_BY.lower().encode()
    doubts = {uid for uid, flags in before.items() if _has(flags, _CLAIMED)}
    for uid, flags in after.items():
        if any(f.lower().startswith(prefix) and f.lower() != own for f in flags):
            doubts.add(uid)
    return doubts & set(after)


def _has(flags: Sequence[bytes], flag: str) -> bool:
    """Whether ``flag`` is among ``flags`` (keywords compare without case, RFC 3501)."""
    wanted = flag.lower().encode()
    return any(f.lower() == wanted for f in flags)


def _beat(flags: Sequence[bytes]) -> int:
    """A record's liveness token without CONDSTORE: N of its ``$BeatN`` (0: none yet)."""
    prefix = _BEAT.lower().encode()
    for flag in flags:
        low = flag.lower()
        if low.startswith(prefix) and low[len(prefix) :].isdigit():
            return int(low[len(prefix) :]) + 1
    return 0


def _number(text: str) -> int:
    """A small count header's value (0 when absent or broken)."""
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 7 else 0


def _decode(text: str) -> str:
    """A Subject as its RFC 2047 words say (the raw text when they are broken)."""
    try:
        return str(email.header.make_header(email.header.decode_header(text)))
    except (ValueError, LookupError, UnicodeError):
        return text


def _fields(item: dict[bytes, Any]) -> dict[str, str]:
    """The fields of a fetched ``BODY[HEADER.FIELDS (...)]``, unfolded, by lower-case
    name (the first of each)."""
    raw = next((v for k, v in item.items() if k.startswith(b"BODY[HEADER")), b"") or b""
    text = bytes(raw).decode("ascii", "replace").replace("\r\n", "\n")
    fields: dict[str, str] = {}
    for line in re.sub(r"\n[ \t]+", " ", text).split("\n"):
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip().lower(), value.strip())
    return fields
