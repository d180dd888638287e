"""What the real (SMTP/IMAP) transports share: TLS, outgoing preparation, and the receiving
core of an IMAP folder (:class:`MailboxReceiver`): which UIDs to fetch, in bounded batches,
how fetched bytes become :class:`IncomingEmail` objects, the resume position with what is
handed out but not yet settled (:class:`ResumePosition`, optionally in a state file), and the
mailbox actions (on-receive, quarantine) that settling queues for the receiving thread.

The rule the receiving core enforces: **no email can stop a receiver.** Whatever one email
holds, parsing it either gives an :class:`~emailmw.Email` or logs it once and settles it (left
in the folder, or moved to the quarantine folder); the position moves past it either way, so
the next email is fetched and handed out.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import json
import os
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

from .._core import carried as _carried
from .._core.config import Options, TLSOptions
from .._core.errors import ConnectionLimitError, ReceiveError
from .._core.log import RefusalLog, get_logger
from .._core.packing import is_batch
from .._core.types import Email
from .base import Done, EmailReceiver, IncomingEmail, Settle
from .budget import ReceiveBudget

__all__ = [
    "ROLES",
    "MAX_BATCH",
    "MAX_BATCH_BYTES",
    "MailboxActions",
    "MailboxReceiver",
    "ResumePosition",
    "unpack_fetched",
    "unpack_logged",
    "Fetched",
    "folder_roles",
    "in_namespace",
    "parse_fetched",
    "raw_size_limit",
    "ssl_context",
    "uid_set",
    "warn_if_unverified",
]

_log = get_logger("transport")

#: At most this many emails, and this many bytes of them, are fetched in one round: a
#: backlog of any size is taken in bounded steps (and at most an eighth of a receive
#: budget's bytes: a fetch holds its batch twice over while it is parsed). A larger email
#: goes alone: a message in parts costs its receiver one part at a time, then the message.
MAX_BATCH: Final = 256
MAX_BATCH_BYTES: Final = 8 * 1024 * 1024
#: How many Message-IDs a receiver remembers having handed out (to tell mail it may have
#: handed out before from new mail after a UIDVALIDITY change).
KNOWN_MESSAGE_IDS: Final = 10_000


def raw_size_limit(max_message_size: int) -> int:
    """The largest stored email (RFC822.SIZE) a receiver downloads: room for a body of
    ``max-message-size`` bytes in base64 (4/3, plus line breaks) and a generous header.
    Larger mail cannot be an emailmw message that fits; it is skipped without downloading."""
    return max_message_size * 3 // 2 + 1024 * 1024


def warn_if_unverified(tls: TLSOptions, server: str) -> None:
    """Log, once per connection set-up, that certificates of ``server`` are not verified."""
    if not tls.verify:
        _log.warning(
            "TLS certificate verification is OFF for %s (tls.verify: false): anyone on the "
            "path can read the password and the mail",
            server,
        )


def ssl_context(tls: TLSOptions, server: str) -> ssl.SSLContext:
    """A client context that verifies certificates and host names unless told not to."""
    context = ssl.create_default_context(cafile=tls.ca_file)
    warn_if_unverified(tls, server)
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def parse_fetched(
    raw: bytes, *, uid: int, where: str, max_size: int, log: RefusalLog | None = None
) -> Email | None:
    """Parse a fetched message that is one email (not a batch); None (logged, on ``log``:
    a receiver's own) for mail that cannot be parsed. Never raises (``_carried``)."""
    log = log or RefusalLog(logger=_log)
    item = _carried.unpack(raw, max_size=max_size)[0] if not is_batch(raw) else None
    if item is None or item.count:
        _poison(log, uid, where, "a batch where one email was expected")
        return None
    if item.email is None:
        _told(log, uid, where, item)
        return None
    return _with_message_id(item.email, uid, where)


def _with_message_id(parsed: Email, uid: int, where: str) -> Email:
    if parsed.message_id is None:
        parsed = parsed.with_message_id(f"<uid{uid}.{time.time_ns()}@{where.replace('/', '.')}>")
    return parsed


def _poison(log: RefusalLog, uid: int, where: str, reason: str) -> None:
    log.refused(
        "poison", f"UID {uid} in {where} is malformed: {reason}", reason,
        time.monotonic(),
    )  # fmt: skip


def _told(log: RefusalLog, uid: int, where: str, item: _carried.Carried) -> None:
    """Log an unusable item: foreign mail at INFO, poison on ``log`` (each kind at once,
    then counted per interval)."""
    if item.verdict == "foreign":
        _log.info("UID %d in %s is not emailmw's: %s", uid, where, item.reason)
    else:
        _poison(log, uid, f"{where}{item.label()}", item.reason)


def unpack_logged(
    raw: bytes, *, uid: int, where: str, max_size: int, log: RefusalLog
) -> list[_carried.Carried]:
    """What one fetched email carries (``_carried.unpack``), its unusable items logged on
    ``log`` (foreign mail at INFO) and a plain email without a Message-ID given one. Never
    raises."""
    found = []
    for item in _carried.unpack(raw, max_size=max_size):
        if item.email is None:
            _told(log, uid, where, item)
            found.append(item)
        elif not item.count and item.email.message_id is None:
            named = _with_message_id(item.email, uid, where)
            found.append(dataclasses.replace(item, email=named))
        else:
            found.append(item)
    return found


class Fetched(NamedTuple):
    """One message as fetched and unpacked (``_carried``): its email's UID; for a part of
    a batch email its index and the number of parts (``parts`` 0: a plain email); the
    parsed email, None when it cannot be used (logged once, with ``verdict`` ``foreign``
    (left alone) or ``poison`` (quarantined))."""

    uid: int
    part: int
    parts: int
    email: Email | None
    verdict: str = "ok"


def unpack_fetched(
    raw_by_uid: dict[int, bytes | None], *, where: str, max_size: int,
    log: RefusalLog | None = None,
) -> list[Fetched]:  # fmt: skip
    """Fetched messages in UID order, each through the one stage (``_carried.unpack``): a
    batch email becomes its parts, each parsed on its own (a part that cannot be parsed is
    one poison part, and stops none of the others). Takes each message out of
    ``raw_by_uid`` as it goes: the raw bytes of a large fetch are not held while the rest
    is parsed. Unusable items are logged on ``log`` (a receiver's own)."""
    log = log or RefusalLog(logger=_log)
    found: list[Fetched] = []
    for uid in sorted(raw_by_uid):
        raw = raw_by_uid.pop(uid)
        if raw is None:
            _log.info("UID %d in %s: gone before its body was fetched", uid, where)
            continue
        for item in _carried.unpack(raw, max_size=max_size):
            email = item.email
            if email is None:
                _told(log, uid, where, item)
            elif not item.count:
                email = _with_message_id(email, uid, where)
            found.append(Fetched(uid, item.index, item.count, email, item.verdict))
    return found


def _uid_list(uids: Sequence[int], most: int = 20) -> str:
    shown = ",".join(map(str, uids[:most]))
    return shown + (f" (and {len(uids) - most} more)" if len(uids) > most else "")


#: the folder roles of RFC 6154 (SPECIAL-USE), lower case
ROLES: Final = frozenset(
    {"\\all", "\\archive", "\\drafts", "\\flagged", "\\junk", "\\sent", "\\trash"}
)


def folder_roles(folders: Iterable[tuple[Iterable[str], str]]) -> dict[str, str]:
    """The folder of each SPECIAL-USE role (RFC 6154) in a ``LIST`` answer (each folder's
    attributes and name): role in lower case -> the first folder carrying it."""
    roles: dict[str, str] = {}
    for attributes, name in folders:
        for attribute in attributes:
            role = attribute.lower()
            if role in ROLES:
                roles.setdefault(role, name)
    return roles


def in_namespace(name: str, prefix: str) -> str:
    """A folder ``name`` as the configuration gives it, under the personal namespace
    ``prefix`` (RFC 2342): ``Done`` is ``INBOX.Done`` on Courier-IMAP, whose own folders
    all live under ``INBOX.``; a name that has the prefix already, and INBOX, stay."""
    if not prefix or name.upper() == "INBOX" or name.upper().startswith(prefix.upper()):
        return name
    return prefix + name


def uid_set(uids: Iterable[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1:3,7:7"``: ranges only (a lone UID as ``n:n``; libcurl hands
    the answer to a FETCH of one lone number to its body callback, cut short)."""
    out: list[str] = []
    start = prev = None
    for uid in sorted(uids):
        if prev is not None and uid == prev + 1:
            prev = uid
            continue
        if start is not None:
            out.append(f"{start}:{prev}")
        start = prev = uid
    if start is not None:
        out.append(f"{start}:{prev}")
    return ",".join(out)


class ResumePosition:
    """Where a receiver continues in one folder of one account, and which UIDs it handed out
    that are not settled yet. Thread-safe (settling happens on application threads).

    ``next_uid`` is the first UID not handed out yet; ``pending`` the UIDs handed out and not
    settled. Without a state file a receiver starts at UIDNEXT (only mail that arrives after
    it starts, as rmw_email). With one, UIDVALIDITY, the last UID handed out and the pending
    UIDs are written atomically (fsync, rename) before a batch is handed out and after every
    settlement, so a restarted receiver hands out exactly what was never handed out, plus
    what was handed out but not settled; of those, only what an application may have had is
    flagged as redelivered: what a consumer took (:meth:`give`, written before the
    application gets it: a subscription's queue reports each take) or a consumer holds
    without reporting takes (a service's request, a face's message). What waited in a queue
    when the process died comes again unflagged: no application had it.

    A changed UIDVALIDITY (the folder was recreated) is logged and the folder read again
    from the start. Of what comes again, only mail this receiver may have handed out before
    is flagged: a Message-ID it handed out (the last :data:`KNOWN_MESSAGE_IDS` of this
    process; in the state file, those pending and those stored in the same second as the
    newest it handed out), or mail the server stored before that second (INTERNALDATE,
    kept in the state file); new mail is not.
    """

    def __init__(self, options: Options, account: str, *, from_start: bool = False) -> None:
        """``from_start``: without a saved position, begin at the folder's first UID rather
        than at UIDNEXT (a reader of the whole folder, such as the pipeline's staging)."""
        self._path = Path(options.state_file) if options.state_file else None
        self._key = {"account": account, "folder": options.folder}
        self._from_start = from_start
        self._lock = threading.Lock()
        self.uidvalidity: int | None = None
        self.next_uid: int | None = None
        self.pending: set[int] = set()
        # UIDs below this (mail read again after a UIDVALIDITY change) and those pending
        # when the state file was read may have been handed out before (see the class)
        self._again_below = 0
        self._again: set[int] = set()
        # Message-IDs handed out (the newest, and the pending ones by UID), and the newest
        # server arrival (ns) handed out: what tells mail seen before from new mail once a
        # UIDVALIDITY change has made UIDs meaningless
        self._known: OrderedDict[str, None] = OrderedDict()
        self._pending_ids: dict[int, str] = {}
        self.newest_arrival: int | None = None
        self._newest_ids: list[str] = []  # those handed out that arrived at newest_arrival
        self._arrived_before: int | None = None  # newest_arrival when UIDVALIDITY changed
        # the settled parts of pending batch emails: UID -> {part index: outcome}
        self._parts: dict[int, dict[int, str]] = {}
        # what an application may have had of pending emails: UID -> part indexes (0: a
        # plain email); and, after a restart, what the state file said of the pending
        # (None: a state file that did not say: everything pending counts as given)
        self._given: dict[int, set[int]] = {}
        self._given_before: dict[int, set[int]] | None = {}

    def _load(self) -> dict[str, Any] | None:
        if self._path is None:
            return None
        try:
            data = json.loads(self._path.read_text())
            if any(data.get(k) != v for k, v in self._key.items()):
                _log.warning(
                    "state file %s belongs to %s/%s: starting at new mail",
                    self._path,
                    data.get("account"),
                    data.get("folder"),
                )
                return None
            arrival = data.get("newest_arrival")
            return {
                "uidvalidity": int(data["uidvalidity"]),
                "last_uid": int(data["last_uid"]),
                "pending": sorted({int(uid) for uid in data.get("pending", ())}),
                "pending_ids": {
                    int(uid): str(mid) for uid, mid in dict(data.get("pending_ids", {})).items()
                },
                "newest_arrival": None if arrival is None else int(arrival),
                "newest_ids": [str(m) for m in data.get("newest_ids", ())][:KNOWN_MESSAGE_IDS],
                "parts": {
                    int(uid): {int(i): str(o) for i, o in dict(done).items()}
                    for uid, done in dict(data.get("parts", {})).items()
                },
                "given": None
                if "given" not in data
                else {
                    int(uid): {int(i) for i in parts} for uid, parts in dict(data["given"]).items()
                },
            }
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            _log.warning("state file %s unreadable (%s): starting at new mail", self._path, exc)
            return None

    def start(self, uidvalidity: int, uidnext: int) -> list[int] | None:
        """After (re)selecting the folder with these values: set :attr:`next_uid` and return
        the UIDs below it to hand out again (those pending in the state file); None when
        nothing changed (a reselect or a reconnect: what is pending is still in the
        application's hands)."""
        with self._lock:
            if self.uidvalidity == uidvalidity and self.next_uid is not None:
                return None
            if self.uidvalidity is not None:
                _log.warning(
                    "UIDVALIDITY changed (%d -> %d): reading the folder from the start",
                    self.uidvalidity,
                    uidvalidity,
                )
                self._restart(uidvalidity, uidnext)
                return []
            saved = self._load()
            if saved is None:
                self._set(uidvalidity, 1 if self._from_start else uidnext, set())
                return []
            self.newest_arrival = saved["newest_arrival"]
            self._newest_ids = saved["newest_ids"]
            for message_id in (*saved["pending_ids"].values(), *self._newest_ids):
                self._remember(message_id)
            if saved["uidvalidity"] != uidvalidity:
                _log.warning(
                    "UIDVALIDITY changed since the state file was written (%d -> %d): "
                    "reading the folder from the start",
                    saved["uidvalidity"],
                    uidvalidity,
                )
                self._restart(uidvalidity, uidnext)
                return []
            pending = {uid for uid in saved["pending"] if uid <= saved["last_uid"]}
            self._again = set(pending)
            self._pending_ids = {u: m for u, m in saved["pending_ids"].items() if u in pending}
            self._parts = {u: p for u, p in saved["parts"].items() if u in pending}
            given = saved["given"]
            self._given_before = None if given is None else {
                u: p for u, p in given.items() if u in pending
            }  # fmt: skip
            self._given = {u: set(p) for u, p in (self._given_before or {}).items()}
            self._set(uidvalidity, saved["last_uid"] + 1, pending)
            return sorted(pending)

    def _restart(self, uidvalidity: int, uidnext: int) -> None:
        self._again_below = uidnext
        self._again = set()
        self._pending_ids = {}
        self._parts = {}
        self._given = {}
        self._given_before = {}
        self._arrived_before = self.newest_arrival
        self._set(uidvalidity, 1, set())

    def _remember(self, message_id: str) -> None:
        known = self._known
        known[message_id] = None
        known.move_to_end(message_id)
        if len(known) > KNOWN_MESSAGE_IDS:
            known.popitem(last=False)

    def redelivered(
        self, uid: int, message_id: str | None = None, arrival: int | None = None, part: int = 0
    ) -> bool:
        """True when ``uid`` (part ``part`` of it; its Message-ID, its server arrival in ns)
        may have reached an application before (see the class docstring)."""
        if uid in self._again:
            given = self._given_before
            return given is None or part in given.get(uid, ())
        if uid >= self._again_below:
            return False
        if message_id is not None and message_id in self._known:
            return True
        before = self._arrived_before
        return arrival is not None and before is not None and arrival < before

    def handed_before(self, uid: int) -> bool:
        """True when ``uid`` was handed out by this receiver before a restart and not
        settled (pending in the state file): its signature may have been accepted then,
        so security takes it for a repeat, never a replay (:attr:`IncomingEmail.returned`),
        whether or not an application had it (:meth:`redelivered` says that)."""
        return uid in self._again

    def handing_out(
        self,
        handed: Iterable[int],
        settled: Iterable[int] = (),
        what: Mapping[int, tuple[str | None, int | None]] | None = None,
    ) -> None:
        """``handed`` go out now (pending until settled); ``settled`` were dealt with here
        (unparseable mail); ``what``: the Message-ID and server arrival of each handed out.
        Written before the emails reach anyone."""
        handed, settled = set(handed), set(settled)
        with self._lock:
            assert self.uidvalidity is not None
            assert self.next_uid is not None
            for uid, (message_id, arrival) in (what or {}).items():
                if message_id is not None:
                    self._remember(message_id)
                    self._pending_ids[uid] = message_id
                if arrival is not None and (self.newest_arrival or 0) < arrival:
                    self.newest_arrival, self._newest_ids = arrival, []
                if message_id is not None and arrival == self.newest_arrival:
                    self._newest_ids.append(message_id)
                    del self._newest_ids[:-KNOWN_MESSAGE_IDS]
            last = max(handed | settled, default=0)
            self._set(self.uidvalidity, max(self.next_uid, last + 1), self.pending | handed)

    def give(self, uidvalidity: int, uid: int, part: int) -> None:
        """Part ``part`` of ``uid`` (0: a plain email) goes to an application now: written
        (with a state file) before it does, once."""
        with self._lock:
            if uidvalidity != self.uidvalidity or uid not in self.pending:
                return
            given = self._given.setdefault(uid, set())
            if part in given:
                return
            given.add(part)
            if self._path is not None:
                assert self.next_uid is not None
                self._set(uidvalidity, self.next_uid, self.pending)

    def parts_settled(self, uid: int) -> dict[int, str]:
        """The parts of batch email ``uid`` settled already (index -> outcome): after a
        restart, those are not handed out again."""
        with self._lock:
            return dict(self._parts.get(uid, {}))

    def settle_part(
        self, uidvalidity: int, uid: int, index: int, count: int, outcome: str
    ) -> str | None:
        """Part ``index`` of the ``count`` parts of batch email ``uid`` is done with
        (``outcome``); recorded (in the state file) at once. Returns the outcome of the
        whole email once every part is settled, else None: ``quarantine`` when a part was
        quarantined (the email is then never deleted: the part stays readable), else
        ``leave`` when a part was left (or nacked: not processed here; the email stays
        where it is), else ``ack``."""
        with self._lock:
            if uidvalidity != self.uidvalidity or uid not in self.pending:
                return None
            done = self._parts.setdefault(uid, {})
            if index in done:
                return None
            done[index] = outcome
            if len(done) < count:
                assert self.next_uid is not None
                self._set(uidvalidity, self.next_uid, self.pending)
                return None
            outcomes = set(done.values())
        if "quarantine" in outcomes:
            return "quarantine"
        return "leave" if outcomes & {"leave", "nack"} else "ack"

    def settle(self, uidvalidity: int, uid: int) -> bool:
        """``uid`` (of the folder as it was with ``uidvalidity``) is done with; False when
        it was not pending (settled already, or from before a UIDVALIDITY change)."""
        with self._lock:
            if uidvalidity != self.uidvalidity or uid not in self.pending:
                return False
            self._again.discard(uid)
            self._pending_ids.pop(uid, None)
            self._parts.pop(uid, None)
            self._given.pop(uid, None)
            assert self.next_uid is not None
            self._set(uidvalidity, self.next_uid, self.pending - {uid})
            return True

    def _set(self, uidvalidity: int, next_uid: int, pending: set[int]) -> None:
        self.uidvalidity, self.next_uid, self.pending = uidvalidity, next_uid, pending
        if self._path is None:
            return
        data = {
            **self._key,
            "uidvalidity": uidvalidity,
            "last_uid": next_uid - 1,
            "pending": sorted(pending),
            "pending_ids": {str(u): m for u, m in self._pending_ids.items() if u in pending},
            "newest_arrival": self.newest_arrival,
            "newest_ids": self._newest_ids,
            "parts": {
                str(u): {str(i): o for i, o in done.items()}
                for u, done in self._parts.items()
                if u in pending
            },
            "given": {str(u): sorted(p) for u, p in self._given.items() if u in pending},
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=f".{self._path.name}.")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(data, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self._path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


class MailboxActions:
    """Flags, deletions and moves that settling queues (from any thread) and the receiving
    thread applies: IMAP connections are not thread-safe.

    ``ack`` applies the ``on-receive`` action (nothing for ``keep``); ``quarantine`` moves to
    the ``quarantine`` folder when one is configured; ``leave`` does nothing. An action that
    fails (a folder that cannot be written) is kept and tried again at the first
    :meth:`take` after :meth:`failed`'s backoff (1 s, doubling to 60 s), until it works: the
    mail stays where it is meanwhile. Each queued item may carry ``then``, called once its
    action was applied (a quarantine counted only once done). Pure: times are given;
    thread-safe.
    """

    _RETRY_FIRST: Final = 1.0
    _RETRY_MAX: Final = 60.0

    def __init__(self, options: Options) -> None:
        self._by_outcome: dict[str, str | None] = {
            "ack": None if options.on_receive == "keep" else options.on_receive,
            "quarantine": f"move:{options.quarantine}" if options.quarantine else None,
            "leave": None,
        }
        self._lock = threading.Lock()
        self._queued: dict[str, list[tuple[int, Done | None]]] = {}
        # action -> (when it may be tried again, the backoff then)
        self._failing: dict[str, tuple[float, float]] = {}

    def queue(self, uid: int, outcome: str, then: Done | None = None) -> bool:
        """Queue what ``outcome`` means for ``uid``; True when there is something to do."""
        action = self._by_outcome.get(outcome)
        if action is None:
            return False
        with self._lock:
            self._queued.setdefault(action, []).append((uid, then))
        return True

    def take(self, now: float) -> list[tuple[str, list[tuple[int, Done | None]]]]:
        """What is queued and due at ``now``, as (action, [(UID, then)]), emptied (a failing
        action waits for its backoff)."""
        with self._lock:
            due = [a for a in self._queued if self._failing.get(a, (0.0, 0.0))[0] <= now]
            return [(action, self._queued.pop(action)) for action in due]

    def failed(self, action: str, items: Sequence[tuple[int, Done | None]], now: float) -> bool:
        """``action`` on ``items`` failed at ``now``: queued again, after a backoff. True the
        first time it fails (since it last worked): that is the time to say so."""
        with self._lock:
            self._queued.setdefault(action, []).extend(items)
            _, backoff = self._failing.get(action, (0.0, 0.0))
            backoff = min(self._RETRY_MAX, backoff * 2) if backoff else self._RETRY_FIRST
            self._failing[action] = (now + backoff, backoff)
            return backoff == self._RETRY_FIRST

    def retry_at(self) -> float | None:
        """When the first failing action that still has work is due again (None: none)."""
        with self._lock:
            due = [self._failing[a][0] for a in self._queued if a in self._failing]
        return min(due, default=None)

    def worked(self, action: str) -> bool:
        """``action`` was applied; True when it had been failing (time to say it works)."""
        with self._lock:
            return self._failing.pop(action, None) is not None

    def forget(self, keep: Callable[[int], bool]) -> None:
        """Drop what is queued for UIDs ``keep`` says no to (a folder recreated)."""
        with self._lock:
            for action, items in list(self._queued.items()):
                self._queued[action] = [(u, t) for u, t in items if keep(u)]


class MailboxReceiver(EmailReceiver):
    """The receiving core both IMAP transports share (see the module docstring).

    A subclass connects, waits its own way and calls :meth:`_started` after selecting the
    folder, :meth:`_fetch_new` to take the next batch and :meth:`_apply_actions` from its
    receiving thread; it provides the IMAP commands :meth:`_sizes`, :meth:`_bodies` and
    :meth:`_apply`. Settling (from any thread) sets :attr:`_nudge` when a mailbox action is
    queued, so a waiting receiver applies it soon; :meth:`wakeup` sets it too, with
    :attr:`_woken`, which makes the waiting call return.

    With a ``budget`` (the context's :class:`~.budget.ReceiveBudget`) each email is
    reserved before its body is downloaded and released when it is settled; when the next
    one does not fit, :meth:`_fetch_new` stops there and :attr:`_waiting_for_room` holds
    until enough is settled (the budget nudges the receiver): the mail waits on the server.
    """

    #: held while receiving or running a command on the connection (made by a subclass)
    _lock: threading.Lock

    def __init__(self, options: Options, account: str, budget: ReceiveBudget | None = None) -> None:
        self._options = options
        self._where = f"{account}/{options.folder}"
        self._position = ResumePosition(options, account)
        self._actions = MailboxActions(options)
        self._raw_limit = raw_size_limit(options.max_message_size)
        self._refetch: list[int] = []
        self._nudge = threading.Event()
        self._woken = False
        self._closed = False
        self._budget = budget
        self._reserved: dict[tuple[int, int], int] = {}  # (UIDVALIDITY, UID) -> size
        self._refused: int | None = None  # the size the budget refused last (back-pressure)
        self._unusable_log = RefusalLog(logger=_log)
        # the ``then`` callbacks of settled parts of batch emails, until the email settles
        self._part_thens: dict[tuple[int, int], list[Done]] = {}
        self._roles: dict[str, str] | None = None  # SPECIAL-USE role -> folder, once asked
        self._personal: str | None = None  # the personal namespace's prefix, once asked
        if budget is not None:
            budget.add_listener(self._room_given_back)

    def _room_given_back(self) -> None:
        if self._refused is not None:
            self._nudge.set()

    @property
    def _waiting_for_room(self) -> bool:
        """True while the next email does not fit in the receive budget."""
        refused = self._refused
        return refused is not None and self._budget is not None and not self._budget.fits(refused)

    def _release(self, uidvalidity: int, uid: int) -> None:
        size = self._reserved.pop((uidvalidity, uid), None)
        if size is not None and self._budget is not None:
            self._budget.release(size)

    def _stop_budget(self) -> None:
        """Give back every reservation (at close)."""
        if self._budget is not None:
            self._budget.remove_listener(self._room_given_back)
            for key in list(self._reserved):
                self._release(*key)

    # -- what a subclass provides ---------------------------------------------------------

    @abc.abstractmethod
    def _sizes(self, uid_set: str) -> dict[int, tuple[int, int | None]]:
        """``UID FETCH uid_set (UID RFC822.SIZE INTERNALDATE)``: the size of each message in
        the set, and when the server stored it (ns since the epoch; None when unreadable)."""

    @abc.abstractmethod
    def _bodies(self, uids: list[int]) -> dict[int, bytes | None]:
        """``UID FETCH uids (BODY.PEEK[])``: the messages, unchanged on the server."""

    @abc.abstractmethod
    def _apply(self, action: str, uids: list[int]) -> None:
        """Apply ``seen``, ``delete`` or ``move:FOLDER`` to ``uids`` (raises on failure);
        ``FOLDER`` goes through :meth:`_role_folder` (a role such as ``\\Trash``)."""

    @abc.abstractmethod
    def _hang_up(self) -> None:
        """Apply what was settled, then close the connection, the position kept (call
        with ``_lock`` held): the next receive connects again."""

    @abc.abstractmethod
    def _list_folders(self) -> list[tuple[tuple[str, ...], str]]:
        """``LIST "" "*"``: each folder's attributes and name, as the server gives them."""

    @abc.abstractmethod
    def _personal_prefix(self) -> str:
        """The prefix of the personal namespace (RFC 2342 NAMESPACE): ``""`` on most
        servers, ``INBOX.`` on Courier-IMAP."""

    def _role_folder(self, name: str) -> str:
        """``name`` under the personal namespace (:func:`in_namespace`), or for a role
        (``\\Trash``, ``\\Archive`` ...: RFC 6154 SPECIAL-USE) the folder the server gives
        that role (asked once); a role no folder has is a :class:`ReceiveError` saying to
        name the folder."""
        if not name.startswith("\\"):
            if self._personal is None:
                self._personal = self._personal_prefix()
            return in_namespace(name, self._personal)
        if self._roles is None:
            self._roles = folder_roles(self._list_folders())
        found = self._roles.get(name.lower())
        if found is None:
            raise ReceiveError(
                f"no folder of {self._where.partition('/')[0]} has the role {name} (RFC 6154 "
                "SPECIAL-USE): name the folder itself, e.g. move:Trash"
            )
        return found

    # -- the shared core ------------------------------------------------------------------

    def wakeup(self) -> None:
        self._woken = True
        self._nudge.set()

    def disconnect(self) -> bool:
        if not self._lock.acquire(blocking=False):
            return False  # (a receive or a command is under way)
        try:
            if not self._closed:
                self._hang_up()
            return True
        finally:
            self._lock.release()

    def _take_wakeup(self) -> bool:
        """True (once) when :meth:`wakeup` or :meth:`close` asked the waiting call to return."""
        if self._woken or self._closed:
            self._woken = False
            self._nudge.clear()
            return True
        return False

    def _connect_later(self, exc: ConnectionLimitError) -> None:
        """The account had no free connection when this receiver was made: it connects at
        its first receive instead (the polling thread retries with its backoff), and hands
        out mail from then on; said once. A process started while its account is full
        waits for a connection instead of failing."""
        _log.warning("%s: %s; this receiver connects once a connection is free, and "
                     "receives the mail that arrives from then on", self._where, exc)  # fmt: skip

    def _started(self, uidvalidity: int, uidnext: int) -> int:
        """The folder is selected with these values; returns the first UID to fetch."""
        before = self._position.uidvalidity
        again = self._position.start(uidvalidity, uidnext)
        if before is not None and before != uidvalidity:
            self._actions.forget(lambda uid: False)  # UIDs of the folder as it was
        if again is None:
            assert self._position.next_uid is not None
            return self._position.next_uid
        self._refetch = again
        if again:
            _log.info(
                "%s: handing out again %d email(s) not settled before the last stop",
                self._where,
                len(self._refetch),
            )
        assert self._position.next_uid is not None
        return self._position.next_uid

    def _fetch_new(self) -> tuple[list[IncomingEmail], bool]:
        """The next batch of new mail (plus mail to hand out again), at most
        :data:`MAX_BATCH` emails and :data:`MAX_BATCH_BYTES`; True when more is waiting."""
        position = self._position
        first = position.next_uid
        assert first is not None
        assert position.uidvalidity is not None
        again = set(self._refetch)
        spec = ",".join(filter(None, (uid_set(again), f"{first}:*")))
        listed = {uid: x for uid, x in self._sizes(spec).items() if uid >= first or uid in again}
        sizes = {uid: size for uid, (size, _) in listed.items()}
        if not sizes:
            self._refetch = []
            return [], False
        batch: list[int] = []
        oversize: list[int] = []
        total = 0
        self._refused = None
        most = MAX_BATCH_BYTES
        if self._budget is not None:
            most = min(most, self._budget.max_bytes // 8)
        for uid in sorted(sizes):
            size = sizes[uid]
            if size > self._raw_limit:
                oversize.append(uid)
                continue
            if batch and (len(batch) >= MAX_BATCH or total + size > most):
                break
            if self._budget is not None and not self._budget.reserve(size):
                self._refused = size  # back-pressure: the rest waits on the server
                break
            self._reserved[(position.uidvalidity, uid)] = size
            batch.append(uid)
            total += size
        if not batch and not oversize:
            return [], True
        last = max(batch + oversize)
        oversize = [uid for uid in oversize if uid <= last]  # the rest go with a later batch
        for uid in oversize:
            _log.warning(
                "UID %d in %s is %d bytes, more than a message of max-message-size can be "
                "(%d): not downloaded",
                uid,
                self._where,
                sizes[uid],
                self._raw_limit,
            )
        more = any(uid > last for uid in sizes)
        raw_by_uid = self._bodies(batch) if batch else {}
        fetched = unpack_fetched(
            {uid: raw_by_uid.pop(uid, None) for uid in batch},
            where=self._where,
            max_size=self._options.max_message_size,
            log=self._unusable_log,
        )
        usable = {f.uid for f in fetched if f.email is not None or f.parts}
        unusable = oversize + sorted(set(batch) - usable)
        handed: list[IncomingEmail] = []
        broken_parts: list[Fetched] = []
        what: dict[int, tuple[str | None, int | None]] = {}
        for item in fetched:
            if item.uid not in usable:
                continue
            arrival = listed[item.uid][1]
            if item.parts and item.part in position.parts_settled(item.uid):
                continue  # settled before a restart: not handed out again
            if item.email is None:
                broken_parts.append(item)
                continue
            what.setdefault(item.uid, (item.email.message_id, arrival))
            settle: Settle = functools.partial(self._settle, position.uidvalidity, item.uid)
            if item.parts:
                settle = functools.partial(
                    self._settle_part, position.uidvalidity, item.uid, item.part, item.parts
                )
            give = None
            if self._options.state_file:  # (what reached an application: durable)
                give = functools.partial(position.give, position.uidvalidity, item.uid, item.part)
            handed.append(
                IncomingEmail(
                    item.email,
                    redelivered=position.redelivered(
                        item.uid, item.email.message_id, arrival, item.part
                    ),
                    settle=settle,
                    arrival_ns=arrival,
                    in_batch=item.parts > 0,
                    give=give,
                    returned=position.handed_before(item.uid),
                )
            )
        position.handing_out(sorted(usable), unusable, what)
        self._refetch = [uid for uid in self._refetch if uid > last]
        for uid in unusable:
            self._release(position.uidvalidity, uid)
            self._actions.queue(uid, "quarantine")
        for item in broken_parts:
            self._settle_part(
                position.uidvalidity, item.uid, item.part, item.parts, "quarantine", None
            )
        return handed, more

    def _settle_part(
        self, uidvalidity: int, uid: int, index: int, count: int, outcome: str,
        then: Done | None, reason: str = "",
    ) -> None:  # fmt: skip
        """A part of batch email ``uid`` is settled; the email is, once all its parts are
        (``ResumePosition.settle_part`` says how)."""
        if then is not None:
            self._part_thens.setdefault((uidvalidity, uid), []).append(then)
        whole = self._position.settle_part(uidvalidity, uid, index, count, outcome)
        if whole is None:
            return
        thens = self._part_thens.pop((uidvalidity, uid), [])

        def all_done() -> None:
            for done in thens:
                done()

        self._settle(uidvalidity, uid, whole, all_done if thens else None)

    def _settle(
        self, uidvalidity: int, uid: int, outcome: str, then: Done | None, reason: str = ""
    ) -> None:
        self._release(uidvalidity, uid)
        if self._position.settle(uidvalidity, uid) and self._actions.queue(uid, outcome, then):
            self._nudge.set()

    def _apply_actions(self) -> None:
        """Apply the queued mailbox actions (on the receiving thread). One that fails leaves
        the UIDs where they are and is tried again after a backoff (logged when it starts
        failing and when it works again, not at each try)."""
        for action, items in self._actions.take(time.monotonic()):
            uids = sorted({uid for uid, _ in items})
            try:
                self._apply(action, uids)
            except Exception as exc:  # noqa: BLE001 - a failed flag or move stops nothing
                if self._actions.failed(action, items, time.monotonic()):
                    _log.warning(
                        "%s of UIDs %s in %s failed: %s (the mail stays where it is; tried "
                        "again every minute or less)",
                        action, _uid_list(uids), self._where, exc,
                    )  # fmt: skip
                continue
            if self._actions.worked(action):
                _log.warning("%s works again in %s", action, self._where)
            for _, then in items:
                if then is not None:
                    then()
