"""The group protocol's store over IMAP (``docs/delivery-modes.md``): one imapclient
connection of the group's account, whichever transport the context uses.

Folders of group ``g``: ``emailmw-g-members`` (one record per member: Subject = its name,
liveness = the record's MODSEQ, changed by toggling the ``$Alive`` keyword),
``emailmw-g-claims-MEMBER`` (what that member holds), ``emailmw-g-done-MEMBER`` (what it
processed: an archive says who processed what, ``emailmw analyze``'s ``group_stats``).
Claims and takeovers are moves (``UID MOVE``, RFC 6851) made while holding the group's
claim lock, the folder ``emailmw-g-lock``: creating a folder is atomic (of several sessions
creating it, one succeeds; its UIDVALIDITY tells one taking of the lock from the next),
while neither Dovecot's MOVE (a copy and an expunge: two sessions moving one message at
once can both copy it) nor its conditional STORE (checked against each session's own view:
two sessions racing can both pass) decides between
sessions. The delivery count is the keyword ``DeliveryN`` a taker sets (N >= 2).

Backend errors become :class:`~emailmw.ReceiveError` (and its kin) here; the connection is
opened again on the next call after a failure.
"""

from __future__ import annotations

import contextlib
import email.header
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

import imapclient

from .._config import Options
from .._groups import GroupStore, MemberRecord
from .common import ssl_context, uid_set
from .errors import imap_errors
from .native import _body, _uid_fetch, open_account_folder

__all__ = ["ImapGroupStore"]

T = TypeVar("T")
_DELIVERY: Final = re.compile(rb"^Delivery(\d{1,3})$")
_ALIVE: Final = "$Alive"


def _count(flags: Sequence[bytes]) -> int:
    found = [int(m.group(1)) for f in flags if (m := _DELIVERY.match(f))]
    return max(found, default=1)


class ImapGroupStore(GroupStore):
    """The folders of group ``group`` in the account of ``options``."""

    def __init__(self, options: Options, group: str) -> None:
        assert options.user is not None
        self._options = options
        self._user = options.user
        self._server = options.user.imap.url
        self._ssl = ssl_context(options.tls, self._server)
        self._prefix = f"emailmw-{group}-"
        self._lock_name = f"{self._prefix}lock"
        self._client: imapclient.IMAPClient | None = None
        self._selected: str | None = None
        self._folders: set[str] = set()
        self._records: dict[str, int] = {}  # member -> record UID
        self._alive_flag: dict[str, bool] = {}
        self._run("connecting", lambda c: None)

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
                self._client, _ = open_account_folder(self._options, self._ssl, readonly=False)
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
            with contextlib.suppress(imapclient.exceptions.IMAPClientError):
                client.create_folder(folder)  # (another member may have made it just now)
        self._folders.add(folder)

    def _members_folder(self) -> str:
        return f"{self._prefix}members"

    def _claims(self, member: str) -> str:
        return f"{self._prefix}claims-{member}"

    def _all(self, client: imapclient.IMAPClient, folder: str) -> list[int]:
        """The UIDs in ``folder`` now: a folder selected already is brought up to date
        first (NOOP), as a search does not report what other sessions moved away."""
        if self._selected == folder:
            client.noop()
        else:
            self._select(client, folder)
        return sorted(int(u) for u in client.search(["ALL"]))

    # ---------------------------------------------------------------- membership

    def members(self) -> list[MemberRecord]:
        def work(client: imapclient.IMAPClient) -> list[MemberRecord]:
            uids = self._all(client, self._members_folder())
            if not uids:
                self._records = {}
                return []
            found = _uid_fetch(
                client, uid_set(uids), "(UID MODSEQ BODY.PEEK[HEADER.FIELDS (SUBJECT)])"
            )
            records = []
            for uid, item in found.items():
                member = _fields(item).get("subject", "")
                modseq = item.get(b"MODSEQ", (0,))
                records.append(MemberRecord(member, uid, int(modseq[0])))
            self._records = {r.member: r.order for r in records}
            return records

        return self._run("reading the group's members", work)

    def join(self, member: str) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._ensure(client, self._members_folder())
            client.append(self._members_folder(), f"Subject: {member}\r\n\r\n".encode())

        self._run("joining the group", work)

    def beat(self, member: str) -> None:
        uid = self._records.get(member)
        if uid is None:
            return

        def work(client: imapclient.IMAPClient) -> None:
            self._select(client, self._members_folder())
            on = not self._alive_flag.get(member, False)
            if on:
                client.add_flags([uid], [_ALIVE], silent=True)
            else:
                client.remove_flags([uid], [_ALIVE], silent=True)
            self._alive_flag[member] = on

        self._run("heartbeating", work)

    def remove_member(self, member: str) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            uid = self._records.get(member)
            if uid is not None:
                self._select(client, self._members_folder())
                client.delete_messages([uid], silent=True)
                client.uid_expunge([uid])
            folder = self._claims(member)
            if client.folder_exists(folder) and not self._all(client, folder):
                self._select(client, self._options.folder)
                client.delete_folder(folder)
                self._folders.discard(folder)

        self._run("removing a dead member", work)

    # ---------------------------------------------------------------- messages

    def inbox(self) -> list[int]:
        return self._run("searching the inbox", lambda c: self._all(c, self._options.folder))

    def headers(self, uids: Sequence[int]) -> dict[int, tuple[str, int]]:
        def work(client: imapclient.IMAPClient) -> dict[int, tuple[str, int]]:
            self._select(client, self._options.folder)
            found = _uid_fetch(
                client,
                uid_set(list(uids)),
                "(UID BODY.PEEK[HEADER.FIELDS (SUBJECT SOURCE-TIMESTAMP)])",
            )
            out = {}
            for uid, item in found.items():
                fields = _fields(item)
                stamp = fields.get("source-timestamp", "0")
                out[uid] = (
                    _decode(fields.get("subject", "")),
                    int(stamp) if stamp.isdigit() and len(stamp) < 20 else 0,
                )
            return out

        return self._run("reading subjects", work)

    def _move(self, client: imapclient.IMAPClient, uids: Sequence[int], target: str) -> None:
        """``UID MOVE`` those of ``uids`` still in the selected folder. Dovecot refuses a
        whole MOVE (``NO [EXPUNGEISSUED]``) when another session moved one of them first:
        then this session catches up (NOOP) and moves what is left."""
        self._ensure(client, target)
        client.noop()  # a MOVE ignores UIDs this session has not been told of yet
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

    def try_lock(self, member: str) -> bool:
        def work(client: imapclient.IMAPClient) -> bool:
            try:
                client.create_folder(self._lock_name)
            except imapclient.exceptions.IMAPClientError as exc:
                if "ALREADYEXISTS" in str(exc) or "exists" in str(exc).lower():
                    return False
                raise
            return True

        return self._run("taking the claim lock", work)

    def unlock(self) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._select(client, self._options.folder)
            with contextlib.suppress(imapclient.exceptions.IMAPClientError):
                client.delete_folder(self._lock_name)

        self._run("releasing the claim lock", work)

    def lock_id(self) -> int | None:
        def work(client: imapclient.IMAPClient) -> int | None:
            try:
                status = client.folder_status(self._lock_name, [b"UIDVALIDITY"])
            except imapclient.exceptions.IMAPClientError:
                return None  # (gone: free)
            return int(status[b"UIDVALIDITY"])

        return self._run("reading the claim lock", work)

    def break_lock(self) -> None:
        self.unlock()

    def claim(self, uids: Sequence[int], member: str) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._select(client, self._options.folder)
            self._move(client, uids, self._claims(member))

        self._run("claiming", work)

    def claimed(self, member: str) -> list[int]:
        folder = self._claims(member)

        def work(client: imapclient.IMAPClient) -> list[int]:
            if folder not in self._folders and not client.folder_exists(folder):
                return []  # (a removed member's: not made again by looking)
            return self._all(client, folder)

        return self._run("reading claims", work)

    def take(self, uids: Sequence[int], dead: str, member: str) -> None:
        def work(client: imapclient.IMAPClient) -> None:
            self._select(client, self._claims(dead))
            client.noop()
            for uid, flags in client.get_flags(list(uids)).items():
                client.add_flags([uid], [f"Delivery{_count(flags) + 1}"], silent=True)
            self._move(client, uids, self._claims(member))

        self._run("taking a dead member's claims", work)

    def fetch(self, member: str, uids: Sequence[int]) -> dict[int, tuple[bytes, int]]:
        def work(client: imapclient.IMAPClient) -> dict[int, tuple[bytes, int]]:
            self._select(client, self._claims(member))
            found = _uid_fetch(client, uid_set(list(uids)), "(UID FLAGS BODY.PEEK[])")
            return {
                uid: (_body(item) or b"", _count(item.get(b"FLAGS", ())))
                for uid, item in found.items()
                if uid in uids
            }

        return self._run("fetching claims", work)

    def settle(self, member: str, uids: Sequence[int], folder: str | None) -> None:
        target = folder or f"{self._prefix}done-{member}"

        def work(client: imapclient.IMAPClient) -> None:
            self._select(client, self._claims(member))
            self._move(client, uids, target)

        self._run("settling", work)

    def close(self) -> None:
        self._drop()


def _uids(text: str) -> set[int]:
    """The UIDs of an IMAP sequence set such as ``1:3,7``."""
    found: set[int] = set()
    for part in text.strip().split(","):
        low, _, high = part.partition(":")
        if low.isdigit() and (not high or high.isdigit()):
            found.update(range(int(low), int(high or low) + 1))
    return found


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
