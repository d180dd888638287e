"""One group member's receiver: the protocol of ``model`` run round by round against a
:class:`~.model.GroupStore`, as an :class:`~emailmw.EmailReceiver` whose every email is
fenced by the member's lease when it is handed to the application
(``docs/delivery-modes.md``)."""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from ..._core.carried import Carried
from ..._core.errors import ClosedError, ConfigError
from ..._core.log import get_logger
from ..._core.types import Email
from ..._core.wire import (
    HEADER_PUBLISHER_GID,
    HEADER_PUBLISHER_SEQUENCE_NUMBER,
    publisher_sequence,
)
from ..base import ClaimState, Done, EmailReceiver, IncomingEmail, Settle
from ..budget import ReceiveBudget
from .model import (
    GroupSettings,
    GroupStore,
    Head,
    Lease,
    Liveness,
    MemberRecord,
    check_group,
    order_gaps,
    part_key,
    plan,
)

__all__ = ["GroupReceiver", "Unpack", "Wants"]

_log = get_logger("groups")
#: a member's second connection heartbeats when the rounds have not for this many heartbeats
_BACKUP_BEAT: Final = 1.5

#: what a fetched email (bytes, UID) carries (``_carried.unpack``; unusable items logged)
Unpack = Callable[[bytes, int], list[Carried]]
#: whether a member claims an inbox message, from what it read of it
Wants = Callable[[Head], bool]


@dataclass(slots=True)
class _Held:
    """A claim handed out and not settled yet: one message, or a batch email whose messages
    go out one by one as the member has room (``waiting``), each settled on its own; the
    email settles once all are (``open`` counts those not settled)."""

    size: int
    delivered: int
    handed_at: float  # when it (or its latest message) went to the consumer, or settled
    given_at: float | None = None  # when an application got it (deliver() succeeded)
    taken: int = 0  # its messages an application took (deliver() succeeded)
    taken_at: float = 0.0  # when an application last took or settled one of its messages
    settling: bool = False
    redelivered: bool = False
    count: int = 0  # a batch email: how many messages it carries (0: one)
    # (a batch email) how many of its messages, from the first, applications got before this
    # member fetched it (the store's record); and how many the store records now
    before: int = 0
    recorded: int = 0
    open: int = 1  # messages not settled yet
    waiting: deque[Carried] = field(default_factory=deque)  # not handed out yet
    done: dict[int, str] = field(default_factory=dict)  # settled parts: index -> outcome
    raws: dict[int, bytes] = field(default_factory=dict)  # handed-out parts' bytes
    thens: list[Done] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    part_of: str = ""  # a part of a message sent as several emails: the whole's Message-ID

    @property
    def out(self) -> int:
        """Messages with the consumer: handed out, not settled."""
        return self.open - len(self.waiting)

    @property
    def with_application(self) -> int:
        """Of those, the messages an application took (in a callback now)."""
        if self.settling:
            return 0
        return max(0, self.taken - len(self.done)) if self.count else min(self.taken, 1)


class _GroupClaim:
    """The :class:`~emailmw._transport.base.Claim` of one handed-out message (``index``:
    which message of a batch email; None for an email that is one message)."""

    __slots__ = ("_index", "_key", "_receiver")

    def __init__(self, receiver: GroupReceiver, key: tuple[str, int], index: int | None) -> None:
        self._receiver = receiver
        self._key = key
        self._index = index

    def state(self) -> ClaimState:
        return self._receiver._claim_state(self._key)

    def deliver(self) -> int | None:
        return self._receiver._deliver(self._key, self._index)


class GroupReceiver(EmailReceiver):
    """The receiver of one group member: runs the protocol round by round and hands out
    the messages it holds, each fenced by its lease (:class:`Lease`) and settled
    (acknowledged, left, quarantined) into the done or quarantine folder. Only messages
    ``wants`` says yes to are claimed.

    ``capacity``: what its consumer holds at most (a subscription's depth): the member
    hands out no more than that and ``prefetch`` unsettled (a batch email's messages one
    by one as room frees: it is claimed whole); ``budget``: the context's
    :class:`~emailmw._transport.budget.ReceiveBudget`, reserved per message handed out;
    ``on_change``: called when what the consumer may hand out changes (a lease confirmed
    again, claims lost), so it looks again. With ``settle_store`` (a second connection),
    settlements, heartbeats and delivery records run on a thread of their own; without, on
    the round's. Thread-safe as a receiver is (``wakeup``/``close`` from any thread,
    settling and delivering from any thread)."""

    def __init__(
        self,
        store: GroupStore,
        *,
        mode: str,
        group: str,
        wants: Wants,
        unpack: Unpack,
        settings: GroupSettings | None = None,
        quarantine: str | None = None,
        settle_store: GroupStore | None = None,
        capacity: int | None = None,
        budget: ReceiveBudget | None = None,
        on_change: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_group(mode, group)
        if mode == "topic":
            raise ConfigError("a group receiver serves the stateful and stateless modes")
        self._store = store
        self._settle_store = settle_store or store
        self._mode = mode
        self.group = group
        self._wants = wants
        self._unpack = unpack
        self.settings = settings or GroupSettings()
        self._limit = min(self.settings.prefetch, capacity or self.settings.prefetch)
        self._budget = budget
        self._on_change = on_change
        self._clock = clock
        self._quarantine = quarantine
        self.member = _new_member()
        self._record: MemberRecord | None = None
        if store.slow_release and self.settings.expiry < 2.5 * store.slow_release:
            _log.warning(
                "group %s: this server takes %.0f s to release the claim lock (a folder "
                "deletion) at every claim round: an expiry of %.1f s sees live members dead "
                "(their claims taken, handed out again); give the group an expiry of %.0f s "
                "or more", group, store.slow_release, self.settings.expiry,
                2.5 * store.slow_release,
            )  # fmt: skip
        self._liveness = Liveness(self.settings.expiry)
        self._lease = Lease(self.settings.expiry)
        self._lock = threading.Lock()  # what is held and settling
        self._store_lock = threading.RLock()  # the round's connection
        self._settle_lock = self._store_lock if settle_store is None else threading.RLock()
        self._beat_lock = threading.Lock()
        self._beat_on = False
        self._last_beat: tuple[float, float] | None = None  # (started, completed)
        self._wake = threading.Event()
        self._closed = False
        self._settlements: list[tuple[tuple[str, int], str, Done | None]] = []
        # messages of batch emails to offer again on their own (a nack): (raw, deliveries)
        self._offers: list[tuple[bytes, int]] = []
        # (member, uid) -> what is handed out and not settled yet
        self._held: dict[tuple[str, int], _Held] = {}
        # settled, and still listed by the round's connection (another session's move may
        # reach its view late): not handed out again meanwhile
        self._gone: set[tuple[str, int]] = set()
        self._seen_uid = 0
        # inbox UID wanted -> (first seen, Source-Timestamp); a batch email's message count;
        # each one's share key; the parts of messages (never stolen: one member joins them)
        self._waiting: dict[int, tuple[float, int]] = {}
        self._weights: dict[int, int] = {}
        self._keys: dict[int, int] = {}
        self._parts: set[int] = set()
        # (stateful) the waiting UIDs' heads, and each publisher's next sequence number
        # after what this member claimed or handed out while active (see order_gaps)
        self._heads: dict[int, Head] = {}
        self._next_seq: dict[str, int] = {}
        # since when it holds parts of a message not whole yet; when it last looked whether
        # another member holds the rest (a message split across members: see _split)
        self._joining_since: float | None = None
        self._split_looked = -1e9
        self._split_wanted = False
        self._unfetched = False  # its claims folder may hold what it has not handed out
        self._in_lapse = False
        self._unnamed_since: float | None = None  # since when the lock names no holder
        self._busy_since: float | None = None  # since when this member fails to take it
        self._lock_looked = -1e9  # when it last watched the lock (first live member)
        self._unlock_owed: MemberRecord | None = None  # a release of the lock that failed
        self._orphans: list[str] = []  # members whose claims folder has no record
        self._orphans_looked = -1e9
        self._last_members = -1e9
        self._dead: list[MemberRecord] = []
        self._alive: list[str] = []
        self._joined = False
        self._healthy = True
        self._last_take = clock()  # when an application last took a message of it
        self._join_started = -1e9  # when its latest join began
        self._rest_until = -1e9  # (its application took nothing: it joins no sooner)
        #: what this member did: processed (acknowledged), taken over, claimed, rejoined,
        #: lock takings and busy tries, claims it lost to others, leases found lapsed
        self.counts: dict[str, int] = dict.fromkeys(
            ("claimed", "taken", "acked", "rejoined", "locked", "lock_busy", "lost",
             "lapsed", "delivered", "gave_back"), 0,
        )  # fmt: skip
        self._settle_due = threading.Event()
        self._settle_thread: threading.Thread | None = None
        if settle_store is not None:
            self._settle_thread = threading.Thread(
                target=self._settle_loop, name=f"emailmw-group-{group}-settle", daemon=True
            )
            self._settle_thread.start()

    def __repr__(self) -> str:
        return f"<GroupReceiver {self._mode} {self.group}/{self.member}>"

    @property
    def joined(self) -> bool:
        """True once this member's record is in the group."""
        return self._joined

    @property
    def alive(self) -> list[str]:
        """The live members as this one saw them last, in order."""
        return list(self._alive)

    @property
    def holding(self) -> int:
        """Emails handed out and not settled yet."""
        with self._lock:
            return len(self._held)

    def _joining(self) -> bool:
        """Whether it holds parts of a message its consumer has not had whole yet (call
        with the lock): the rest of them are claimed and fetched whatever its room."""
        return any(h.part_of and h.given_at is None for h in self._held.values())

    def _messages_held(self) -> tuple[int, int]:
        """(messages held and not settled, of those with the consumer): call with the lock."""
        held = out = 0
        for item in self._held.values():
            held += item.open
            out += item.out
        return held, out

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    # ---------------------------------------------------------------- the fence

    def _claim_state(self, key: tuple[str, int]) -> ClaimState:
        with self._lock:
            if key not in self._held:
                return "lost"
        if self._lease.valid(self._clock()):
            return "ready"
        self._wake.set()  # the round checks its claims under the lock
        return "wait"

    def _deliver(self, key: tuple[str, int], index: int | None = None) -> int | None:
        """Record that the application gets claim ``key`` (``index``: that message of a
        batch email) now (see :class:`Lease`): its delivery count, or None when it may not
        have it now.

        A batch email's messages go out one by one, in order, and the record says how many
        of them applications got (``given``, a prefix): a message past what was recorded
        before this member had it comes with count 1, unflagged, whatever happened to the
        ones before it (was: the email's count for all, 54 of 100 flagged after a member
        was killed that no application had). The record reaches the store before the
        application gets the message, as a single email's does."""
        with self._lock:
            held = self._held.get(key)
        if held is None or not self._lease.valid(self._clock()):
            self._wake.set()
            return None
        batch = index is not None and held.count > 0
        first = held.given_at is None
        given = max(held.recorded, index + 1) if batch and index is not None else 0
        count = held.delivered + 1 if first else held.delivered
        if not first and given <= held.recorded:  # (recorded already: a message before)
            with self._lock:
                self._took(held)
            return self._message_count(held, index)
        try:
            with self._settle_lock:
                if self._closed:
                    return None
                landed = self._settle_store.mark(key[0], key[1], count, given)
        except Exception as exc:  # noqa: BLE001 - the round checks the claims again
            _log.debug("group %s: recording a delivery failed (%s)", self.group, exc)
            self._lease.lapse()
            self._wake.set()
            return None
        if not landed:  # taken over already, whatever the lease said (a pause, a clock)
            self._lose([key], "another member took it over (its delivery record found it gone)")
            self._lease.lapse()  # (its other claims: checked under the lock before more)
            self._wake.set()
            return None
        # the record reached the store while nobody could take the claim over: a member
        # that takes it later sees the count (one that completes later may have raced a
        # takeover: not handed out; the count stays raised, which errs on the side of a flag)
        if not self._lease.valid(self._clock()):
            self._wake.set()
            return None
        with self._lock:
            if key not in self._held:
                return None
            held.recorded = max(held.recorded, given)
            if first:
                held.delivered, held.given_at = count, self._clock()
            self._took(held)
            self.counts["delivered"] += 1
        return self._message_count(held, index)

    @staticmethod
    def _message_count(held: _Held, index: int | None) -> int:
        """The delivery count of ``held``'s message ``index`` (a batch's: 1 for one no
        application had before this member; the email's count for the others)."""
        if index is None or not held.count or index < held.before:
            return held.delivered
        return 1

    def progress(self) -> int:
        """The application is still working on the messages it took (JetStream's
        AckProgress, a callback longer than ``ack_timeout``): their ``ack_timeout`` counts
        again from now, and so does the wait of what is queued behind them; a working
        member is never judged hung. How many messages the application holds. Thread-safe
        (any thread, a callback's included)."""
        now = self._clock()
        with self._lock:
            holding = [h for h in self._held.values() if h.with_application]
            for held in holding:
                held.taken_at = max(held.taken_at, now)
            if holding:
                self._last_take = max(self._last_take, now)
        return len(holding)

    def _took(self, held: _Held) -> None:
        """An application took one of ``held``'s messages now (call with the lock)."""
        held.taken += 1
        held.taken_at = self._last_take = self._clock()

    def _lose(self, keys: Sequence[tuple[str, int]], why: str) -> None:
        """``keys`` are no longer this member's: dropped from memory, unsettled."""
        with self._lock:
            lost = [(k, self._held.pop(k)) for k in keys if k in self._held]
            self.counts["lost"] += len(lost)
        if not lost:
            return
        given = sum(held.given_at is not None for _, held in lost)
        _log.info(
            "group %s: %s lost %d claim(s) (%d of them with the application): %s",
            self.group, self.member, len(lost), given, why,
        )  # fmt: skip
        if self._budget is not None:
            for _, held in lost:
                if not held.settling:
                    self._budget.release(held.size)
        self._changed()

    # ---------------------------------------------------------------- settling

    def _settler(self, key: tuple[str, int], index: int | None = None) -> Settle:
        """How the consumer settles claim ``key`` (``index``: one message of a batch
        email). Queued: with a settling connection of its own, the email moves within
        milliseconds, on the settling thread (the settlements of that moment in one MOVE);
        else at the next round. On a store error, it is tried again.

        A ``nack`` (the application failed on it) offers the message again: the email
        goes back to the inbox (a batch's message: a copy of it alone), its deliveries
        counted, unless ``max_deliveries`` applications got it already: then it is
        quarantined with the reason. A ``quarantine`` or ``leave`` sets it aside in the
        quarantine folder (a claim cannot stay where it is: it would be handed out again);
        a batch email goes there once all its messages are settled, when any of them is."""

        def settle(outcome: str, then: Done | None = None, reason: str = "") -> None:
            with self._lock:
                held = self._held.get(key)
                if held is None or held.settling:
                    return  # lost to another member meanwhile: not this one's to move
                outcome = self._outcome_of(held, outcome, reason, index)
                if index is not None:
                    if index in held.done:
                        return
                    held.done[index] = outcome
                    raw = held.raws.pop(index, b"")
                    held.open -= 1
                    held.handed_at = held.taken_at = self._clock()
                    if then is not None:
                        held.thens.append(then)
                    if outcome == "nack":
                        self._offers.append((raw, held.delivered))
                    if held.open > 0:
                        if outcome == "nack":
                            self._nudge_settling()
                        self._wake.set()  # room for the next of its messages
                        return
                    kinds = set(held.done.values())
                    outcome = "quarantine" if kinds & {"quarantine", "leave"} else "ack"
                    then = _all(held.thens) if held.thens else None
                held.settling = True
                self._settlements.append((key, outcome, then))
            if self._budget is not None:
                self._budget.release(held.size)
            self._nudge_settling()

        return settle

    def _outcome_of(self, held: _Held, outcome: str, reason: str, index: int | None) -> str:
        """A nack past ``max_deliveries`` is a quarantine (said once, with its reason)."""
        if outcome != "nack":
            return outcome
        if held.delivered < self.settings.max_deliveries:
            return "nack"
        which = "" if index is None else f" (message {index + 1} of a batch)"
        _log.warning(
            "group %s: quarantined a message%s its application failed on %d times "
            "(max_deliveries): %s", self.group, which, held.delivered, reason or "no reason",
        )  # fmt: skip
        return "quarantine"

    def _nudge_settling(self) -> None:
        if self._settle_thread is not None:
            self._settle_due.set()
        else:
            self._wake.set()

    def _settle_loop(self) -> None:
        """Settlements and delivery records, on the member's second connection; and the
        heartbeats when the rounds stall (a long fetch, a slow server): the rounds beat when
        they read the members, the members folder then selected already."""
        while not self._closed:
            self._settle_due.wait(self._beat_wait())
            self._settle_due.clear()
            if self._closed:
                return
            try:
                with self._settle_lock:
                    if self._closed:
                        return
                    self._apply_settlements()
                self._beat_if_due(self._settle_store, self._settle_lock, _BACKUP_BEAT)
            except Exception as exc:  # noqa: BLE001 - the thread retries
                _log.debug("group %s: settling failed (%s); retrying", self.group, exc)
                time.sleep(0.05)
                self._settle_due.set()
            self._wake.set()  # room for another claim: the next round now

    def _beat_wait(self) -> float:
        last = self._last_beat
        if last is None or not self._healthy or self._record is None:
            return self.settings.heartbeat / 4  # (no beat due: none it could make)
        return max(0.0, last[0] + _BACKUP_BEAT * self.settings.heartbeat - self._clock())

    def _apply_settlements(self) -> None:
        """Offer again what was nacked of batch emails, then move what was settled on
        (call with ``_settle_lock`` held): a copy is in the inbox before its batch email
        leaves the claims folder, so a crash between them repeats (flagged), never loses."""
        with self._lock:
            offers, self._offers = self._offers, []
        while offers:
            raw, delivered = offers[0]
            try:
                self._settle_store.offer(raw, delivered)
            except BaseException:
                with self._lock:  # not offered: tried again
                    self._offers[:0] = offers
                raise
            offers.pop(0)
        with self._lock:
            items, self._settlements = self._settlements, []
        by: dict[tuple[str, str | None], list[tuple[tuple[str, int], str, Done | None]]] = {}
        for item in items:
            # a claim cannot be left where it is (it would be handed out again): what no
            # consumer could use is set aside as unusable mail is; a nack goes back
            folder = self._quarantine if item[1] in ("quarantine", "leave") else None
            if item[1] in ("nack", "return"):
                folder = self._settle_store.inbox_folder
            by.setdefault((item[0][0], folder), []).append(item)
        for (member, folder), group in by.items():
            try:
                self._settle_store.settle(member, [key[1] for key, _, _ in group], folder)
            except BaseException:
                with self._lock:  # not moved: tried again
                    self._settlements.extend(group)
                raise
            with self._lock:
                for key, _, _ in group:
                    if self._held.pop(key, None) is not None:
                        self._gone.add(key)
                        self.counts["acked"] += 1
            for _, _, then in group:
                if then is not None:
                    then()

    # ---------------------------------------------------------------- heartbeats

    def _beat_if_due(self, store: GroupStore, lock: threading.RLock, late: float = 1.0) -> None:
        """Beat when the last one began ``late`` heartbeats ago or more."""
        last = self._last_beat
        if last is not None and self._clock() - last[0] < late * self.settings.heartbeat:
            return
        self._beat(store, lock)

    def _beat(self, store: GroupStore, lock: threading.RLock) -> None:
        """One heartbeat on ``store`` (changes this member's token); renews the lease when
        it completed in time (:class:`Lease`)."""
        record = self._record
        if record is None or not self._healthy or record.member != self.member:
            return
        with self._beat_lock, lock:
            if self._closed:
                return
            started = self._clock()
            self._beat_on = not self._beat_on
            store.beat(record.member, record.order, self._beat_on)
            done = self._clock()
        self._last_beat = (started, done)
        if not self._lease.renewed(started, done) and self._joined and not self._in_lapse:
            self._lapsed(f"a heartbeat completed {done - started:.2f} s after it began, late")

    def _lapsed(self, why: str) -> None:
        """The lease lapsed (logged and counted once per lapse): the round checks the
        claims under the lock before anything more is handed out."""
        self._in_lapse = True
        self._lease.lapse()
        self.counts["lapsed"] += 1
        _log.info("group %s: %s's lease lapsed (%s): checking its claims", self.group,
                  self.member, why)  # fmt: skip
        self._wake.set()

    # ---------------------------------------------------------------- one round

    def _membership(self, now: float, healthy: bool) -> None:
        """Read the members, join if this member has no record, and decide who is alive
        and dead (once per heartbeat interval); once an expiry, also which claims folders
        have no member (:meth:`_orphans_of`)."""
        store = self._store
        listed = None
        if self._joined and healthy and now - self._orphans_looked >= self.settings.expiry:
            self._orphans_looked = now
            listed = store.claimants()  # (listed before the members are read: see below)
        records = store.members()
        mine = next((r for r in records if r.member == self.member), None)
        if mine is None and self._joined:  # removed as dead: what it held is others' now
            self._new_membership("removed from the group as dead")
        if mine is None and healthy:
            self._join_started = now
            store.join(self.member)
            records = store.members()
            mine = next((r for r in records if r.member == self.member), None)
        if mine is not None and not self._joined:
            # joined now, or by an earlier join whose answer was lost (its record
            # heartbeats and the others share messages out to it; was: never counted as
            # joined, its share claimed by nobody, for good): the lease runs from when the
            # join began, as nobody saw the record before
            self._joined = True
            self._lease.start(self._join_started)
            self._last_beat = (self._join_started, now)
        self._record = mine
        # (a token is dated when it was read, never earlier: a round stalled mid-way, a
        # process stopped, must not see a token it just read as old, its member as dead)
        read_at = max(now, self._clock())
        self._liveness.update(records, read_at)
        self._alive = self._liveness.alive(records, read_at)
        if listed is not None:
            self._orphans = [r.member for r in self._orphans_of(listed, records)]
        self._dead = [
            r for r in sorted(records, key=lambda r: r.order)
            if r.member not in self._alive and r.member != self.member
        ] + self._orphans_of(self._orphans, records)  # fmt: skip
        self._last_members = now

    def _orphans_of(
        self, claimants: Sequence[str], records: Sequence[MemberRecord]
    ) -> list[MemberRecord]:
        """The claims folders, of ``claimants``, whose member has no record in ``records``
        (read after the folders were listed), as dead members of order 0: a member's record
        is made before its claims folder, so such a member was removed as dead (its claims
        all taken, as it seemed) and what is in its folder came after (it was alive: paused
        past its lease in a claim, a move that landed late). Taken over as a dead member's
        claims are; was: left there, never processed."""
        names = {r.member for r in records} | {self.member}
        return [MemberRecord(m, 0, 0) for m in claimants if m not in names and "-" not in m]

    def _check_health(self, now: float) -> bool:
        """Whether the member's application makes progress (``ack_timeout`` is the longest
        it may show none): False while the application has held one message unsettled for
        ``ack_timeout`` since it took it (stuck on it), or while messages wait in its queue
        and it has taken none for ``ack_timeout`` (it takes nothing). Queued messages alone
        are no sign of a hang (was: counted from when they were queued, up to ``prefetch``
        of them: a working member behind slow callbacks declared itself hung).

        An unhealthy member stops heartbeating (the others take its claims). Once its
        application holds nothing any more (done, or it never took anything) it leaves this
        membership by itself, dropping what was queued (its claims folder keeps them, taken
        over as a dead member's), and joins again under a new name at the end of the order;
        when its application took nothing, it joins only one ``ack_timeout`` later, so that
        the others share out what it had.
        (A part waiting for the rest of its message is neither, nor one given while the
        rest is not: ``part-timeout`` bounds that.)"""
        with self._lock:
            # (a message of parts is with the application once every part was given: a
            # part given while another's delivery record failed is not; was: counted as
            # held, the member unhealthy, so never renewing the lease the rest waited for)
            joining = {h.part_of for h in self._held.values() if h.part_of and h.given_at is None}
            taken = [
                h.taken_at for h in self._held.values()
                if h.with_application and not (h.part_of and h.part_of in joining)
            ]  # fmt: skip
            queued = [
                h.handed_at for h in self._held.values()
                if not h.settling and h.out > h.with_application
                and not (h.part_of and h.given_at is None)
            ]  # fmt: skip
        timeout = self.settings.ack_timeout
        held_for = now - min(taken, default=now)
        idle_for = now - max(min(queued, default=now), self._last_take)
        stuck, idle = held_for >= timeout, idle_for >= timeout
        healthy = not (stuck or idle)
        if not healthy and self._healthy:
            what = (
                f"has held a message {held_for:.1f} s" if stuck
                else f"has taken none of its queued messages for {idle_for:.1f} s"
            )  # fmt: skip
            _log.warning(
                "group %s: member %s %s (ack-timeout %.1f s): it stops heartbeating, the "
                "others take its claims", self.group, self.member, what, timeout,
            )  # fmt: skip
        if not healthy and not taken:  # (its application holds nothing: back at once)
            self._new_membership("its application made no progress for ack-timeout")
            if idle:  # it rests one ack-timeout before it joins: the others take its claims
                self._rest_until = now + timeout
            return True
        if healthy and not self._healthy:  # back, under a new name at the end of the order
            self._new_membership("it hung past ack-timeout")
        self._healthy = healthy
        return healthy

    def _new_membership(self, why: str) -> None:
        """This membership is over (``why``): what it held is dropped (the others have
        it, or will), and the member joins again under a new name, at the end of the
        order, at its next round."""
        with self._lock:
            keys = list(self._held)
        self._lose(keys, why)
        self._lease.end()
        self._in_lapse = False
        self._next_seq.clear()  # (another member went on meanwhile)
        self.member = _new_member()
        self._joined = False
        self._record = None
        self._healthy = True
        self._last_take = self._clock()
        self.counts["rejoined"] += 1

    def _round(self, now: float) -> list[IncomingEmail]:
        store = self._store
        if self._settle_thread is None:
            with self._settle_lock:
                self._apply_settlements()
        if self._unlock_owed is not None:
            self._release_owed(self._unlock_owed)
        healthy = self._check_health(now)
        if not self._joined and now < self._rest_until:
            return []  # (resting: not a member, so that the others share what it had)
        refresh = now - self._last_members >= self.settings.heartbeat or not self._joined
        if refresh:
            self._membership(now, healthy)
            self._beat_if_due(store, self._store_lock)  # (the members folder selected now)
        if not self._joined:
            return []
        lapsed = healthy and not self._lease.valid(now)
        if lapsed and not self._in_lapse:
            self._lapsed("its heartbeats did not renew it in time")
        with self._lock:
            held, out = self._messages_held()
            waiting_parts = held > out
            joining = self._joining()
        # what it may hold: the receive budget full, no room at all (back-pressure)
        limit = self._limit if self._budget is None or self._budget.has_room() else held
        standby = self._mode == "stateful" and (not self._alive or self._alive[0] != self.member)
        if standby and self._alive:
            # (what it knew of the order is the active member's now; was: also cleared
            # while it saw no live member at all, a members read that failed: back first, it
            # had forgotten where each publisher was, and claimed past a missing message)
            self._next_seq.clear()
        full = held >= limit and not joining  # (the rest of a message it joins: claimed)
        if not lapsed and not self._dead and (full or standby or not healthy):
            # nothing to claim or take: no IMAP command, unless claims wait for room (or
            # the lock wants watching: see _watch_lock)
            self._watch_lock(now, healthy, bool(self._waiting))
            if (self._unfetched or waiting_parts) and out < self._limit:
                return self._hand_out()
            return []
        dead_claims = {r.member: store.claimed(r.member) for r in self._dead}
        dead_keys, joiners = self._part_keys(store, dead_claims)
        self._read_inbox(now)
        waiting = [(u, now - t) for u, (t, _) in sorted(self._waiting.items(), key=self._order)]
        work = plan(self._mode, self.member, self._alive if healthy else [], dead_claims,
                    waiting, held, self.settings, limit, self._weights, self._keys,
                    frozenset(self._parts), dead_keys, joiners,
                    self._gaps(waiting))  # fmt: skip
        # only this member puts claims in its folder: with nothing claimed or taken now, and
        # nothing left behind, there is nothing new to hand out (no IMAP command); parts
        # of a message held a while: whether another member holds the rest (see _split)
        if self._joining_since is None or not joining:
            self._joining_since = now if joining else None
        split = (
            self._mode == "stateless" and self._joining_since is not None
            and now - self._joining_since >= self.settings.steal_after
            and now - self._split_looked >= self.settings.expiry
            and self._split_seen(store)
        )  # fmt: skip
        if lapsed or work.take or work.claim or split:
            if self._under_lock(now, waiting, held, limit, healthy, lapsed):
                self._unfetched = True
        else:
            self._watch_lock(now, healthy, bool(waiting or any(dead_claims.values())))
        return self._hand_out() if self._unfetched or waiting_parts else []

    def _part_keys(
        self, store: GroupStore, dead_claims: dict[str, list[int]], alive: Sequence[str] = ()
    ) -> tuple[dict[str, dict[int, int]], dict[int, str]]:
        """For messages sent as parts: the share keys of the parts among dead members'
        claims (a part taken over goes where the rest of its message goes, and takes no
        room), and, stateless, who joins each message some member holds parts of already
        (:func:`plan`'s ``joiners``): this member for what it holds; with ``alive`` (under
        the claim lock, parts waiting in the inbox or among the dead members' claims),
        every live member for what its claims folder holds."""
        found = {}
        for member, uids in dead_claims.items():
            if uids:
                parts = store.claimed_parts(member)
                found[member] = {uid: part_key(of) for uid, of in parts.items()}
        if self._mode != "stateless":
            return found, {}
        with self._lock:
            joiners = {part_key(h.part_of): self.member for h in self._held.values() if h.part_of}
        # (the members' claims folders are read when parts wait in the inbox, or among a
        # dead member's claims: was, for the latter, not read, and a dead member's part
        # went by share to a member other than the one joining its message, which then
        # waited for it in vain: lost in a stateless group, #64)
        if self._parts or any(found.values()):
            for member in alive:
                for of in store.claimed_parts(member).values():
                    joiners.setdefault(part_key(of), member)
        return found, joiners

    def _split_seen(self, store: GroupStore) -> bool:
        """Whether another live member's claims folder holds parts of a message this
        member holds parts of (read without the lock, once an expiry while it waits for
        the rest of a message: :meth:`_split` decides under the lock)."""
        self._split_looked = self._clock()
        mine = set(store.claimed_parts(self.member).values())
        self._split_wanted = bool(mine) and any(
            mine & set(store.claimed_parts(member).values())
            for member in self._alive if member != self.member
        )  # fmt: skip
        return self._split_wanted

    def _split(self, store: GroupStore, alive: Sequence[str]) -> None:
        """Under the claim lock: the parts of a message split across live members (each
        claimed some while they saw the members differently) go back to the inbox from
        every member but one, which then claims them all and joins the message: the one
        holding most of them (of equals, the first by name). Each member decides this of
        its own claims from the same folders (read under the lock), so exactly one keeps
        them; never parts of a message its application has. Was: each kept its parts and
        waited for the other's, for good (a message lost in a stateless group, #64)."""
        self._split_wanted = False
        mine = store.claimed_parts(self.member)
        if not mine:
            return
        counts: dict[str, Counter[str]] = {self.member: Counter(mine.values())}
        for member in alive:
            if member != self.member:
                counts[member] = Counter(store.claimed_parts(member).values())
        with self._lock:
            given = {h.part_of for h in self._held.values() if h.part_of and h.given_at}

        def yields(of: str, n: int) -> bool:  # (another holds more, or as many and is first)
            return of not in given and any(
                c[of] > n or (c[of] == n and member < self.member)
                for member, c in counts.items() if member != self.member and c[of]
            )  # fmt: skip

        back = {of for of, n in counts[self.member].items() if yields(of, n)}
        uids = sorted(uid for uid, of in mine.items() if of in back)
        if not uids:
            return
        store.give_back(self.member, uids)  # (flagged: whoever claims them, a repeat)
        self.counts["gave_back"] += len(uids)
        with self._lock:
            self._gone.update((self.member, uid) for uid in uids)
        why = f"parts of {len(back)} message(s) another member joins: back to the inbox"
        self._lose([(self.member, uid) for uid in uids], why)

    def _read_inbox(self, now: float) -> None:
        """Note the new inbox messages this member wants, and forget those gone."""
        store = self._store
        inbox = store.inbox()
        new = [uid for uid in inbox if uid > self._seen_uid]
        if new:
            heads = store.headers(new)  # (failing, they are read again: not seen yet)
            self._seen_uid = new[-1]
            for uid, head in heads.items():
                if self._wants(head):
                    self._waiting[uid] = (now, head.stamp)
                    if self._mode == "stateful" and head.stream:
                        self._heads[uid] = head
                    self._keys[uid] = head.share_key(uid)
                    if head.count:
                        self._weights[uid] = head.count
                    if head.part_of:
                        self._parts.add(uid)
        present = set(inbox)
        self._waiting = {u: t for u, t in self._waiting.items() if u in present}
        self._weights = {u: n for u, n in self._weights.items() if u in present}
        self._keys = {u: k for u, k in self._keys.items() if u in present}
        self._parts &= present
        self._heads = {u: h for u, h in self._heads.items() if u in present}

    def _gaps(self, waiting: Sequence[tuple[int, float]]) -> frozenset[int]:
        """(stateful) The waiting UIDs a publisher's earlier message is missing before."""
        if self._mode != "stateful":
            return frozenset()
        heads = [(uid, head) for uid, _ in waiting if (head := self._heads.get(uid))]
        return order_gaps(heads, self._next_seq)

    def _followed(self, stream: str, seq: int, covers: int = 1) -> None:
        """(stateful) Messages ``seq`` to ``seq + covers - 1`` of publisher ``stream`` are
        this member's now (claimed, or handed out): what it waits for comes after."""
        if self._mode == "stateful" and stream and seq >= 0:
            self._next_seq[stream] = max(self._next_seq.get(stream, 0), seq + covers)

    def _under_lock(
        self,
        now: float,
        waiting: list[tuple[int, float]],
        held: int,
        limit: int,
        healthy: bool,
        lapsed: bool,
    ) -> bool:
        """Under the group's claim lock: read the members again, check this member's own
        claims when its lease lapsed, take what the dead held and claim (the plan made
        again with what was read there). False when another member holds the lock (the
        first live member breaks a lock its dead holder left)."""
        store = self._store
        record = self._record
        if record is None:
            return False
        # (owed until known: a try whose answer was lost may have taken the lock, in this
        # member's name, which nobody else breaks while it lives; was: held for good when
        # this member had nothing more to claim, the whole group stalled)
        self._unlock_owed = record
        if not store.try_lock(record):  # busy: the next round tries again
            self._unlock_owed = None
            self.counts["lock_busy"] += 1
            self._maybe_break(now)
            return False
        self._unnamed_since = None
        self._busy_since = None
        self.counts["locked"] += 1
        try:
            alive, dead = self._alive, list(self._dead)
            if lapsed or dead:  # decided on the members as they are now, under the lock
                if lapsed and healthy:
                    self._beat(store, self._store_lock)  # one that began before the check
                records = store.members()
                read_at = max(now, self._clock())  # (dated when read: see _membership)
                self._liveness.update(records, read_at)
                if not any(r.member == self.member for r in records):
                    self._last_members = -1e9  # the next round finds out and joins again
                    return False
                alive = self._liveness.alive(records, read_at) if healthy else []
                dead = [r for r in sorted(records, key=lambda r: r.order)
                        if r.member not in alive and r.member != self.member]  # fmt: skip
                dead += self._orphans_of(self._orphans, records)
                self._alive, self._dead = alive, dead
            if lapsed:
                self._confirm_claims()
            # with a valid lease nobody saw this member dead: its record and claims stand
            if not self._lease.valid(self._clock()):
                return False  # (its heartbeats stall: nothing moves until they run again)
            dead_claims = {r.member: store.claimed(r.member) for r in dead}
            dead_keys, joiners = self._part_keys(store, dead_claims, alive)
            if self._split_wanted:
                self._split(store, alive)
            if self._mode == "stateful" and self._unfetched:
                waiting = []  # (what it took is read first: it says where each publisher is)
            work = plan(self._mode, self.member, alive, dead_claims, waiting, held,
                        self.settings, limit, self._weights, self._keys,
                        frozenset(self._parts), dead_keys, joiners,
                        self._gaps(waiting))  # fmt: skip
            if work.take or work.claim:  # (before: a round failing after them must not
                self._unfetched = True  # leave them in its folder, never handed out)
            for member, uids in work.take.items():
                store.take(uids, member, self.member)
                self.counts["taken"] += len(uids)
                _log.info(
                    "group %s: %s took %d claims of %s (not alive for %.1f s)",
                    self.group, self.member, len(uids), member, self.settings.expiry,
                )  # fmt: skip
            if work.claim:
                store.claim(work.claim, self.member)
                self.counts["claimed"] += len(work.claim)
                for uid in work.claim:
                    if (head := self._heads.get(uid)) is not None:
                        self._followed(head.stream, head.seq, head.covers)
            left = []
            for gone in dead:  # a dead member whose claims are all taken is forgotten
                taken = work.take.get(gone.member)
                if not dead_claims[gone.member] or (taken and not store.claimed(gone.member)):
                    store.remove_member(gone)
                else:
                    left.append(gone)
            self._dead = left
            self._orphans = [r.member for r in left if not r.order]
        finally:
            self._release(record)
        return True

    def _release(self, record: MemberRecord) -> None:
        """Release the claim lock in this member's name (``record`` is its own). A release
        that failed is owed: tried again at the start of every round until it succeeds
        (its lock names this member, live: nobody else may break it, and this member might
        not want the lock again for long)."""
        self._unlock_owed = record
        self._store.unlock(record)
        self._unlock_owed = None

    def _release_owed(self, record: MemberRecord) -> None:
        """A release that failed: done again while the lock still names this member (it is
        its lock then: nobody else takes a lock that exists, nor breaks one naming a live
        member); a lock left naming nobody is the first live member's to break."""
        if any(r.member == record.member and r.locking for r in self._store.members()):
            self._release(record)
        else:
            self._unlock_owed = None

    def _confirm_claims(self) -> None:
        """After a lapsed lease, under the claim lock and with a heartbeat just done: what
        is still in this member's claims folder is its own again (the lease starts from that
        heartbeat); what is not was taken over and is dropped from memory."""
        listed = set(self._store.claimed(self.member))
        with self._lock:
            gone = [k for k in self._held if k[0] != self.member or k[1] not in listed]
        self._lose(gone, "taken over while its lease had lapsed")
        if self._mode == "stateful" and (gone or self._others_hold()):
            # another member was active meanwhile (it took these claims, or holds claims of
            # its own): it stays so; this one steps back, at the end of the order (was: it
            # went on as a second active member, handing out a message while an earlier one
            # of its publisher was with the other: out of order)
            self._new_membership("another member became active while its lease had lapsed")
            return
        last = self._last_beat
        self._lease.start(last[0] if last is not None else self._clock())
        self._in_lapse = False
        self._changed()

    def _others_hold(self) -> bool:
        """(stateful, under the claim lock) Whether another live member holds claims."""
        return any(self._store.claimed(member) for member in self._alive if member != self.member)

    def _watch_lock(self, now: float, healthy: bool, work: bool) -> None:
        """The first live member, with ``work`` waiting in the group (inbox mail, a dead
        member's claims) and nothing of its own to claim this round, looks at the claim
        lock once a heartbeat, and breaks it as :meth:`_maybe_break` says: only the first
        live member breaks a lock, so it must look also when all that waits is others'
        share (they cannot take a lock left behind, nor break it: without this, the group
        stopped)."""
        if not (work and healthy and self._alive[:1] == [self.member]):
            return
        if now - self._lock_looked < self.settings.heartbeat:
            return
        self._lock_looked = now
        self._maybe_break(now)  # (it reads the lock itself once it has been busy a heartbeat)

    def _maybe_break(self, now: float) -> None:
        """Break the claim lock when its holder is dead (first live member only): seen at
        once, the holder naming itself on its record. A live taker names itself within a
        round trip of taking the lock; one that names nobody for half an expiry has no live
        holder (it died between taking and naming, or the store made the lock for no one)."""
        store = self._store
        self._busy_since = self._busy_since or now
        if now - self._busy_since < self.settings.heartbeat:
            return  # taken and given back all the time (a live holder keeps it milliseconds)
        if not store.locked():
            self._unnamed_since = None
            return
        records = store.members()  # fresh: the holder is judged on what is there now
        read_at = max(now, self._clock())  # (dated when read: see _membership)
        self._liveness.update(records, read_at)
        alive = self._liveness.alive(records, read_at)
        named = [r for r in records if r.locking]
        holder = next((r for r in named if r.member != self.member), None)
        first = alive[:1] == [self.member]
        if holder is None and named:
            # named after this member alone, which does not hold it (its release failed
            # half way): nobody else may break a lock a live member names, so this one
            # does (its own name goes with its next release when another names it too)
            holder = named[0]
            self._unnamed_since = None
            broken, why = True, f"it names {self.member}, which does not hold it"
        elif holder is not None:
            self._unnamed_since = None
            broken = first and holder.member not in alive
            why = f"its holder {holder.member} is dead"
        else:
            self._unnamed_since = self._unnamed_since or now
            unnamed = now - self._unnamed_since
            broken = first and unnamed >= self.settings.expiry / 2
            why = f"it named no holder for {unnamed:.1f} s"
        if broken:
            _log.warning("group %s: breaking the claim lock: %s", self.group, why)
            store.break_lock(holder)
            self._unnamed_since = None

    def _hand_out(self) -> list[IncomingEmail]:
        """What this member holds and has not handed out, up to its room (and the receive
        budget), as :class:`IncomingEmail` objects with their claim: first the waiting
        messages of batch emails it fetched, then claims fetched now (a batch email's
        messages as room allows, the rest waiting). Unusable messages are settled here as
        poison (quarantined; a batch email's with the email, once all are settled)."""
        store = self._store
        if not self._lease.valid(self._clock()):
            return []  # (what it holds stays to hand out once the lease is confirmed)
        member = self.member
        due: list[tuple[tuple[str, int], _Held, Carried]] = []
        with self._lock:
            _, busy = self._messages_held()
            room = self._limit - busy
            for key, held in self._held.items():
                while held.waiting and room > 0 and not held.settling:
                    due.append((key, held, held.waiting.popleft()))
                    room -= 1
            joining = self._joining()
        if room > 0 or joining:
            room = self._fetch_claims(store, member, room, due)
        out: list[tuple[bool, IncomingEmail]] = []
        for key, held, item in due:
            if held.count:
                held.raws[item.index] = item.raw
            settle = self._settler(key, item.index if held.count else None)
            if item.email is None:
                settle("quarantine", None, item.reason)
                continue
            # (redelivered as the store's delivery count says: a claim taken over from a
            # member that never handed it out is no repeat; the fence's count decides)
            index = item.index if held.count else None
            had = held.delivered > 0 and (index is None or index < held.before)
            incoming = IncomingEmail(
                item.email,
                redelivered=had,
                delivery_count=held.delivered + 1 if had else 1,
                settle=settle,
                claim=_GroupClaim(self, key, index),
                in_batch=held.count > 0,
                returned=held.redelivered,  # (taken over, or offered again)
            )
            out.append((held.redelivered, incoming))
            if self._mode == "stateful":  # (a batch's messages, a joined message, a take)
                headers = item.email.headers
                gid, seq = (headers.get(HEADER_PUBLISHER_GID),
                            headers.get(HEADER_PUBLISHER_SEQUENCE_NUMBER))  # fmt: skip
                self._followed(*publisher_sequence(gid, seq))
        if self._mode == "stateful":  # a batch goes out in send order, the taken ones first
            out.sort(key=lambda pair: (not pair[0], _stamp(pair[1].email)))
        return [incoming for _, incoming in out]

    def _fetch_claims(
        self,
        store: GroupStore,
        member: str,
        room: int,
        due: list[tuple[tuple[str, int], _Held, Carried]],
    ) -> int:
        """Fetch claims not handed out yet, as many as their messages fit in ``room`` (at
        least one); their messages that fit go into ``due``, the rest wait. The room left."""
        listing = store.holding(member)
        with self._lock:
            for key in [k for k in self._gone if k[0] != member or k[1] not in listing]:
                self._gone.discard(key)  # settled and gone from this connection's view too
            known = self._held.keys() | self._gone
            fresh = [uid for uid in sorted(listing) if (member, uid) not in known]
        chosen: list[int] = []
        need = 0
        for uid in fresh:
            part = listing[uid].part  # (parts wait on disk until joined: they need no room)
            if need >= room and not part:
                continue
            if self._budget is not None and not self._budget.reserve(listing[uid].size):
                break
            chosen.append(uid)
            need += 0 if part else max(1, listing[uid].count)
        if not chosen:
            self._unfetched = len(fresh) > 0
            return room
        try:
            raw_by_uid = store.fetch(member, chosen)
        except BaseException:  # (tried again at the next round: nothing reserved meanwhile)
            if self._budget is not None:
                for uid in chosen:
                    self._budget.release(listing[uid].size)
            raise
        self._unfetched = len(chosen) < len(fresh)
        fetched_at = self._clock()  # (not the round's start: a slow round, such as
        # Courier's 2-s folder deletions, is no time the consumer held anything)
        for uid in chosen:
            key, item = (member, uid), listing[uid]
            raw = raw_by_uid.pop(uid, None)
            if raw is None:  # gone meanwhile (settled by a late move of this member's)
                if self._budget is not None:
                    self._budget.release(item.size)
                continue
            carried = self._unpack(raw, uid)
            del raw
            batch = carried[0].count > 0
            # (what applications got of a batch before: as recorded; a count without a
            # record, from before records were kept, counts for every message)
            before = (item.given or len(carried)) if batch and item.delivered else 0
            held = _Held(
                item.size, item.delivered, fetched_at,
                redelivered=item.taken or item.delivered > 0,
                count=len(carried) if batch else 0, open=len(carried),
                before=before, recorded=before,
            )  # fmt: skip
            first = carried[0].email
            if not batch and first is not None:
                held.part_of = first.headers.get("Part-Of", "")
            with self._lock:
                self._held[key] = held
                held.waiting.extend(carried)
                while held.waiting and (room > 0 or not batch):
                    due.append((key, held, held.waiting.popleft()))
                    room -= 1
        return room

    def _order(self, item: tuple[int, tuple[float, int]]) -> tuple[int, int]:
        """Stateful groups process in send order (Source-Timestamp), stateless in UID."""
        uid, (_, stamp) = item
        return (stamp, uid) if self._mode == "stateful" else (0, uid)

    # ---------------------------------------------------------------- receiver

    def receive_incoming(self, timeout: float | None = None) -> list[IncomingEmail]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._closed:
                raise ClosedError("group receiver is closed")
            self._wake.clear()
            with self._store_lock:
                found = self._round(self._clock())
            if found:
                return found
            wait = self.settings.poll
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return []
            if self._wake.wait(wait):
                return []  # woken (a settlement, a stop): the caller looks again

    def wakeup(self) -> None:
        self._wake.set()

    def close(self) -> None:
        """Stop; the member's claims stay in its folder until another member takes them
        (its record expires), or it is settled by a later process."""
        if self._closed:
            return
        self._wake.set()
        with self._store_lock, self._settle_lock:
            self._closed = True
            self._settle_due.set()  # the settling thread ends
            try:
                self._apply_settlements()
            except Exception as exc:  # noqa: BLE001 - closing: logged
                _log.warning("group %s: settling at close failed: %s", self.group, exc)
            self._store.close()
            if self._settle_store is not self._store:
                self._settle_store.close()


def _all(thens: list[Done]) -> Done:
    def done() -> None:
        for then in thens:
            then()

    return done


def _stamp(email: Email) -> int:
    value = email.headers.get("Source-Timestamp", "").strip()
    return int(value) if value.isdigit() and len(value) < 20 else 0


def _new_member() -> str:
    return secrets.token_hex(4)
