"""The group protocol's store in process (``docs/delivery-modes.md``): a mailbox of
folders with UIDs and keywords, the same operations as the IMAP store, for the
intraprocess transport. Thread-safe."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from .._groups import GroupStore, MemberRecord
from .._types import Email
from .._wire import build

__all__ = ["MemoryGroupStore", "MemoryMailbox"]


@dataclass
class _Entry:
    raw: bytes
    subject: str
    stamp: int = 0
    count: int = 1
    token: int = 0


@dataclass
class MemoryMailbox:
    """What a mail account would hold: folders of entries by UID. Keeps the inbox only
    once a group uses it (``enabled``), so plain intraprocess use keeps no history."""

    enabled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    folders: dict[str, dict[int, _Entry]] = field(default_factory=dict)
    locks: dict[str, int] = field(default_factory=dict)
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
        entry = _Entry(build(email), email.subject, int(stamp) if stamp.isdigit() else 0)
        with self.lock:
            self.append("INBOX", entry)

    def move(self, source: str, uids: Sequence[int], target: str, bump: bool = False) -> None:
        with self.lock:
            folder = self.folders.get(source, {})
            for uid in uids:
                entry = folder.pop(uid, None)
                if entry is not None:
                    if bump:
                        entry.count += 1
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
            return [MemberRecord(e.subject, uid, e.token) for uid, e in found.items()]

    def join(self, member: str) -> None:
        with self._box.lock:
            self._box.append(self._prefix + "members", _Entry(b"", member))

    def beat(self, member: str) -> None:
        with self._box.lock:
            for entry in self._box.folders.get(self._prefix + "members", {}).values():
                if entry.subject == member:
                    entry.token += 1

    def remove_member(self, member: str) -> None:
        with self._box.lock:
            records = self._box.folders.get(self._prefix + "members", {})
            for uid in [u for u, e in records.items() if e.subject == member]:
                del records[uid]
            if not self._box.folders.get(self._claims(member)):
                self._box.folders.pop(self._claims(member), None)

    def inbox(self) -> list[int]:
        with self._box.lock:
            return sorted(self._box.folders.get("INBOX", {}))

    def headers(self, uids: Sequence[int]) -> dict[int, tuple[str, int]]:
        with self._box.lock:
            inbox = self._box.folders.get("INBOX", {})
            return {uid: (inbox[uid].subject, inbox[uid].stamp) for uid in uids if uid in inbox}

    def try_lock(self, member: str) -> bool:
        with self._box.lock:
            if self._prefix in self._box.locks:
                return False
            self._box.locks[self._prefix] = next(self._box._uids)
            return True

    def unlock(self) -> None:
        with self._box.lock:
            self._box.locks.pop(self._prefix, None)

    def lock_id(self) -> int | None:
        with self._box.lock:
            return self._box.locks.get(self._prefix)

    def break_lock(self) -> None:
        self.unlock()

    def claim(self, uids: Sequence[int], member: str) -> None:
        self._box.move("INBOX", uids, self._claims(member))

    def claimed(self, member: str) -> list[int]:
        with self._box.lock:
            return sorted(self._box.folders.get(self._claims(member), {}))

    def take(self, uids: Sequence[int], dead: str, member: str) -> None:
        self._box.move(self._claims(dead), uids, self._claims(member), bump=True)

    def fetch(self, member: str, uids: Sequence[int]) -> dict[int, tuple[bytes, int]]:
        with self._box.lock:
            folder = self._box.folders.get(self._claims(member), {})
            return {uid: (folder[uid].raw, folder[uid].count) for uid in uids if uid in folder}

    def settle(self, member: str, uids: Sequence[int], folder: str | None) -> None:
        self._box.move(self._claims(member), uids, folder or f"{self._prefix}done-{member}")
