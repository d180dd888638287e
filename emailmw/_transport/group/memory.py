"""The group protocol's store in process (``docs/delivery-modes.md``): a mailbox of
folders with UIDs and keywords, the same operations as the IMAP store, for the
intraprocess transport. Thread-safe."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..._core.carried import is_batch_head, outer_fields
from ..._core.types import Email
from ..._core.wire import (
    HEADER_PUBLISHER_GID,
    HEADER_PUBLISHER_SEQUENCE_NUMBER,
    build,
    publisher_sequence,
)
from .model import GroupStore, Head, Holding, MemberRecord, stream_of

__all__ = ["MemoryGroupStore", "MemoryMailbox"]


@dataclass
class _Entry:
    raw: bytes
    subject: str
    stamp: int = 0
    delivered: int = 0
    token: int = 0
    taken: bool = False
    locking: bool = False
    route_to: str = ""
    count: int = 0  # a batch email: the messages it carries
    part_of: str = ""
    stream: tuple[str, int] = ("", -1)  # Publisher-GID, Publisher-Sequence-Number
    given: int = 0  # a batch email: how many of its messages applications got


def _entry_of(raw: bytes, delivered: int = 0) -> _Entry:
    """An inbox entry for stored bytes (a batch email's count from its own header)."""
    fields = outer_fields(raw)
    stamp = fields.get("source-timestamp", "0").strip()
    count = fields.get("batch-count", "0").strip() if is_batch_head(fields) else "0"
    return _Entry(
        raw,
        fields.get("subject", ""),
        int(stamp) if stamp.isdigit() and len(stamp) < 20 else 0,
        delivered,
        route_to=fields.get("route-to", ""),
        count=int(count) if count.isdigit() and len(count) < 7 else 0,
        part_of=fields.get("part-of", ""),
        stream=stream_of(fields),
    )


@dataclass
class MemoryMailbox:
    """What a mail account would hold: folders of entries by UID. Keeps the inbox only
    once a group uses it (``enabled``), so plain intraprocess use keeps no history."""

    enabled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    folders: dict[str, dict[int, _Entry]] = field(default_factory=dict)
    locks: set[str] = field(default_factory=set)
    _uids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def append(self, folder: str, entry: _Entry) -> int:
        """Store ``entry`` in ``folder`` under a new UID (call with ``lock`` held)."""
        uid = next(self._uids)
        self.folders.setdefault(folder, {})[uid] = entry
        return uid

    def deliver(self, email: Email) -> None:
        if not self.enabled:
            return
        stamp = email.headers.get("Source-Timestamp", "0").strip()
        entry = _Entry(
            build(email),
            email.subject,
            int(stamp) if stamp.isdigit() and len(stamp) < 20 else 0,
            route_to=email.headers.get("Route-To", ""),
            part_of=email.headers.get("Part-Of", ""),
            stream=publisher_sequence(
                email.headers.get(HEADER_PUBLISHER_GID),
                email.headers.get(HEADER_PUBLISHER_SEQUENCE_NUMBER),
            ),
        )
        with self.lock:
            self.append("INBOX", entry)

    def deliver_raw(self, raw: bytes, delivered: int = 0) -> None:
        """Store ``raw`` (any email, a batch email too) in the inbox."""
        with self.lock:
            self.append("INBOX", _entry_of(raw, delivered))

    def move(self, source: str, uids: Sequence[int], target: str, taken: bool = False) -> None:
        with self.lock:
            folder = self.folders.get(source, {})
            for uid in uids:
                entry = folder.pop(uid, None)
                if entry is not None:
                    entry.taken = entry.taken or taken
                    self.append(target, entry)


class MemoryGroupStore(GroupStore):
    """The group ``group``'s folders in ``mailbox``."""

    def __init__(self, mailbox: MemoryMailbox, group: str) -> None:
        self._box = mailbox
        mailbox.enabled = True
        self._prefix = f"emailmw-{group}-"

    def _claims(self, member: str) -> str:
        return f"{self._prefix}claims-{member}"

    def members(self) -> list[MemberRecord]:
        with self._box.lock:
            found = self._box.folders.get(self._prefix + "members", {})
            return [MemberRecord(e.subject, uid, e.token, e.locking) for uid, e in found.items()]

    def join(self, member: str) -> None:
        with self._box.lock:
            self._box.append(self._prefix + "members", _Entry(b"", member))

    def beat(self, member: str, order: int, on: bool) -> None:
        del on  # a token that only grows changes either way
        with self._box.lock:
            entry = self._box.folders.get(self._prefix + "members", {}).get(order)
            if entry is not None and entry.subject == member:
                entry.token += 1

    def remove_member(self, record: MemberRecord) -> None:
        with self._box.lock:
            self._box.folders.get(self._prefix + "members", {}).pop(record.order, None)
            if not self._box.folders.get(self._claims(record.member)):
                self._box.folders.pop(self._claims(record.member), None)

    def claimants(self) -> list[str]:
        head = self._claims("")
        with self._box.lock:
            return [f.removeprefix(head) for f in self._box.folders if f.startswith(head)]

    def inbox(self) -> list[int]:
        with self._box.lock:
            return sorted(self._box.folders.get("INBOX", {}))

    def headers(self, uids: Sequence[int]) -> dict[int, Head]:
        with self._box.lock:
            inbox = self._box.folders.get("INBOX", {})
            return {
                uid: Head(
                    e.subject,
                    e.stamp,
                    e.route_to,
                    len(e.raw),
                    e.count,
                    e.part_of,
                    e.delivered,
                    *e.stream,
                )
                for uid in uids
                if (e := inbox.get(uid)) is not None
            }

    def _flag(self, record: MemberRecord | None, on: bool) -> None:
        if record is not None:
            entry = self._box.folders.get(self._prefix + "members", {}).get(record.order)
            if entry is not None:
                entry.locking = on

    def try_lock(self, record: MemberRecord) -> bool:
        with self._box.lock:
            if self._prefix in self._box.locks:
                return False
            self._box.locks.add(self._prefix)
            self._flag(record, True)
            return True

    def unlock(self, record: MemberRecord) -> None:
        self.break_lock(record)

    def locked(self) -> bool:
        with self._box.lock:
            return self._prefix in self._box.locks

    def break_lock(self, holder: MemberRecord | None) -> None:
        with self._box.lock:
            self._flag(holder, False)
            self._box.locks.discard(self._prefix)

    def claim(self, uids: Sequence[int], member: str) -> None:
        self._box.move("INBOX", uids, self._claims(member))

    def claimed(self, member: str) -> list[int]:
        with self._box.lock:
            return sorted(self._box.folders.get(self._claims(member), {}))

    def claimed_parts(self, member: str) -> dict[int, str]:
        with self._box.lock:
            folder = self._box.folders.get(self._claims(member), {})
            return {u: e.part_of for u, e in folder.items() if e.part_of}

    def holding(self, member: str) -> dict[int, Holding]:
        with self._box.lock:
            folder = self._box.folders.get(self._claims(member), {})
            return {
                u: Holding(len(e.raw), e.delivered, e.taken, e.count, bool(e.part_of), e.given)
                for u, e in folder.items()
            }

    def take(self, uids: Sequence[int], dead: str, member: str) -> None:
        self._box.move(self._claims(dead), uids, self._claims(member), taken=True)

    def fetch(self, member: str, uids: Sequence[int]) -> dict[int, bytes]:
        with self._box.lock:
            folder = self._box.folders.get(self._claims(member), {})
            return {uid: folder[uid].raw for uid in uids if uid in folder}

    def mark(self, member: str, uid: int, delivered: int, given: int = 0) -> bool:
        with self._box.lock:
            entry = self._box.folders.get(self._claims(member), {}).get(uid)
            if entry is None:
                return False
            entry.delivered = max(entry.delivered, delivered)
            entry.given = max(entry.given, given)
            return True

    def settle(self, member: str, uids: Sequence[int], folder: str | None) -> None:
        self._box.move(self._claims(member), uids, folder or f"{self._prefix}done-{member}")

    def give_back(self, member: str, uids: Sequence[int]) -> None:
        self._box.move(self._claims(member), uids, "INBOX", taken=True)

    def offer(self, raw: bytes, delivered: int) -> None:
        self._box.deliver_raw(raw, delivered)

    @property
    def inbox_folder(self) -> str:
        return "INBOX"
