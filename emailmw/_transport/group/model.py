"""The group protocol's pure part and its store contract.

Delivery modes of a subscription group (``docs/delivery-modes.md``): ``stateful`` (one
active consumer, standbys take over in order) and ``stateless`` (each message processed by
exactly one member), over a mailbox every member reads.

The protocol runs on the mail store itself, through a :class:`GroupStore` (IMAP:
``group/imap.py``; in process: ``group/memory.py``):

* **membership**: each member has a record in the group's members folder; its order is the
  record's UID (everyone sees the same order), its liveness a token (IMAP: the record's
  MODSEQ) it changes every ``heartbeat`` seconds. A member whose token has not changed for
  ``expiry`` seconds, as an observer's own clock measures it, is dead to that observer;
* **lease**: a member may hand out what it holds only while its own clock says nobody can
  see it dead yet (:class:`Lease`); a member that finds its lease lapsed (it was paused, or
  its heartbeats stalled) checks, under the claim lock, which of its claims are still its
  own before it hands anything out again; what was taken over is dropped from memory;
* **claiming**: a member claims messages by moving them (IMAP ``UID MOVE``) from the inbox
  into its own claims folder while it holds the group's claim lock (a folder it creates:
  of several members creating it, exactly one succeeds; neither MOVE nor a conditional
  STORE decides between Dovecot sessions). What is in a member's claims folder is its own.
  A member claims no more than it has room for (``prefetch``, the subscription's depth and
  the context's receive budget): a full queue is back-pressure, never a drop;
* **delivering**: right before the application gets a message, the member checks its lease
  and records the delivery in the store (the keyword ``DeliveryN``: N applications got it);
  the delivery count the application sees is that N;
* **acknowledging**: once the application is done with it, the message moves on to the
  member's done folder; nothing is ever deleted;
* **taking over**: under the claim lock, with the members read again there, a dead
  member's claims move into a live member's claims folder (flagged ``$Taken``); the record
  and the empty folder of the dead member are then removed; a lock whose holder is dead is
  broken by the first live member (one that names no holder, after half an expiry);
* **hanging**: a member that holds an unacknowledged message longer than ``ack_timeout``
  stops heartbeating, so the others take its claims as from a dead member; once it is done
  it joins again under a new name, at the back of the order.

:func:`plan` (what to claim and take in one round), :class:`Liveness` and :class:`Lease` are
pure and tested without a store; ``group/receiver.py``'s ``GroupReceiver`` runs them
against a store as an :class:`~emailmw.EmailReceiver`, so that a group subscription has its
own polling thread (``emailmw._delivery.groups.GroupConsumer``) with the usual classification,
security decisions and tickets.
"""

from __future__ import annotations

import abc
import re
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from ..._core.errors import InvalidArgumentError
from ..._core.wire import publisher_sequence

__all__ = [
    "MODES",
    "GroupSettings",
    "GroupStore",
    "Head",
    "Holding",
    "Lease",
    "Liveness",
    "MemberRecord",
    "Plan",
    "check_group",
    "order_gaps",
    "owner",
    "stream_of",
    "plan",
]

MODES: Final = ("topic", "stateful", "stateless")
_GROUP_RE: Final = re.compile(r"[A-Za-z0-9_]{1,40}")
#: the part of an expiry a lease keeps in hand for clocks that run at slightly different rates
LEASE_MARGIN: Final = 0.1


def check_group(mode: str, group: str | None) -> None:
    """Raise ``ValueError`` for an unknown mode, or a group name a mode needs and lacks."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "topic":
        if group is not None:
            raise InvalidArgumentError("a group name goes with mode='stateful' or 'stateless'")
        return
    if group is None or not _GROUP_RE.fullmatch(group):
        raise InvalidArgumentError(
            f"mode={mode!r} needs group=, a name of 1 to 40 letters, digits or _ (got {group!r})"
        )


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Timing of the group protocol (seconds). ``prefetch``: messages a member holds at
    most (also bounded by its subscription's depth); ``steal_after``: how long a message
    waits for the member whose share it is before any member may claim it (stateless);
    ``reorder``: how long a stateful group's active member lets a message wait in the inbox
    before claiming it, so that messages sent before it and delivered up to that much later
    are processed first (mail servers deliver in parallel: arrival order is not send
    order); ``gap_wait``: how long it waits, beyond that, for a publisher's earlier message
    that has not arrived when a later one of the same publisher has (its
    ``Publisher-Sequence-Number`` says one is missing: a busy server delivers it seconds
    late), before it takes the earlier one as lost. ``max_deliveries``: how many
    applications a message is handed to, at most, when each one's callback raises (a
    negative acknowledgement: it is offered again, to another member where there is one),
    before it is quarantined with the exception's one-line summary (JetStream's MaxDeliver,
    Kafka's dead-letter topic)."""

    heartbeat: float = 0.2
    expiry: float = 0.8
    ack_timeout: float = 30.0
    poll: float = 0.05
    prefetch: int = 10
    steal_after: float = 0.25
    reorder: float = 0.25
    gap_wait: float = 30.0
    max_deliveries: int = 5

    def __post_init__(self) -> None:
        if not isinstance(self.max_deliveries, int) or self.max_deliveries < 1:
            raise InvalidArgumentError(
                f"max_deliveries must be a positive int, got {self.max_deliveries!r}"
            )


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """A member's record: its name, its order (the record's UID), its liveness token,
    whether it holds (names itself the holder of) the group's claim lock, and where it says
    so (its lock marker, kept apart from the record so that naming itself the holder, or
    another member clearing that, never changes its liveness token; 0: none)."""

    member: str
    order: int
    token: int
    locking: bool = False
    marker: int = 0


@dataclass(frozen=True, slots=True)
class Head:
    """What a member reads of an inbox message before it claims it: its Subject,
    Source-Timestamp (0 when absent or broken), ``Route-To`` ('' when absent), size, and
    for a batch email (``_packing``) how many messages it carries (``count``; 0: one
    message, the email itself). A batch email names the subject of its messages in its own
    Subject (``emailmw batch of N: /topic``), and carries its first message's
    Source-Timestamp and its messages' ``Route-To`` (they share one: the outbox batches
    messages of one subject to one envelope and route together)."""

    subject: str
    stamp: int = 0
    route_to: str = ""
    size: int = 0
    count: int = 0
    part_of: str = ""  # a part of a message sent as several emails: the whole's Message-ID
    delivered: int = 0  # how many applications got it before (offered again: DeliveryN)
    stream: str = ""  # its publisher (Publisher-GID; a batch's: of all its messages), or ''
    seq: int = -1  # its Publisher-Sequence-Number (a batch's: its first message's), or -1

    @property
    def covers(self) -> int:
        """How many of its publisher's sequence numbers it carries, from ``seq`` on."""
        return max(1, self.count)

    def share_key(self, uid: int) -> int:
        """What decides the member whose share it is (:func:`owner`): its UID (a message
        offered again goes to the next member: its deliveries count in); for a part, its
        message (every part of one message goes to one member, which joins them: in the
        inbox and when taken over from a member that died, :func:`part_key`)."""
        if self.part_of:
            return part_key(self.part_of)
        return uid + self.delivered

    @property
    def subjects(self) -> tuple[str, ...]:
        """The subjects of the messages it carries: its own, or those a batch names."""
        if not self.count:
            return (self.subject,)
        _, colon, names = self.subject.partition(":")
        return tuple(names.split()) if colon else ()

    def carries_only(self, subject: str) -> bool:
        """Whether every message it carries has Subject ``subject`` (what a member of a
        subscription to it claims: a batch of other subjects too is left to their readers)."""
        found = self.subjects
        return bool(found) and all(s == subject for s in found)


def part_key(part_of: str) -> int:
    """The share key of every part of the message ``part_of`` names."""
    return zlib.crc32(part_of.encode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class Holding:
    """One message in a member's claims folder: its size, how many applications got it so
    far (the ``DeliveryN`` keyword, 0 for none), whether it was taken over from a member
    that failed (``$Taken``), for a batch email how many messages it carries and how many
    of them (from the first) applications got, and whether it is a part of a message sent
    as several emails."""

    size: int
    delivered: int = 0
    taken: bool = False
    count: int = 0  # a batch email: the messages it carries (0: one, the email itself)
    part: bool = False
    given: int = 0  # a batch email: how many of its messages, from the first, applications got


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


class Lease:
    """A member's right to hand out what it holds, by its own clock (the fence of
    ``docs/delivery-modes.md``).

    Another member sees this one dead only once its token has not changed for ``expiry``
    seconds since that observer first saw it, and it saw it no earlier than the heartbeat
    (or join) that set it began. So from the start of a heartbeat the store took, nobody can
    take this member's claims over for ``expiry`` seconds: the lease runs until then (less
    a margin for clock rates). A heartbeat renews it only when it completes while the lease
    still holds; one that completes later finds the lease **lapsed** (the member was paused,
    or its heartbeats stalled): its claims may have been taken over, and it must check them
    under the claim lock (:meth:`start` again) before handing anything out. Pure: the times
    are given. Thread-safe."""

    def __init__(self, expiry: float, margin: float = LEASE_MARGIN) -> None:
        self._length = expiry * (1.0 - margin)
        self._from: float | None = None
        self._lapsed = False
        self._lock = threading.Lock()

    def start(self, at: float) -> None:
        """The lease holds from ``at`` (a join, or a check under the claim lock after a
        heartbeat that began at ``at``)."""
        with self._lock:
            self._from, self._lapsed = at, False

    def renewed(self, started: float, done: float) -> bool:
        """A heartbeat that began at ``started`` completed at ``done``: True when it renews
        the lease, False when it found the lease lapsed (or never started)."""
        with self._lock:
            if self._from is None or self._lapsed or done >= self._from + self._length:
                self._lapsed = self._from is not None
                return False
            self._from = max(self._from, started)
            return True

    def valid(self, now: float) -> bool:
        """Whether the member may hand out what it holds at ``now``."""
        with self._lock:
            if self._from is None or self._lapsed:
                return False
            if now >= self._from + self._length:
                self._lapsed = True
                return False
            return True

    @property
    def lapsed(self) -> bool:
        return self._lapsed

    def lapse(self) -> None:
        with self._lock:
            self._lapsed = self._from is not None

    def end(self) -> None:
        """No lease any more (the membership ended)."""
        with self._lock:
            self._from, self._lapsed = None, False


@dataclass(frozen=True, slots=True)
class Plan:
    """One round's work: inbox UIDs to claim, and per dead member the claims to take."""

    claim: list[int] = field(default_factory=list)
    take: dict[str, list[int]] = field(default_factory=dict)


def owner(uid: int, alive: Sequence[str]) -> str:
    """The member whose share message ``uid`` is: the same answer for every member that
    sees the same live members (msm's rule, with the UID as the key)."""
    return alive[uid % len(alive)]


def stream_of(fields: Mapping[str, str]) -> tuple[str, int]:
    """A head's publisher and sequence number (:attr:`Head.stream`, :attr:`Head.seq`) from
    its fields by lower-case name, as :func:`~emailmw._core.wire.publisher_sequence` reads
    them: ``('', -1)`` when either is absent or broken."""
    return publisher_sequence(fields.get("publisher-gid"), fields.get("publisher-sequence-number"))


def order_gaps(waiting: Sequence[tuple[int, Head]], expected: Mapping[str, int]) -> frozenset[int]:
    """The waiting UIDs (in the order they are to be processed) that a stateful group
    must not claim yet: an earlier message of the same publisher has not arrived.
    ``expected``: the next sequence number of each publisher after what the member
    claimed or handed out; for a publisher it has not seen yet, its lowest number waiting
    (so a gap among the waiting shows: 0 and 2 there, 1 not, holds 2; a message missing
    before the lowest waiting one cannot be told from one processed before this member
    was active). A message counts as arrived once it waits, whatever its place among the
    waiting; the parts of a message sent as several emails are held and let go as one
    (they carry its number); one with no sequence number (a service call, a C++ peer's
    message) is never held."""
    present: dict[str, list[tuple[int, int, int]]] = {}
    for uid, head in waiting:
        if head.stream and head.seq >= 0:
            present.setdefault(head.stream, []).append((head.seq, head.covers, uid))
    held: set[int] = set()
    for stream, found in present.items():
        found.sort()
        following = expected.get(stream, found[0][0])
        for seq, covers, _ in found:
            if seq > following:  # one before it is missing: it and what follows wait
                held.update(u for s, _, u in found if s >= seq)
                break
            following = max(following, seq + covers)
    return frozenset(held)


def plan(
    mode: str,
    me: str,
    alive: Sequence[str],
    dead_claims: Mapping[str, Sequence[int]],
    waiting: Sequence[tuple[int, float]],
    held: int,
    settings: GroupSettings,
    limit: int | None = None,
    weight: Mapping[int, int] | None = None,
    keys: Mapping[int, int] | None = None,
    whole: frozenset[int] = frozenset(),
    dead_keys: Mapping[str, Mapping[int, int]] | None = None,
    joiners: Mapping[int, str] | None = None,
    gaps: frozenset[int] = frozenset(),
) -> Plan:
    """What member ``me`` claims and takes this round. ``alive``: the live members in
    order (``me`` among them); ``dead_claims``: the claims of each dead member, the dead in
    their order; ``waiting``: the unclaimed inbox messages (UID, seconds waited) in the
    order they are to be processed (stateful: by Source-Timestamp); ``held``: messages
    ``me`` holds unacknowledged; ``limit``: what it may hold at most (default ``prefetch``);
    ``weight``: how many messages each waiting UID carries (a batch email; default 1);
    ``keys``: each waiting UID's share key (:meth:`Head.share_key`; default the UID);
    ``whole``: UIDs never stolen from their owner (parts of a message: one member joins
    them); ``dead_keys``: the share keys of dead members' claims that are parts (by their
    UID in that member's folder), so that a part taken over goes where the rest of its
    message goes; ``joiners``: the share keys of messages some live member holds parts of
    already, and that member: the rest of such a message's parts are its, whoever's share
    the key is now (the members changed since it claimed the first: a message is never
    split across members); ``gaps``: (stateful) UIDs an earlier message of whose publisher
    has not arrived (:func:`order_gaps`): claimed, with what follows them, only once they
    waited ``gap_wait``.
    Claims and takes together never exceed the room left (but for one batch email that is
    larger than the room: it is claimed whole, by one member): a full member takes on
    nothing."""
    if me not in alive:
        return Plan()
    limit = settings.prefetch if limit is None else limit
    room = max(0, limit - held)
    take: dict[str, list[int]] = {}
    if mode == "stateful":
        if alive[0] != me:
            return Plan()  # a standby
        left = False
        for member, uids in dead_claims.items():  # the dead's claims first, in their order
            parts = frozenset((dead_keys or {}).get(member, {}))  # (they take no room)
            part = _within(uids, room, None, parts)
            if part:
                take[member] = part
                room -= len([u for u in part if u not in parts])
            left = left or len(part) < len(uids)
        if left or take:
            # what the dead held goes before anything newer, and is read before anything
            # newer is claimed: its messages say where each publisher is (was: claimed in
            # the same round, a message past one still missing went first)
            return Plan([], take)
        ready = []
        for uid, waited in waiting:  # in send order: stop at the first still settling
            if waited < settings.reorder or (uid in gaps and waited < settings.gap_wait):
                break
            ready.append(uid)
        return Plan(_within(ready, room, weight, whole), take)
    joined = {k: m for k, m in (joiners or {}).items() if m in alive}
    key = (lambda uid: uid) if keys is None else (lambda uid: keys.get(uid, uid))

    def share(key: int) -> str:
        return joined.get(key) or owner(key, alive)

    # the rest of a message it joins already, whatever its room (the parts wait on disk
    # until joined: room for one message)
    joining = [uid for uid, _ in waiting if joined.get(key(uid)) == me]

    for member, uids in dead_claims.items():
        keyed = (dead_keys or {}).get(member, {})  # (its parts: they take no room, see
        # joining; taking some only could leave this member full of parts waiting for
        # the others, which it then never had room to take)
        mine = [u for u in uids if share(keyed.get(u, u)) == me]
        fits = [u for u in mine if u not in keyed][:room]
        mine = [u for u in mine if u in keyed or u in fits]
        if mine:
            take[member] = mine
            room -= len(fits)
    holding = held + sum(len(uids) for uids in take.values())
    if holding and room < (limit + 1) // 2:
        return Plan(joining, take)  # claims go in batches: one claim lock for several
    # its own share first, in order; then, with room left, others' messages that waited
    # too long, newest first (their owners claim from the oldest: fewer collisions)
    mine = [uid for uid, _ in waiting if share(key(uid)) == me and uid not in joining]
    stolen = [uid for uid, waited in reversed(waiting)
              if share(key(uid)) != me and waited >= settings.steal_after
              and uid not in whole]  # fmt: skip
    # a message's parts are claimed together, as one message (its first part takes the
    # room): was, with room for fewer than its parts, the rest left in the inbox for the
    # next round, and a member that saw the members otherwise claimed them (#64)
    started: set[int] = set()  # (messages whose first part is in mine)
    rest: set[int] = set()  # (their other parts)
    for uid in mine:
        if uid in whole:
            (rest.add(uid) if key(uid) in started else started.add(key(uid)))
    chosen = _within(mine + stolen, room, weight, frozenset(rest))
    begun = {key(uid) for uid in chosen if uid in whole}
    chosen += [u for u in mine if u in rest and u not in chosen and key(u) in begun]
    return Plan(joining + chosen, take)


def _within(
    uids: Sequence[int],
    room: int,
    weight: Mapping[int, int] | None,
    free: frozenset[int] = frozenset(),
) -> list[int]:
    """The first of ``uids`` whose messages fit in ``room`` (at least one, with room);
    those in ``free`` (parts: they wait on disk until joined) take none."""
    chosen: list[int] = []
    fitted = False
    for uid in uids:
        if uid in free:
            chosen.append(uid)
            continue
        need = max(1, (weight or {}).get(uid, 1))
        if room <= 0 or (fitted and need > room):
            break
        chosen.append(uid)
        fitted = True
        room -= need
    return chosen


class GroupStore(abc.ABC):
    """The mail-store operations of the group protocol (see the module). Used by one
    thread; every method may raise a :class:`~emailmw.TransportError`."""

    #: seconds this store takes at least to release the claim lock (a folder deletion:
    #: 2 on Courier-IMAP); a liveness horizon (``expiry``) must reach well past it
    slow_release: float = 0.0

    #: why it was made without its connection (the account had none free), or None
    refusal: str | None = None

    @property
    def connected(self) -> bool:
        """Whether it holds its connection now (one made while the account had none free
        connects at its first command)."""
        return True

    @abc.abstractmethod
    def members(self) -> list[MemberRecord]: ...

    @abc.abstractmethod
    def join(self, member: str) -> None: ...

    @abc.abstractmethod
    def beat(self, member: str, order: int, on: bool) -> None:
        """Change the token of ``member``'s record (its UID: ``order``): ``on`` sets the
        liveness keyword, else clears it (the caller alternates, so each beat changes it)."""

    @abc.abstractmethod
    def remove_member(self, record: MemberRecord) -> None:
        """Remove a dead member's record and its (empty) claims folder (a record of order
        0: a claims folder whose member has no record, :meth:`claimants`)."""

    def claimants(self) -> list[str]:
        """The members that have a claims folder (it may be empty). A store that cannot
        tell says none."""
        return []

    @abc.abstractmethod
    def inbox(self) -> list[int]:
        """The UIDs in the inbox, ascending."""

    @abc.abstractmethod
    def headers(self, uids: Sequence[int]) -> dict[int, Head]:
        """What a member reads of inbox ``uids`` before claiming (:class:`Head`)."""

    @abc.abstractmethod
    def try_lock(self, record: MemberRecord) -> bool:
        """Take the group's claim lock for the member of ``record`` and name it the holder
        (its record's ``locking``): True for at most one of several members trying, until
        :meth:`unlock`."""

    @abc.abstractmethod
    def unlock(self, record: MemberRecord) -> None:
        """Give the claim lock back (the holder no longer named, then the lock free)."""

    @abc.abstractmethod
    def locked(self) -> bool:
        """Whether the claim lock is taken (its holder: the record whose ``locking`` is
        set; none while the taker has not named itself yet)."""

    @abc.abstractmethod
    def break_lock(self, holder: MemberRecord | None) -> None:
        """Release a lock its holder (None: unnamed) left: it died holding it."""

    @abc.abstractmethod
    def claim(self, uids: Sequence[int], member: str) -> None:
        """Move ``uids`` from the inbox into ``member``'s claims (those still there); call
        with the claim lock held."""

    @abc.abstractmethod
    def claimed(self, member: str) -> list[int]:
        """The UIDs in ``member``'s claims folder, ascending."""

    def claimed_parts(self, member: str) -> dict[int, str]:
        """Of ``member``'s claims, the parts of messages: UID -> the whole's Message-ID
        (``Part-Of``). A store that cannot tell says none."""
        return {}

    @abc.abstractmethod
    def holding(self, member: str) -> dict[int, Holding]:
        """``member``'s claims by UID, with what :class:`Holding` says of each."""

    @abc.abstractmethod
    def take(self, uids: Sequence[int], dead: str, member: str) -> None:
        """Move ``uids`` from ``dead``'s claims into ``member``'s, flagged ``$Taken``; call
        with the claim lock held."""

    @abc.abstractmethod
    def fetch(self, member: str, uids: Sequence[int]) -> dict[int, bytes]:
        """The raw bytes of ``member``'s claims ``uids`` (those still there)."""

    @abc.abstractmethod
    def mark(self, member: str, uid: int, delivered: int, given: int = 0) -> bool:
        """Record that ``delivered`` applications got ``member``'s claim ``uid`` and, for a
        batch email, that its first ``given`` messages went to applications (0: nothing to
        record; the record keeps the largest): True when the record is on the claim, still
        in ``member``'s claims folder (a member that takes it over later sees it, as
        :attr:`Holding.given`), False when the claim is gone (taken over already): the
        fence that holds whatever the member's clock says (a pause, a suspended machine)."""

    @abc.abstractmethod
    def settle(self, member: str, uids: Sequence[int], folder: str | None) -> None:
        """Move ``member``'s claims ``uids`` to the done folder (``folder`` None) or to
        ``folder`` (the quarantine, or :attr:`inbox_folder`: offered again, its keywords
        kept)."""

    @abc.abstractmethod
    def give_back(self, member: str, uids: Sequence[int]) -> None:
        """Move ``member``'s claims ``uids`` back to the inbox, flagged ``$Taken`` (they
        came back through the group: the member that claims them next says so); call
        with the claim lock held."""

    @abc.abstractmethod
    def offer(self, raw: bytes, delivered: int) -> None:
        """Put ``raw`` (one message of a batch email, offered again on its own) in the
        inbox, recorded as got by ``delivered`` applications (``DeliveryN``)."""

    @property
    @abc.abstractmethod
    def inbox_folder(self) -> str:
        """The folder the group reads (a claim moved there is offered again)."""

    def close(self) -> None:  # noqa: B027 - optional
        pass
