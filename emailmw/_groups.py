"""Delivery modes of a subscription group (``docs/delivery-modes.md``): ``stateful`` (one
active consumer, standbys take over in order) and ``stateless`` (each message processed by
exactly one member), over a mailbox every member reads.

The protocol runs on the mail store itself, through a :class:`GroupStore` (IMAP:
``_transport/group_imap.py``; in process: ``_transport/group_memory.py``):

* **membership**: each member has a record in the group's members folder; its order is the
  record's UID (everyone sees the same order), its liveness a token (IMAP: the record's
  MODSEQ) it changes every ``heartbeat`` seconds. A member whose token has not changed for
  ``expiry`` seconds, as an observer's own clock measures it, is dead to that observer;
* **claiming**: a member claims messages by moving them (IMAP ``UID MOVE``) from the inbox
  into its own claims folder while it holds the group's claim lock (a folder it creates:
  of several members creating it, exactly one succeeds; neither MOVE nor a conditional
  STORE decides between Dovecot sessions). What is in a member's claims folder is its own;
* **acknowledging**: once the application is done with it, the message moves on to the
  group's done folder; nothing is ever deleted;
* **taking over**: a dead member's claims move into a live member's claims folder (under
  the lock), with the delivery count (a keyword) raised by one; the record and the empty
  folder of the dead member are then removed; a lock one taking held for three expiries
  is broken by the first live member (its holder died holding it);
* **hanging**: a member that holds an unacknowledged message longer than ``ack_timeout``
  stops heartbeating, so the others take its claims as from a dead member; once it is done
  it joins again under a new name, at the back of the order.

:func:`plan` (what to claim and take in one round) and :class:`Liveness` are pure and
tested without a store; :class:`GroupReceiver` runs them against a store as an
:class:`~emailmw.EmailReceiver`, so a group subscription has its own polling thread with the
usual classification, security decisions and tickets.
"""

from __future__ import annotations

import abc
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from ._exceptions import ClosedError, ConfigError
from ._log import get_logger
from ._transport.base import EmailReceiver, IncomingEmail
from ._types import Email

__all__ = [
    "MODES",
    "GroupConsumer",
    "GroupReceiver",
    "GroupSettings",
    "GroupStore",
    "Liveness",
    "MemberRecord",
    "Plan",
    "check_group",
    "plan",
]

_log = get_logger("groups")
MODES: Final = ("topic", "stateful", "stateless")
_GROUP_RE: Final = re.compile(r"[A-Za-z0-9_]{1,40}")


def check_group(mode: str, group: str | None) -> None:
    """Raise ``ValueError`` for an unknown mode, or a group name a mode needs and lacks."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "topic":
        if group is not None:
            raise ValueError("a group name goes with mode='stateful' or 'stateless'")
        return
    if group is None or not _GROUP_RE.fullmatch(group):
        raise ValueError(
            f"mode={mode!r} needs group=, a name of 1 to 40 letters, digits or _ (got {group!r})"
        )


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Timing of the group protocol (seconds). ``prefetch``: messages a member holds at
    most; ``steal_after``: how long a message waits for the member whose share it is
    before any member may claim it (stateless); ``reorder``: how long a stateful group's
    active member lets a message wait in the inbox before claiming it, so that messages
    sent before it and delivered up to that much later are processed first (mail servers
    deliver in parallel: arrival order is not send order)."""

    heartbeat: float = 0.25
    expiry: float = 1.0
    ack_timeout: float = 30.0
    poll: float = 0.05
    prefetch: int = 10
    steal_after: float = 0.25
    reorder: float = 0.25


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member: str
    order: int
    token: int


class Liveness:
    """Which members are alive, as one observer sees it: a member is alive while its token
    changed within ``expiry`` seconds of this observer's clock (a member first seen counts
    as alive from then). Not thread-safe (one receiver's thread)."""

    def __init__(self, expiry: float) -> None:
        self.expiry = expiry
        self._seen: dict[str, tuple[int, float]] = {}

    def update(self, records: Sequence[MemberRecord], now: float) -> None:
        seen = {}
        for record in records:
            old = self._seen.get(record.member)
            seen[record.member] = (
                old if old is not None and old[0] == record.token else (record.token, now)
            )
        self._seen = seen

    def alive(self, records: Sequence[MemberRecord], now: float) -> list[str]:
        """Members alive now, in order."""
        return [
            r.member
            for r in sorted(records, key=lambda r: r.order)
            if now - self._seen.get(r.member, (0, now))[1] <= self.expiry
        ]


@dataclass(frozen=True, slots=True)
class Plan:
    """One round's work: inbox UIDs to claim, and per dead member the claims to take."""

    claim: list[int] = field(default_factory=list)
    take: dict[str, list[int]] = field(default_factory=dict)


def owner(uid: int, alive: Sequence[str]) -> str:
    """The member whose share message ``uid`` is: the same answer for every member that
    sees the same live members (msm's rule, with the UID as the key)."""
    return alive[uid % len(alive)]


def plan(
    mode: str,
    me: str,
    alive: Sequence[str],
    dead_claims: Mapping[str, Sequence[int]],
    waiting: Sequence[tuple[int, float]],
    held: int,
    settings: GroupSettings,
) -> Plan:
    """What member ``me`` claims and takes this round. ``alive``: the live members in
    order (``me`` among them); ``dead_claims``: the claims of each dead member;
    ``waiting``: the unclaimed inbox messages (UID, seconds waited) in the order they are
    to be processed (stateful: by Source-Timestamp);
    ``held``: messages ``me`` holds unacknowledged."""
    if me not in alive:
        return Plan()
    room = max(0, settings.prefetch - held)
    if mode == "stateful":
        if alive[0] != me:
            return Plan()  # a standby
        take = {m: list(uids) for m, uids in dead_claims.items() if uids}
        room -= sum(len(uids) for uids in take.values())
        ready = []
        for uid, waited in waiting:  # in send order: stop at the first still settling
            if waited < settings.reorder:
                break
            ready.append(uid)
        return Plan(ready[: max(0, room)], take)
    take = {}
    for member, uids in dead_claims.items():
        mine = [u for u in uids if owner(u, alive) == me]
        if mine:
            take[member] = mine
    if held and room < (settings.prefetch + 1) // 2:
        return Plan([], take)  # claims go in batches: one claim lock for several messages
    # its own share first, in order; then, with room left, others' messages that waited
    # too long, newest first (their owners claim from the oldest: fewer collisions)
    mine = [uid for uid, _ in waiting if owner(uid, alive) == me]
    stolen = [uid for uid, waited in reversed(waiting)
              if owner(uid, alive) != me and waited >= settings.steal_after]  # fmt: skip
    return Plan((mine + stolen)[:room], take)


class GroupStore(abc.ABC):
    """The mail-store operations of the group protocol (see the module). Used by one
    thread; every method may raise a :class:`~emailmw.TransportError`."""

    @abc.abstractmethod
    def members(self) -> list[MemberRecord]: ...

    @abc.abstractmethod
    def join(self, member: str) -> None: ...

    @abc.abstractmethod
    def beat(self, member: str) -> None: ...

    @abc.abstractmethod
    def remove_member(self, member: str) -> None:
        """Remove ``member``'s record and its (empty) claims folder."""

    @abc.abstractmethod
    def inbox(self) -> list[int]:
        """The UIDs in the inbox, ascending."""

    @abc.abstractmethod
    def headers(self, uids: Sequence[int]) -> dict[int, tuple[str, int]]:
        """The Subject and Source-Timestamp (0 when absent or broken) of inbox ``uids``."""

    @abc.abstractmethod
    def try_lock(self, member: str) -> bool:
        """Take the group's claim lock for ``member``: True for exactly one of several
        members trying (until :meth:`unlock`)."""

    @abc.abstractmethod
    def unlock(self) -> None: ...

    @abc.abstractmethod
    def lock_id(self) -> int | None:
        """Which taking of the claim lock holds it now (a new number each time it is
        taken); None when it is free."""

    @abc.abstractmethod
    def break_lock(self) -> None:
        """Release a lock its holder left (it died holding it)."""

    @abc.abstractmethod
    def claim(self, uids: Sequence[int], member: str) -> None:
        """Move ``uids`` from the inbox into ``member``'s claims (those still there); call
        with the claim lock held."""

    @abc.abstractmethod
    def claimed(self, member: str) -> list[int]:
        """The UIDs in ``member``'s claims folder, ascending."""

    @abc.abstractmethod
    def take(self, uids: Sequence[int], dead: str, member: str) -> None:
        """Move ``uids`` from ``dead``'s claims into ``member``'s, delivery count + 1;
        call with the claim lock held."""

    @abc.abstractmethod
    def fetch(self, member: str, uids: Sequence[int]) -> dict[int, tuple[bytes, int]]:
        """The raw bytes and delivery count of ``member``'s claims ``uids``."""

    @abc.abstractmethod
    def settle(self, member: str, uids: Sequence[int], folder: str | None) -> None:
        """Move ``member``'s claims ``uids`` to the done folder (``folder`` None) or to
        ``folder`` (the quarantine)."""

    def close(self) -> None:  # noqa: B027 - optional
        pass


class GroupReceiver(EmailReceiver):
    """The receiver of one group member: runs the protocol round by round and hands out
    the messages it holds, each settled (acknowledged, left, quarantined) into the done
    or quarantine folder. Only emails whose Subject is ``topic`` are claimed. Thread-safe
    as a receiver is (``wakeup``/``close`` from any thread, settling from any thread)."""

    def __init__(
        self,
        store: GroupStore,
        *,
        mode: str,
        group: str,
        topic: str,
        parse: ParseRaw,
        settings: GroupSettings | None = None,
        quarantine: str | None = None,
        settle_store: GroupStore | None = None,
    ) -> None:
        check_group(mode, group)
        if mode == "topic":
            raise ConfigError("a group receiver serves the stateful and stateless modes")
        self._store = store
        # settling runs on the application's threads, on a connection of its own (or on
        # the round's, taking turns)
        self._settle_store = settle_store or store
        self._mode = mode
        self.group = group
        self._topic = topic
        self._parse = parse
        self.settings = settings or GroupSettings()
        self._quarantine = quarantine
        self.member = _new_member()
        self._liveness = Liveness(self.settings.expiry)
        self._lock = threading.Lock()  # the settlement queue
        self._store_lock = threading.RLock()  # the round's connection
        self._settle_lock = self._store_lock if settle_store is None else threading.RLock()
        self._settle_due = threading.Event()
        self._settle_thread: threading.Thread | None = None
        if settle_store is not None:
            self._settle_thread = threading.Thread(
                target=self._settle_loop, name=f"emailmw-group-{group}-settle", daemon=True
            )
            self._settle_thread.start()
        self._wake = threading.Event()
        self._closed = False
        self._settlements: deque[tuple[str, int, str]] = deque()
        # (member, uid) -> when handed out; kept after settling (in _settled) until the
        # round's own connection no longer lists it: another session's move may reach this
        # session's view late, and a message must not be handed out twice
        self._handed: dict[tuple[str, int], float] = {}
        self._settled: set[tuple[str, int]] = set()
        self._seen_uid = 0
        # inbox UID of this topic -> (first seen, Source-Timestamp)
        self._waiting: dict[int, tuple[float, int]] = {}
        # the claim lock as held by another: (its lock_id, when first seen)
        self._lock_seen: tuple[int, float] | None = None
        self._busy_since: float | None = None  # since when this member fails to take it
        self._last_beat = 0.0
        self._last_members = -1e9
        self._records: list[MemberRecord] = []
        self._dead: list[str] = []
        self._alive: list[str] = []
        self._joined = False
        self._healthy = True
        #: what this member did: processed (acknowledged), taken over, claimed, rejoined
        self.counts: dict[str, int] = dict.fromkeys(
            ("claimed", "taken", "acked", "rejoined", "locked", "lock_busy"), 0
        )

    def __repr__(self) -> str:
        return f"<GroupReceiver {self._mode} {self.group}/{self.member}>"

    @property
    def joined(self) -> bool:
        """True once this member's record is in the group."""
        return self._joined

    @property
    def holding(self) -> int:
        """Messages handed out and not settled yet."""
        with self._lock:
            return len(self._handed.keys() - self._settled) + len(self._settlements)

    # ---------------------------------------------------------------- settling

    def _settler(self, member: str, uid: int) -> Settle:
        def settle(outcome: str) -> None:
            """With a settling connection of its own, the message moves within
            milliseconds, on the settling thread (the settlements of that moment in one
            MOVE); else at once, on the caller's thread. On a store error, it is tried
            again."""
            with self._lock:
                self._settlements.append((member, uid, outcome))
            if self._settle_thread is not None:
                self._settle_due.set()
                return
            try:
                with self._settle_lock:
                    if not self._closed:
                        self._apply_settlements()
            except Exception as exc:  # noqa: BLE001 - retried at the next round
                _log.debug("group %s: settling failed (%s); retrying", self.group, exc)
            self._wake.set()  # room for another claim: the next round now

        return settle

    def _settle_loop(self) -> None:
        while True:
            self._settle_due.wait()
            self._settle_due.clear()
            if self._closed:
                return
            try:
                with self._settle_lock:
                    self._apply_settlements()
            except Exception as exc:  # noqa: BLE001 - the thread retries
                _log.debug("group %s: settling failed (%s); retrying", self.group, exc)
                time.sleep(0.1)
                self._settle_due.set()
            self._wake.set()  # room for another claim: the next round now

    def _apply_settlements(self) -> None:
        """Move what was settled on (call with ``_settle_lock`` held)."""
        with self._lock:
            items = list(self._settlements)
            self._settlements.clear()
        by: dict[tuple[str, str | None], list[int]] = {}
        for member, uid, outcome in items:
            folder = self._quarantine if outcome == "quarantine" else None
            by.setdefault((member, folder), []).append(uid)
        for (member, folder), uids in by.items():
            try:
                self._settle_store.settle(member, uids, folder)
            except BaseException:
                with self._lock:  # not moved: tried again
                    self._settlements.extend((member, u, "quarantine" if folder else "ack")
                                             for u in uids)  # fmt: skip
                raise
            with self._lock:
                self._settled.update((member, uid) for uid in uids)
                self.counts["acked"] += len(uids)

    # ---------------------------------------------------------------- one round

    def _membership(self, now: float, healthy: bool) -> None:
        """Read the members, join or heartbeat, and decide who is alive and dead (once per
        heartbeat interval)."""
        store = self._store
        records = store.members()
        if healthy and not any(r.member == self.member for r in records):
            if self._joined:  # removed as dead while alive: join again, at the back
                self.member = _new_member()
                self.counts["rejoined"] += 1
            store.join(self.member)
            self._joined = True
            self._last_beat = now
            records = store.members()
        elif healthy and now - self._last_beat >= self.settings.heartbeat:
            store.beat(self.member)
            self._last_beat = now
        self._liveness.update(records, now)
        self._alive = self._liveness.alive(records, now)
        self._dead = [
            r.member for r in records if r.member not in self._alive and r.member != self.member
        ]
        self._last_members = now

    def _round(self, now: float) -> list[IncomingEmail]:
        store = self._store
        if self._settlements:  # what failed to settle on the application's thread
            with self._settle_lock:
                self._apply_settlements()
        with self._lock:
            unsettled = [t for k, t in self._handed.items() if k not in self._settled]
            oldest = min(unsettled, default=now)
        healthy = now - oldest < self.settings.ack_timeout
        if not healthy and self._healthy:
            _log.warning(
                "group %s: member %s has held a message %.1f s (ack-timeout %.1f s): it "
                "stops heartbeating, the others take its claims",
                self.group, self.member, now - oldest, self.settings.ack_timeout,
            )  # fmt: skip
        if healthy and not self._healthy:
            self.member = _new_member()  # back, under a new name at the end of the order
            self._joined = False
            self.counts["rejoined"] += 1
        self._healthy = healthy
        refresh = now - self._last_members >= self.settings.heartbeat or not self._joined
        if refresh:
            self._membership(now, healthy)
        # the dead stay dead (and their claims to take) until removed: a stateful
        # standby that became active must take them before it claims from the inbox
        alive, dead = self._alive, list(self._dead)
        with self._lock:
            held = len(self._handed.keys() - self._settled)
        standby = self._mode == "stateful" and (not alive or alive[0] != self.member)
        if not dead and (held >= self.settings.prefetch or standby or not healthy):
            return []  # nothing to claim or take this round: no IMAP command at all
        dead_claims = {member: store.claimed(member) for member in dead}
        inbox = store.inbox()
        new = [uid for uid in inbox if uid > self._seen_uid]
        if new:
            self._seen_uid = new[-1]
            for uid, (subject, stamp) in store.headers(new).items():
                if subject == self._topic:
                    self._waiting[uid] = (now, stamp)
        present = set(inbox)
        self._waiting = {u: t for u, t in self._waiting.items() if u in present}
        work = plan(
            self._mode,
            self.member,
            alive if healthy else [],
            dead_claims,
            [(u, now - t) for u, (t, _) in sorted(self._waiting.items(), key=self._order)],
            held,
            self.settings,
        )
        if (work.take or work.claim) and not self._claim_under_lock(work, now, alive):
            return []
        for member in dead:  # a dead member whose claims are all taken is forgotten
            if not store.claimed(member):
                store.remove_member(member)
                self._dead.remove(member)
        mine = store.claimed(self.member)
        self.counts["claimed"] += max(0, len(mine) - held)
        with self._lock:
            listed = {(self.member, uid) for uid in mine}
            for key in [k for k in self._handed if k not in listed and k in self._settled]:
                del self._handed[key]  # settled and gone from this connection's view too
                self._settled.discard(key)
            fresh = [uid for uid in mine if (self.member, uid) not in self._handed]
        if not fresh:
            return []
        out = []
        for uid, (raw, count) in sorted(store.fetch(self.member, fresh).items()):
            with self._lock:
                self._handed[(self.member, uid)] = now
            email = self._parse(raw, uid)
            settle = self._settler(self.member, uid)
            if email is None:  # not an email emailmw can read: settled at once
                settle("quarantine")
                continue
            out.append(
                IncomingEmail(email, redelivered=count > 1, delivery_count=count, settle=settle)
            )
        if self._mode == "stateful":  # a batch goes out in send order, the taken ones first
            out.sort(key=lambda item: (item.delivery_count == 1, _stamp(item.email)))
        return out

    def _claim_under_lock(self, work: Plan, now: float, alive: Sequence[str]) -> bool:
        """Carry ``work`` out holding the group's claim lock; False when another member
        holds it (the first live member breaks a lock one taking held for three expiries)."""
        store = self._store
        if not store.try_lock(self.member):  # busy: the next round tries again
            self.counts["lock_busy"] += 1
            # one taking of the lock held for three expiries (a live holder keeps it for
            # milliseconds, a slow server may stretch that to tenths of a second): its
            # holder died holding it; the first live member breaks it
            self._busy_since = self._busy_since or now
            if now - self._busy_since < self.settings.expiry / 2:
                return False  # taken and given back all the time: nothing to look at yet
            taking = store.lock_id()
            if taking is None:
                self._lock_seen = None
                return False
            if self._lock_seen is None or self._lock_seen[0] != taking:
                self._lock_seen = (taking, now)
            held = now - self._lock_seen[1]
            if alive and alive[0] == self.member and held >= 3 * self.settings.expiry:
                _log.warning(
                    "group %s: one taking of the claim lock held %.1f s: its holder died "
                    "holding it; breaking it",
                    self.group, held,
                )  # fmt: skip
                store.break_lock()
                self._lock_seen = None
            return False
        self._lock_seen = None
        self._busy_since = None
        self.counts["locked"] += 1
        try:
            for member, uids in work.take.items():
                store.take(uids, member, self.member)
                self.counts["taken"] += len(uids)
                _log.info(
                    "group %s: %s took %d claims of %s (not alive for %.1f s)",
                    self.group, self.member, len(uids), member, self.settings.expiry,
                )  # fmt: skip
            if work.claim:
                store.claim(work.claim, self.member)
        finally:
            store.unlock()
        return True

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
                found = self._round(time.monotonic())
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


def _stamp(email: Email) -> int:
    value = email.headers.get("Source-Timestamp", "").strip()
    return int(value) if value.isdigit() and len(value) < 20 else 0


def _new_member() -> str:
    return secrets.token_hex(4)


# the receiver's callables, typed here to keep the module free of transport imports
from collections.abc import Callable  # noqa: E402

ParseRaw = Callable[[bytes, int], Email | None]
Settle = Callable[[str], None]


class GroupConsumer:
    """A group subscription's own receiving: a :class:`GroupReceiver` on a new connection
    of the context's account and a polling thread that hands the claimed messages of
    ``topic`` to ``sink`` (the subscription). Joins the group at once; :meth:`close`
    stops it (its claims pass to another member once its record expires)."""

    def __init__(
        self,
        context: Context,
        topic: str,
        mode: str,
        group: str,
        sink: MessageSink,
        settings: GroupSettings | None = None,
    ) -> None:
        from ._polling import PollingManager
        from ._protocol import PublishRoute
        from ._transport.common import parse_fetched

        options = context.options
        if options.on_receive != "keep":
            raise ConfigError(
                f"a {mode} group reads the account's inbox with the others: on-receive must "
                f"be keep (it is {options.on_receive!r}); the group moves what it processed "
                "to its done folder itself",
                source=options.source,
                key="email.on-receive",
            )
        store = context.receiver.group_store(group)
        self.receiver = GroupReceiver(
            store,
            settle_store=context.receiver.group_store(group),
            mode=mode,
            group=group,
            topic=topic,
            parse=lambda raw, uid: parse_fetched(
                raw, uid=uid, where=f"group {group}", max_size=options.max_message_size
            ),
            settings=settings,
            quarantine=options.quarantine,
        )

        def handler(email: Email, route: object, ticket: Ticket) -> None:
            if isinstance(route, PublishRoute) and route.topic == topic:
                sink._push_message(email.body, route.info, ticket.hold())

        self._polling = PollingManager(
            self.receiver,
            name=f"emailmw-group-{group}",
            security=context.security,
            acknowledge=lambda email, count: context.acknowledge(
                email, count, member=self.receiver.member
            ),
        )
        self._polling.register_handler(handler)
        self._polling.start()

    @property
    def member(self) -> str:
        return self.receiver.member

    def close(self, timeout: float = 5.0) -> None:
        self._polling.stop(timeout)
        self.receiver.close()


if TYPE_CHECKING:
    from ._context import Context
    from ._handlers import MessageSink
    from ._polling import Ticket
