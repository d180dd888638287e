"""The pure parts of the group protocol: liveness and each round's plan, table-driven,
and the protocol rounds against the in-process store with a fake clock."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from emailmw._core.carried import Carried, unpack
from emailmw._core.errors import ReceiveError
from emailmw._core.packing import split_email
from emailmw._core.types import Email, Headers
from emailmw._transport.budget import ReceiveBudget
from emailmw._transport.group.memory import MemoryGroupStore, MemoryMailbox
from emailmw._transport.group.model import (
    GroupSettings,
    Head,
    Lease,
    Liveness,
    MemberRecord,
    Plan,
    check_group,
    order_gaps,
    owner,
    part_key,
    plan,
)
from emailmw._transport.group.receiver import GroupReceiver

from .test_group_simulation import App

S = GroupSettings(prefetch=3, steal_after=1.0, reorder=0.2)


def test_a_member_is_alive_while_its_token_changes_within_the_expiry() -> None:
    live = Liveness(expiry=1.0)
    records = [MemberRecord("a", 1, 5), MemberRecord("b", 2, 7)]
    live.update(records, now=0.0)
    assert live.alive(records, 0.9) == ["a", "b"]
    beat = [MemberRecord("a", 1, 6), MemberRecord("b", 2, 7)]
    live.update(beat, now=0.9)
    assert live.alive(beat, 1.5) == ["a"]  # b's token has not changed for 1.5 s
    assert live.alive(beat, 1.95) == []
    # a member seen for the first time counts as alive from then
    late = [*beat, MemberRecord("c", 3, 1)]
    live.update(late, now=5.0)
    assert live.alive(late, 5.5) == ["c"]


def test_the_order_is_the_records_order_not_the_listing_order() -> None:
    live = Liveness(expiry=1.0)
    records = [MemberRecord("late", 9, 1), MemberRecord("early", 2, 1)]
    live.update(records, 0.0)
    assert live.alive(records, 0.1) == ["early", "late"]


@pytest.mark.parametrize(
    ("me", "alive", "dead", "waiting", "held", "expected"),
    [
        # the first live member is active and claims in order, up to prefetch
        ("a", ["a", "b"], {}, [(5, 1.0), (3, 1.0), (9, 1.0), (10, 1.0)], 0, Plan([5, 3, 9])),
        ("a", ["a", "b"], {}, [(5, 1.0), (3, 1.0)], 2, Plan([5])),
        # a standby does nothing
        ("b", ["a", "b"], {"c": [1, 2]}, [(5, 1.0)], 0, Plan()),
        # the active takes the dead members' claims first, and claims in a later round
        # (what it took says where each publisher is: read before anything newer is claimed)
        ("a", ["a"], {"c": [1, 2]}, [(5, 1.0), (6, 1.0)], 0, Plan([], {"c": [1, 2]})),
        # a message still within the reorder wait stops the claiming in send order
        ("a", ["a"], {}, [(5, 1.0), (7, 0.1), (6, 1.0)], 0, Plan([5])),
        # not alive (hung): nothing
        ("a", [], {}, [(5, 1.0)], 0, Plan()),
        # takeovers count against the room; what the dead held goes before anything newer
        ("a", ["a"], {"c": [1, 2, 3, 4]}, [(5, 1.0)], 1, Plan([], {"c": [1, 2]})),
        ("a", ["a"], {"c": [1, 2, 3, 4]}, [(5, 1.0)], 3, Plan()),
    ],
)
def test_stateful_plans(
    me: str,
    alive: list[str],
    dead: dict[str, list[int]],
    waiting: list[tuple[int, float]],
    held: int,
    expected: Plan,
) -> None:
    assert plan("stateful", me, alive, dead, waiting, held, S) == expected


@pytest.mark.parametrize(
    ("me", "alive", "dead", "waiting", "held", "expected"),
    [
        # each claims its share (UID mod the live members)
        ("a", ["a", "b"], {}, [(1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0)], 0, Plan([2, 4])),
        ("b", ["a", "b"], {}, [(1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0)], 0, Plan([1, 3])),
        # a message its owner left waiting past steal_after is anyone's
        ("a", ["a", "b"], {}, [(1, 1.5), (2, 0.0)], 0, Plan([2, 1])),
        # its own share first, then others' that waited too long, newest first
        ("a", ["a", "b"], {}, [(1, 2.0), (3, 1.5), (4, 0.0), (5, 0.1)], 0, Plan([4, 3, 1])),
        # prefetch bounds what a member holds
        ("a", ["a"], {}, [(1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0)], 1, Plan([1, 2])),
        # holding some, too little room for a batch: it waits (one lock, several claims)
        ("a", ["a"], {}, [(1, 0.0)], 2, Plan()),
        # a dead member's claims are shared out by the same rule
        ("a", ["a", "b"], {"c": [10, 11, 12]}, [], 0, Plan([], {"c": [10, 12]})),
        ("b", ["a", "b"], {"c": [10, 11, 12]}, [], 0, Plan([], {"c": [11]})),
        # a member with no room takes over nothing either: others will, or itself later
        ("a", ["a"], {"c": [1, 2, 3, 4, 5]}, [(9, 0.0)], 1, Plan([], {"c": [1, 2]})),
        ("a", ["a"], {"c": [1, 2]}, [(9, 0.0)], 3, Plan()),
    ],
)
def test_stateless_plans(
    me: str,
    alive: list[str],
    dead: dict[str, list[int]],
    waiting: list[tuple[int, float]],
    held: int,
    expected: Plan,
) -> None:
    assert plan("stateless", me, alive, dead, waiting, held, S) == expected


def test_every_member_agrees_on_the_owner_of_each_message() -> None:
    alive = ["a", "b", "c"]
    owners = [owner(uid, alive) for uid in range(300)]
    assert {o: owners.count(o) for o in alive} == {"a": 100, "b": 100, "c": 100}
    for uid in range(300):  # exactly one member plans to claim each message
        claimers = [
            m for m in alive if uid in plan("stateless", m, alive, {}, [(uid, 0)], 0, S).claim
        ]
        assert claimers == [owner(uid, alive)]


@pytest.mark.parametrize(
    ("mode", "group", "message"),
    [
        ("queue", None, "mode must be one of"),
        ("stateless", None, "needs group="),
        ("stateful", "has space", "needs group="),
        ("topic", "g", "goes with mode="),
    ],
)
def test_modes_and_group_names_are_checked(mode: str, group: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_group(mode, group)


class Clock:
    """A fake monotonic clock the rounds and the fences read."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _world(*subjects: str, settings: GroupSettings | None = None) -> Any:
    """An in-process group store with ``subjects`` waiting in the inbox."""
    box = MemoryMailbox()
    store = MemoryGroupStore(box, "g")
    for i, subject in enumerate(subjects):
        box.deliver(
            Email(subject, f"m{i}", "a@x", ("g@x",),
                  headers=Headers({"Source-Timestamp": str(i + 1)}))
        )  # fmt: skip
    return box, store


def _member(
    box: MemoryMailbox, clock: Clock, settings: GroupSettings | None = None, **kwargs: Any
) -> GroupReceiver:
    return GroupReceiver(
        MemoryGroupStore(box, "g"), mode=kwargs.pop("mode", "stateless"), group="g",
        wants=lambda head: head.carries_only("/t"), unpack=_unpack,
        settings=settings or GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0),
        clock=clock, **kwargs,
    )  # fmt: skip


def _unpack(raw: bytes, uid: int) -> list[Carried]:
    return unpack(raw)


def _until_handed_out(receiver: GroupReceiver, clock: Clock) -> tuple[list[Any], float]:
    """Rounds (every 0.05 s of the fake clock) until one hands something out: what it
    handed out, and after how long (at most 10 s)."""
    got: list[Any] = []
    start = clock.now
    while not got and clock.now < start + 10:
        got += receiver._round(clock.now)
        clock.now += 0.05
    return got, clock.now - start


def _rounds(receiver: GroupReceiver, clock: Clock, seconds: float, step: float = 0.05) -> list[Any]:
    got: list[Any] = []
    end = clock.now + seconds
    while clock.now < end:
        got += receiver._round(clock.now)
        clock.now += step
    return got


def test_a_lock_whose_named_holder_is_dead_is_broken_at_once() -> None:
    """The lock names its holder: once that member is dead to the first live member, the
    lock is broken at its first look (not three expiries later), and the message claimed."""
    box, store = _world("/t")
    store.join("ghost")
    assert store.try_lock(store.members()[0])  # and then it died holding it
    got, took = _until_handed_out(_member(box, clock := Clock()), clock)
    assert [incoming.email.body for incoming in got] == ["m0"]
    # the ghost is dead one expiry after it was first seen; the lock goes at the next look
    assert took <= 1.0 + 0.25 + 0.1
    assert not store.locked()
    assert not any(r.locking for r in store.members())


def test_a_member_that_took_a_dead_members_claims_leaves_no_stale_lock_name() -> None:
    """Taking over (the dead member forgotten under the lock) releases the lock in this
    member's name: its record does not go on naming it the holder. (It did: the lock was
    released in the dead member's name, this member's record named the holder forever,
    and once another taking left the lock behind, no live member would break it: the
    group stopped claiming.)"""
    box, store = _world("/t", "/t")
    store.join("ghost")
    ghost = store.members()[0]
    store.claim(store.inbox()[:1], "ghost")  # and then it died holding a claim
    member = _member(box, clock := Clock())
    got = _rounds(member, clock, 2.0)
    assert sorted(incoming.email.body for incoming in got) == ["m0", "m1"]
    assert [r.member for r in store.members()] == [member.member]  # the ghost forgotten
    assert ghost.member not in {r.member for r in store.members()}
    assert not any(r.locking for r in store.members())
    assert not store.locked()


def test_a_lock_left_in_a_live_members_own_name_is_broken_by_that_member() -> None:
    """A release that failed half way leaves the lock naming a live member that does not
    hold it: the others may not break it (its holder lives), so that member does, and
    the group claims again."""
    box, store = _world()
    member = _member(box, clock := Clock())
    _rounds(member, clock, 0.3)  # joined
    (mine,) = store.members()
    assert store.try_lock(mine)  # a release of the lock that never completed
    for i in range(2):
        box.deliver(Email("/t", f"m{i}", "a@x", ("g@x",),
                          headers=Headers({"Source-Timestamp": str(i + 1)})))  # fmt: skip
    got = _rounds(member, clock, 2.0)
    assert sorted(incoming.email.body for incoming in got) == ["m0", "m1"]
    assert not any(r.locking for r in store.members())


def test_a_lock_that_names_no_holder_is_broken_after_half_an_expiry() -> None:
    """A taking that died before naming itself (or a lock the store made for no one): a
    live taker names itself within a round trip, so the first live member breaks a lock
    that named nobody for half an expiry (looked at once it was busy a heartbeat)."""
    box, _ = _world("/t")
    box.locks.add("emailmw-g-")  # taken, never named
    got, took = _until_handed_out(_member(box, clock := Clock()), clock)
    assert [incoming.email.body for incoming in got] == ["m0"]
    assert 0.5 + 0.25 <= took <= 0.5 + 0.25 + 0.2


def test_a_lease_holds_for_the_expiry_from_a_heartbeat_that_completed_in_time() -> None:
    lease = Lease(expiry=1.0, margin=0.1)
    assert not lease.valid(0.0)  # not started
    lease.start(10.0)
    assert lease.valid(10.85)
    assert not lease.valid(10.95)  # 0.9 s: the margin kept in hand
    assert lease.lapsed
    lease.start(20.0)
    assert lease.renewed(20.3, 20.4)  # in time: from its start
    assert lease.valid(21.15)
    assert not lease.renewed(21.0, 21.3)  # completed after the lease ended: lapsed
    assert lease.lapsed
    assert not lease.valid(21.3)
    assert not lease.renewed(21.4, 21.45)  # a lapsed lease is not renewed by a heartbeat
    lease.start(21.4)  # (checked under the claim lock)
    assert lease.valid(22.0)


def test_a_paused_member_hands_out_nothing_it_held_once_another_took_it_over() -> None:
    """A member stopped past the expiry while its consumer holds claims: the claims are
    taken over (and processed there); resumed, it hands out none of them (lost, unsettled)
    and joins again under a new name."""
    box, _ = _world(*["/t"] * 4)
    clock = Clock()
    paused = _member(box, clock)
    held = _rounds(paused, clock, 0.2)
    assert [i.email.body for i in held] == ["m0", "m1", "m2", "m3"]
    assert all(i.claim is not None and i.claim.state() == "ready" for i in held)
    old = paused.member
    clock.now += 5.0  # stopped: no heartbeats
    assert held[0].claim.state() == "wait"  # its own clock says: not before checking
    other = _member(box, clock)
    taken = _rounds(other, clock, 2.0)
    assert sorted(i.email.body for i in taken) == ["m0", "m1", "m2", "m3"]
    assert all(i.delivery_count == 1 for i in taken)  # nobody had them: not flagged
    _rounds(paused, clock, 0.5)  # resumed: it checks under the lock
    assert [i.claim.state() for i in held] == ["lost"] * 4
    assert all(i.claim.deliver() is None for i in held)
    assert paused.member != old
    assert paused.counts["lost"] == 4


def test_a_member_whose_lease_lapsed_keeps_what_nobody_took() -> None:
    box, _ = _world("/t", "/t")
    clock = Clock()
    member = _member(box, clock)
    held = _rounds(member, clock, 0.2)
    clock.now += 3.0  # stalled, but alone: nobody takes its claims
    assert held[0].claim.state() == "wait"
    _rounds(member, clock, 0.2)
    assert [i.claim.state() for i in held] == ["ready", "ready"]
    assert held[0].claim.deliver() == 1


def test_the_delivery_count_is_what_applications_got_not_how_often_it_was_claimed() -> None:
    box, _ = _world("/t", "/t")
    clock = Clock()
    first = _member(box, clock)
    held = _rounds(first, clock, 0.2)
    assert held[0].claim.deliver() == 1  # its application gets m0, never settles it
    first.close()  # gone without acknowledging
    second = _member(box, clock)
    again = _rounds(second, clock, 3.0)
    assert {i.email.body: i.delivery_count for i in again} == {"m0": 2, "m1": 1}
    assert {i.email.body: i.claim.deliver() for i in again} == {"m0": 2, "m1": 1}


def test_a_member_holds_no_more_than_its_room_and_takes_over_no_more_either() -> None:
    """Room (prefetch, the consumer's capacity) caps claims and takeovers alike: the rest
    stays in the store for others, or for later."""
    box, _ = _world(*["/t"] * 8)
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0, prefetch=10)
    small = _member(box, clock, settings, capacity=2)
    got = _rounds(small, clock, 0.5)
    assert len(got) == 2
    assert small.holding == 2
    for incoming in got:
        assert incoming.claim.deliver() == 1
        incoming.ack()
    got += _rounds(small, clock, 0.5)
    assert len(got) == 4  # two more once the first two were settled


def _parts(message_id: str, count: int) -> list[Email]:
    """A message on /t sent as ``count`` parts (``_packing.split_email``)."""
    body = "".join(f"{n:07d}\n" for n in range(count))
    whole = Email("/t", body, "a@x", ("g@x",), headers=Headers({"Source-Timestamp": "1"}),
                  message_id=message_id)  # fmt: skip
    parts = split_email(whole, 8)
    assert len(parts) == count
    return parts


def test_a_plan_leaves_the_rest_of_a_message_to_the_member_joining_it() -> None:
    """A live member holds part 1 already: parts 2 and 3 are its to claim whatever the key's
    share is now, whatever its room; nobody else claims them; a dead holder counts not."""
    alive = ["m0", "m1"]
    key = part_key("<big1@x>")
    assert owner(key, alive) == "m1"
    waiting = [(12, 0.0), (13, 0.0)]
    args = (S, 2, None, {12: key, 13: key}, frozenset({12, 13}), None)
    joining = plan("stateless", "m0", alive, {}, waiting, 2, *args, {key: "m0"})
    assert joining.claim == [12, 13]  # (full: 2 held of 2)
    assert plan("stateless", "m1", alive, {}, waiting, 0, *args, {key: "m0"}).claim == []
    assert plan("stateless", "m1", alive, {}, waiting, 0, *args, {key: "gone"}).claim == [12, 13]


def test_a_member_joining_a_message_gets_its_other_parts_though_the_members_changed() -> None:
    """Part 1 went to the only member; a second joins (the message's key is its share now);
    then part 2 comes: the first member claims it and joins the message, its part 1 still
    its own (was: part 1 given back to the inbox, a message that could end split across
    members, each waiting for the other's part)."""
    box, _ = _world()
    clock = Clock()
    first, second = _parts("<big1@x>", 2)
    box.deliver(first)
    a = _member(box, clock)
    got = _rounds(a, clock, 0.2)
    assert [i.email.headers["Part"] for i in got] == ["1/2"]
    b = _member(box, clock)
    for _ in range(40):  # each sees the other alive
        _rounds(a, clock, 0.05)
        _rounds(b, clock, 0.05)
    assert a.alive == b.alive == [a.member, b.member]
    assert owner(part_key("<big1@x>"), a.alive) == b.member
    box.deliver(second)
    from_b = _rounds(b, clock, 0.3)
    from_a = _rounds(a, clock, 0.3)
    assert from_b == []
    assert [i.email.headers["Part"] for i in from_a] == ["2/2"]
    assert [i.claim.state() for i in got + from_a] == ["ready", "ready"]


def test_a_member_waiting_for_the_rest_of_a_message_is_not_hung() -> None:
    """A part waits with the consumer for the rest of its message longer than ack-timeout:
    the member heartbeats on and keeps it (part-timeout bounds that wait, not ack-timeout);
    was: it stopped heartbeating as hung, and two members each holding a part the other
    waited for both stopped, for good."""
    box, _ = _world()
    clock = Clock()
    box.deliver(_parts("<big1@x>", 2)[0])
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0, ack_timeout=2.0)
    a = _member(box, clock, settings)
    got = _rounds(a, clock, 0.2)
    b = _member(box, clock, settings)
    for _ in range(100):  # 5 s: past ack-timeout
        _rounds(a, clock, 0.05)
        _rounds(b, clock, 0.05)
    assert a.alive == [a.member, b.member]
    assert got[0].claim.state() == "ready"
    assert b.counts["taken"] == 0


@pytest.mark.parametrize("mode", ["stateless", "stateful"])
def test_a_message_of_more_parts_than_the_room_is_joined(mode: str) -> None:
    """A member with room for 2 gets all 5 parts of a message (they wait on disk until
    joined: room for one message); was: 2 handed out, the rest never, the message stuck
    (stateful too, until the active member's claims counted parts as taking no room)."""
    box, _ = _world()
    clock = Clock()
    for part in _parts("<big1@x>", 5):
        box.deliver(part)
    member = _member(box, clock, capacity=2, mode=mode)
    got = _rounds(member, clock, 1.0)
    assert sorted(i.email.headers["Part"] for i in got) == [f"{n}/5" for n in range(1, 6)]


def test_a_hung_member_s_settling_thread_waits_instead_of_spinning() -> None:
    """A member that stopped heartbeating (hung past ack-timeout) makes no heartbeat on its
    settling connection either: that thread sleeps between looks (was: it found a beat
    always due, made none, and looked again at once: a core at 100 %)."""
    box, _ = _world("/t")
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0, ack_timeout=2.0)
    member = _member(box, clock, settings, settle_store=MemoryGroupStore(box, "g"))
    try:
        got = _rounds(member, clock, 0.2)
        assert [i.claim.deliver() for i in got] == [1]  # its application never settles it
        _rounds(member, clock, 3.0)  # hung past ack-timeout
        assert not member._healthy
        looks = 0
        beat_wait = member._beat_wait

        def counted() -> float:
            nonlocal looks
            looks += 1
            return beat_wait()

        member._beat_wait = counted  # type: ignore[method-assign]
        member._settle_due.set()
        time.sleep(0.5)
        assert looks < 50, f"{looks} looks in 0.5 s"
    finally:
        member.close()


class _SlowStore(MemoryGroupStore):
    """A store whose next members read takes ``stall`` seconds of the fake clock (a slow
    server, or a process stopped in the middle of a round)."""

    def __init__(self, box: MemoryMailbox, clock: Clock) -> None:
        super().__init__(box, "g")
        self.clock = clock
        self.stall = 0.0

    def members(self) -> list[MemberRecord]:
        found = super().members()
        self.clock.now += self.stall
        self.stall = 0.0
        return found


def test_a_member_stalled_in_a_round_sees_a_live_member_alive() -> None:
    """A member's read of the members takes 2 s (longer than the expiry); the other member
    beat just before it, and not again in the 0.1 s after: it is alive (its token is dated
    when it was read; was: dated at the round's start, so the next round saw it unchanged
    for longer than the expiry, took the other's claims and removed it from the group)."""
    box, _ = _world(*["/t"] * 6)
    clock = Clock()
    slow = _SlowStore(box, clock)
    a = GroupReceiver(
        slow, mode="stateless", group="g", wants=lambda head: head.carries_only("/t"),
        unpack=_unpack, settings=GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0),
        clock=clock,
    )  # fmt: skip
    b = _member(box, clock)
    for _ in range(20):
        _rounds(a, clock, 0.05)
        _rounds(b, clock, 0.05)
    assert a.alive == b.alive == [a.member, b.member]
    _rounds(b, clock, 0.3)  # b beats
    a._last_members = -1e9  # a reads the members at its next round: slowly
    slow.stall = 2.0
    a._round(clock.now)  # (2 s pass in it)
    clock.now += 0.05
    a._round(clock.now)
    assert a.alive == [a.member, b.member]
    assert b.member in {r.member for r in slow.members()}  # (not removed as dead)


class _SlowUnlockStore(MemoryGroupStore):
    """A store whose lock release takes 2 s of the fake clock, as Courier-IMAP's folder
    DELETE does (it sleeps 2 s in its ACL check)."""

    def __init__(self, box: MemoryMailbox, clock: Clock) -> None:
        super().__init__(box, "g")
        self.clock = clock

    def unlock(self, record: MemberRecord) -> None:
        super().unlock(record)
        self.clock.now += 2.0


def test_a_slow_round_is_no_time_the_consumer_held_a_message() -> None:
    """The time a message is held by its consumer (against ack-timeout) starts when it is
    handed out, not when the round that claimed it began: was, on Courier (each claim
    round waits 2 s for the lock folder's deletion) every member looked hung to itself
    with an ack-timeout under 2 s, stopped heartbeating and had its claims taken. (An
    expiry above the 2 s: a lease must outlast a round.)"""
    box, _ = _world("/t")
    clock = Clock()
    settings = GroupSettings(heartbeat=0.5, expiry=3.0, steal_after=0.0, ack_timeout=1.5)
    member = GroupReceiver(
        _SlowUnlockStore(box, clock), mode="stateless", group="g",
        wants=lambda head: head.carries_only("/t"), unpack=_unpack, settings=settings,
        clock=clock,
    )  # fmt: skip
    got = _until_handed_out(member, clock)[0]
    assert len(got) == 1
    _rounds(member, clock, 0.2)  # its application is at it, well within ack-timeout
    assert member._healthy
    got[0].ack()
    _rounds(member, clock, 0.2)
    assert member.counts["rejoined"] == 0
    assert box.folders["emailmw-g-done-" + member.member]


def test_an_expiry_under_a_slow_lock_release_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store whose lock release is slow (Courier's folder deletion: 2 s) with an expiry
    that does not reach well past it: one warning line naming the expiry to give; none
    with an expiry that does, nor on a store that releases at once."""
    box, _ = _world()

    class Slow(MemoryGroupStore):
        slow_release = 2.0

    clock = Clock()
    with caplog.at_level("WARNING", logger="emailmw.groups"):
        _member(box, clock, GroupSettings(expiry=0.8)).close()
        said = [r.getMessage() for r in caplog.records]
        assert said == []
        for expiry in (0.8, 5.0):
            GroupReceiver(Slow(box, "g"), mode="stateless", group="g", wants=lambda h: True,
                          unpack=_unpack, settings=GroupSettings(expiry=expiry),
                          clock=clock).close()  # fmt: skip
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert "an expiry of 0.8 s sees live members dead" in said[0]
    assert "give the group an expiry of 5 s or more" in said[0]


@pytest.mark.parametrize("lock", ["named-dead-holder", "named-no-one"])
def test_a_stale_lock_is_broken_though_the_first_member_has_nothing_to_claim(lock: str) -> None:
    """A lock left behind (its holder died holding it, or a taking that never named
    itself) is broken by the first live member only (two breakers could each free a lock
    the other just took). When the work waiting is all another member's share, the first
    one has nothing to claim: it still watches the lock, and breaks it. (It only looked
    when it failed to take the lock itself: the group stopped, a dead member's claims
    unprocessed; seen as mail lost in a batch test on a loaded machine.)"""
    box, store = _world()
    store.join("ghost")  # first in order, and dead: it claimed one message, then died
    ghost = store.members()[0]
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=100.0)
    clock = Clock()
    first, second = _member(box, clock, settings), _member(box, clock, settings)
    for member in (first, second):  # they join, in this order
        member._round(clock.now)
    box.deliver(Email("/t", "m0", "a@x", ("g@x",), headers=Headers({"Source-Timestamp": "1"})))
    store.claim(store.inbox(), "ghost")
    (uid,) = store.claimed("ghost")
    if uid % 2 == 0:  # the second member's share (owner: alive[uid % 2])
        box.move("emailmw-g-claims-ghost", [uid], "emailmw-g-claims-ghost")
    (uid,) = store.claimed("ghost")
    assert owner(uid, [first.member, second.member]) == second.member
    if lock == "named-dead-holder":
        assert store.try_lock(ghost)
    else:
        box.locks.add("emailmw-g-")
    got: list[Any] = []
    end = clock.now + 5.0
    while clock.now < end and not got:
        for member in (first, second):
            got += member._round(clock.now)
        clock.now += 0.05
    assert [incoming.email.body for incoming in got] == ["m0"]
    assert not store.locked()


class _FailingStore(MemoryGroupStore):
    """A store whose next call of ``failing`` raises (a connection lost, a token expired
    mid-round), once."""

    def __init__(self, box: MemoryMailbox) -> None:
        super().__init__(box, "g")
        self.failing = ""

    def _fail(self, name: str) -> None:
        if self.failing == name:
            self.failing = ""
            raise ReceiveError(f"{name}: connection lost")

    def unlock(self, record: MemberRecord) -> None:
        self._fail("unlock")
        super().unlock(record)

    def try_lock(self, record: MemberRecord) -> bool:
        taken = super().try_lock(record)
        if taken and self.failing == "try_lock":  # (the answer lost: the lock was taken)
            self._fail("try_lock")
        return taken

    def fetch(self, member: str, uids: Sequence[int]) -> dict[int, bytes]:
        self._fail("fetch")
        return super().fetch(member, uids)


def _deliver(box: MemoryMailbox, body: str, owner_index: int) -> int:
    """Deliver ``body`` to the inbox with a UID that is the share of the member at
    ``owner_index`` of two (owner: alive[uid % 2]); its UID."""
    while True:
        box.deliver(Email("/t", body, "a@x", ("g@x",), headers=Headers({"Source-Timestamp": "1"})))
        uid = max(box.folders["INBOX"])
        if uid % 2 == owner_index:
            return uid
        del box.folders["INBOX"][uid]


def _round_or_failure(member: GroupReceiver, clock: Clock) -> list[Any]:
    try:
        return member._round(clock.now)
    except ReceiveError:
        return []  # (the receiving thread logs it and goes on)


def test_a_round_that_fails_after_claiming_still_hands_out_and_releases_the_lock() -> None:
    """A member claims under the lock, then its release fails (the connection lost): what
    it claimed is handed out at a later round (it stayed in its folder, never fetched), and
    the lock, which names it, is released at its next round, so that the other member gets
    its share (it could neither take nor break the lock: it waited forever when all the
    work left was its share)."""
    box = MemoryMailbox()
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=100.0)
    failing = _FailingStore(box)
    first = GroupReceiver(failing, mode="stateless", group="g", wants=lambda h: True,
                          unpack=_unpack, settings=settings, clock=clock)  # fmt: skip
    second = _member(box, clock, settings)
    for _ in range(10):  # they join, in this order, and see each other
        for member in (first, second):
            member._round(clock.now)
        clock.now += 0.05
    assert first.alive == second.alive == [first.member, second.member]
    _deliver(box, "mine", 0)
    failing.failing = "unlock"
    with pytest.raises(ReceiveError):
        first._round(clock.now)  # claimed, then the release failed
    assert failing.failing == ""
    assert failing.locked()
    _deliver(box, "yours", 1)
    got: dict[str, list[str]] = {"first": [], "second": []}
    end = clock.now + 5.0
    while clock.now < end and (not got["first"] or not got["second"]):
        got["first"] += [i.email.body for i in _round_or_failure(first, clock)]
        got["second"] += [i.email.body for i in _round_or_failure(second, clock)]
        clock.now += 0.05
    assert got == {"first": ["mine"], "second": ["yours"]}


def test_a_fetch_that_fails_keeps_nothing_of_the_receive_budget() -> None:
    """A fetch of claims that fails gives back what it reserved of the receive budget (it
    kept it: a few failures, and the member held no more, back-pressure forever), and the
    claims are fetched at the next round."""
    box, _ = _world("/t")
    clock = Clock()
    budget = ReceiveBudget(max_bytes=1 << 20, max_emails=1)
    failing = _FailingStore(box)
    member = GroupReceiver(failing, mode="stateless", group="g", wants=lambda h: True,
                           unpack=_unpack, settings=GroupSettings(heartbeat=0.25, expiry=1.0),
                           budget=budget, clock=clock)  # fmt: skip
    failing.failing = "fetch"
    got: list[Any] = []
    while clock.now < 105 and not got:
        got += _round_or_failure(member, clock)
        clock.now += 0.05
    assert failing.failing == ""  # it failed once
    assert [i.email.body for i in got] == ["m0"]
    got[0].ack()
    member._round(clock.now)  # (settled)
    assert budget.held_emails == 0
    assert budget.held_bytes == 0


@pytest.mark.parametrize("mode", ["stateless", "stateful"])
def test_a_dead_member_s_parts_are_taken_whatever_the_room(mode: str) -> None:
    """A dead member held the parts of four messages, interleaved (sent at once): the
    member whose share they are, with room for 2, takes them all (parts wait on disk until
    joined: room for one message each, as when claimed from the inbox); was: it took 2,
    parts of two messages whose other parts it could then never take (no room: held by
    the parts waiting for them), and the group stopped."""
    box, store = _world()
    store.join("ghost")
    messages = [_parts(f"<big{n}@x>", 2) for n in range(4)]
    for index in range(2):
        for parts in messages:
            box.deliver(parts[index])
    store.claim(store.inbox(), "ghost")  # and then it died holding them
    member = _member(box, clock := Clock(), capacity=2, mode=mode)
    got = _rounds(member, clock, 3.0)
    assert sorted((i.email.headers["Part-Of"], i.email.headers["Part"]) for i in got) == [
        (f"<big{n}@x>", f"{k}/2") for n in range(4) for k in (1, 2)
    ]


def test_claims_in_a_folder_whose_member_was_removed_are_taken_over() -> None:
    """A member removed as dead (its claims all taken, as it seemed) whose claim landed
    after (it was alive, paused in the middle of a claim): its folder holds mail and no
    record names it. A live member takes that over as a dead member's claims (was: left
    there, never processed), and the folder goes."""
    box, store = _world("/t")
    store.join("paused")
    (record,) = store.members()
    store.claim(store.inbox(), "paused")
    store.remove_member(record)  # its folder stays: it holds a message
    assert store.claimants() == ["paused"]
    assert store.members() == []
    member = _member(box, clock := Clock())
    got = _rounds(member, clock, 2.0)
    assert [(i.email.body, i.redelivered) for i in got] == [("m0", False)]
    assert store.claimants() == [member.member]


def _steps(clock: Clock, seconds: float, *apps: App, idle: GroupReceiver | None = None
           ) -> None:  # fmt: skip
    """Steps of 0.05 s of the fake clock: each application (the simulator's model: a
    single-threaded executor) steps, and ``idle``'s rounds run (its application takes
    nothing)."""
    end = clock.now + seconds
    while clock.now < end:
        if idle is not None:
            idle._round(clock.now)
        for app in apps:
            app.step(clock.now)
        clock.now += 0.05


def test_messages_queued_behind_a_working_application_do_not_make_its_member_hung(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """#56: ack-timeout counts from when the application took a message, not from when it
    was queued for it: with 10 claims queued (prefetch) and callbacks of 0.5 s, the tenth
    waited 4.5 s, past an ack-timeout of 2 s, and a live, working member declared itself
    hung, stopped heartbeating and stalled for good (all 3 members of a group, 21 of 300
    processed, on a busy machine)."""
    box, _ = _world(*["/t"] * 10)
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0, ack_timeout=2.0)
    app = App(_member(box, clock, settings), lambda: 0.5)
    with caplog.at_level("WARNING", logger="emailmw.groups"):
        _steps(clock, 10.0, app)
    assert sorted(app.done) == sorted(f"m{i}" for i in range(10))
    assert app.member.counts["rejoined"] == 0
    assert not [r for r in caplog.records if "ack-timeout" in r.getMessage()]


def test_a_member_hung_on_one_message_recovers_by_itself_once_it_is_done() -> None:
    """#56: a member alone whose application held a message past ack-timeout stops
    heartbeating (its lease lapses); once the application is done, the member joins again
    and what was queued behind is processed. Was: the queued claims could not be handed
    out (no lease) nor taken (nobody else), so the member never became healthy again."""
    box, _ = _world(*["/t"] * 4)
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0, ack_timeout=2.0)
    app = App(_member(box, clock, settings), lambda: 3.0)  # the first: past it
    _steps(clock, 3.0, app)  # the first is done
    app.work = lambda: 0.1
    _steps(clock, 10.0, app)
    assert sorted(app.done) == [f"m{i}" for i in range(4)]


@pytest.mark.parametrize("says_progress", [True, False])
def test_a_callback_longer_than_ack_timeout_that_says_it_works_keeps_its_message(
    caplog: pytest.LogCaptureFixture, says_progress: bool
) -> None:
    """#56 (AckProgress): an application that works 6 s on a message, with an ack-timeout
    of 2 s, and says every second that it is still working (``Subscription.in_progress``):
    its member stays healthy, nobody else gets the message, and what is queued behind it
    waits for it. Without saying so the member is judged hung and the other member
    processes the message again."""
    box, _ = _world(*["/t"] * 3)
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=600.0, ack_timeout=2.0)
    slow = App(_member(box, clock, settings), lambda: 6.0)
    other = App(_member(box, clock, settings), lambda: 0.1)
    with caplog.at_level("WARNING", logger="emailmw.groups"):
        for _ in range(int(8.0 / 0.05)):
            if says_progress and round(clock.now / 0.05) % 20 == 0:
                slow.member.progress()
            slow.step(clock.now)
            other.step(clock.now)
            clock.now += 0.05
    hung = [r for r in caplog.records if "ack-timeout" in r.getMessage()]
    firsts = [(name, count) for name, count in slow.processed + other.processed]
    if says_progress:
        assert not hung
        assert slow.member.counts["rejoined"] == 0
        assert len(slow.processed) == 1
        assert all(count == 1 for _, count in firsts), firsts  # nothing processed twice
    else:
        assert hung
        assert any(count > 1 for _, count in firsts), firsts  # another member had it again


def _batch(count: int) -> bytes:
    """A batch email of ``count`` messages of topic ``/t`` (``m0`` ...)."""
    from emailmw._core.packing import build_batch
    from emailmw._core.wire import build

    raws = [build(Email("/t", f"m{i}", "a@x", ("g@x",),
                        headers=Headers({"Source-Timestamp": str(i + 1)})))
            for i in range(count)]  # fmt: skip
    return build_batch(raws, from_="a@x", to=["g@x"], message_id="<batch@x>", timestamp_ns=1,
                       subjects=["/t"], headers=[("Source-Timestamp", "1")])  # fmt: skip


def test_a_batch_s_messages_no_application_had_come_unflagged_after_a_takeover() -> None:
    """#56: a batch email of five messages; the first member's application takes two, then
    the member dies holding it. The member that takes it over hands out those two flagged
    (count 2) and the other three as first deliveries (count 1, not redelivered): the
    record says how many of a batch's messages applications got (was: all five flagged,
    the email's count for every message)."""
    box = MemoryMailbox()
    box.deliver_raw(_batch(5))
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0)
    dying = _member(box, clock, settings)
    handed = _rounds(dying, clock, 0.5)
    assert len(handed) == 5  # (one batch email, its messages handed out)
    assert [i.claim.deliver() for i in handed[:2]] == [1, 1]  # its application took two
    taker = _member(box, clock, settings)
    got = _rounds(taker, clock, 3.0)  # (the first member: dead, no round any more)
    counts = {i.email.body: i.claim.deliver() for i in got}
    assert counts == {"m0": 2, "m1": 2, "m2": 1, "m3": 1, "m4": 1}
    assert [i.redelivered for i in got] == [True, True, False, False, False]
    assert all(i.returned for i in got)  # (back through the group: a repeat, no replay)


def test_a_member_whose_application_takes_nothing_gives_its_claims_back() -> None:
    """A member whose application takes nothing for ack-timeout (nothing of it in a
    callback) hands its claims back to the group at once: another member processes them
    (none of them flagged: no application had them)."""
    box, _ = _world(*["/t"] * 4)
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0, ack_timeout=2.0)
    idle = _member(box, clock, settings)
    held = _rounds(idle, clock, 0.2)
    assert len(held) == 4  # its application never takes them
    busy = App(_member(box, clock, settings), lambda: 0.1)
    _steps(clock, 10.0, busy, idle=idle)
    assert sorted(busy.done) == [f"m{i}" for i in range(4)]
    assert [i.claim.state() for i in held] == ["lost"] * 4


def test_a_claim_that_came_back_through_the_group_says_so_though_no_application_had_it() -> None:
    """#56: a claim verified by one member, taken over before its application got it, and
    taken back: no application had it (not ``redelivered``), yet it came back through the
    group (``returned``), so its signature, accepted before, is no replay."""
    box, _ = _world("/t")
    clock = Clock()
    first = _member(box, clock)
    held = _rounds(first, clock, 0.2)
    assert [i.returned for i in held] == [False]
    first.close()  # gone, its application never had it
    second = _member(box, clock)
    again = _rounds(second, clock, 3.0)
    assert [(i.redelivered, i.returned) for i in again] == [(False, True)]


def test_a_plan_claims_every_part_of_a_message_together_with_room_for_one() -> None:
    """#64: room for two messages, and a message of three parts waiting (a single message
    between them): all three parts are claimed at once (its first takes the room); was:
    the first part and the single one, the rest left in the inbox for a later round,
    which a member seeing the members otherwise claimed instead: the message split."""
    key = part_key("<big1@x>")
    waiting = [(12, 0.0), (15, 0.0), (13, 0.0), (14, 0.0)]
    keys = {12: key, 13: key, 14: key}
    work = plan("stateless", "m0", ["m0"], {}, waiting, 1, S, None, None, keys,
                frozenset(keys))  # fmt: skip
    assert work.claim == [12, 15, 13, 14]  # (room 2: the message, and the single one)


@pytest.mark.parametrize("first_holds", [1, 2])
def test_a_message_split_across_two_members_is_joined_by_one(first_holds: int) -> None:
    """#64: two live members each hold parts of one message (claimed while they saw the
    members differently): the one holding fewer (of equals, the later by name) gives its
    parts back to the inbox, the other claims them (``returned``: they came back through
    the group) and its application gets the message once, unflagged. Was: each waited for
    the other's parts for good (lost)."""
    box, _ = _world()
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.25, ack_timeout=3.0)
    a, b = App(_member(box, clock, settings), lambda: 0.1), App(_member(box, clock, settings),
                                                                   lambda: 0.1)  # fmt: skip
    _steps(clock, 1.0, a, b)  # (both members, no mail yet)
    parts = _parts("<big1@x>", 3)
    for part in parts:
        box.deliver(part)
    uids = MemoryGroupStore(box, "g").inbox()
    MemoryGroupStore(box, "g").claim(uids[:first_holds], a.member.member)
    MemoryGroupStore(box, "g").claim(uids[first_holds:], b.member.member)
    a.member._unfetched = b.member._unfetched = True  # (as if they had claimed them)
    handed: list[Any] = []
    for app in (a, b):
        rounds = app.member._round
        app.member._round = lambda now, rounds=rounds: handed.extend(got := rounds(now)) or got  # type: ignore[method-assign]
    _steps(clock, 10.0, a, b)
    assert a.processed + b.processed == [("<big1@x>", 1)]
    gave_back = a.member.counts["gave_back"] + b.member.counts["gave_back"]
    assert gave_back in (1, 2)
    # what came back through the group says so (its signature, accepted by the member
    # that gave it back, is no replay where it comes again)
    assert sum(i.returned for i in handed) == gave_back


class _MarkFails(MemoryGroupStore):
    """Its delivery records of a part numbered 3 fail (the connection lost) until the
    clock reaches ``until``; ``failed``: how often."""

    def __init__(self, box: MemoryMailbox, clock: Clock, until: float) -> None:
        super().__init__(box, "g")
        self.clock, self.until, self.failed = clock, until, 0

    def mark(self, member: str, uid: int, delivered: int, given: int = 0) -> bool:
        entry = self._box.folders[self._claims(member)][uid]
        if self.clock.now < self.until and b"Part: 3/3" in entry.raw:
            self.failed += 1
            raise ReceiveError("mark: connection lost (test)")
        return super().mark(member, uid, delivered, given)


def test_a_message_of_parts_whose_delivery_record_failed_before_a_pause_is_delivered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """#64: the delivery record of one part of a message failed (the other parts' were
    made: given), then the process was paused (SIGSTOP) past ack-timeout: the member is not
    hung on the message (its application never got it whole) and hands it out once its
    lease is confirmed. Was: counted as held by the application since before the pause,
    the member judged itself hung and stopped heartbeating, so never confirmed the lease
    the last part waited for: alone, it stalled for good."""
    box, _ = _world()
    clock = Clock()
    for part in _parts("<big1@x>", 3):
        box.deliver(part)
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=0.0, ack_timeout=2.0)
    store = _MarkFails(box, clock, until=clock.now + 0.5)
    member = GroupReceiver(store, mode="stateless", group="g",
                           wants=lambda head: head.carries_only("/t"), unpack=_unpack,
                           settings=settings, clock=clock)  # fmt: skip
    app = App(member, lambda: 0.1)
    with caplog.at_level("WARNING", logger="emailmw.groups"):
        while not store.failed:
            _steps(clock, 0.05, app)
        clock.now += 3.0  # paused
        _steps(clock, 10.0, app)
    assert app.processed == [("<big1@x>", 1)]
    assert not [r for r in caplog.records if "ack-timeout" in r.getMessage()]


def test_a_lock_taken_by_a_try_whose_answer_was_lost_is_released() -> None:
    """#64: the second member's claim-lock try took the lock in its name and the answer
    was lost; then a third joined, and the waiting message is now the first member's
    share: the second releases the lock at its next round (nobody else breaks a lock a
    live member names), so the first claims. Was: the second, with nothing more to claim,
    never tried the lock again and held it for good: the whole group stalled."""
    box = MemoryMailbox()
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, steal_after=100.0)
    failing = _FailingStore(box)
    first = _member(box, clock, settings)
    second = GroupReceiver(failing, mode="stateless", group="g", wants=lambda h: True,
                           unpack=_unpack, settings=settings, clock=clock)  # fmt: skip
    for _ in range(10):
        for member in (first, second):
            member._round(clock.now)
        clock.now += 0.05
    assert second.alive == [first.member, second.member]
    while True:  # a UID the second's share of two, and the first's of three members
        box.deliver(Email("/t", "m", "a@x", ("g@x",), headers=Headers({"Source-Timestamp": "1"})))
        uid = max(box.folders["INBOX"])
        if uid % 6 == 3:
            break
        del box.folders["INBOX"][uid]
    failing.failing = "try_lock"
    with pytest.raises(ReceiveError):
        second._round(clock.now)
    assert failing.failing == ""
    assert failing.locked()
    third = _member(box, clock, settings)
    _rounds(third, clock, 0.3)  # (the first two: slow meanwhile)
    got: list[str] = []
    end = clock.now + 5.0
    while clock.now < end and not got:
        for member in (first, second, third):
            got += [i.email.body for i in _round_or_failure(member, clock)]
        clock.now += 0.05
    assert got == ["m"]
    assert not failing.locked()


def test_a_member_whose_clock_stood_still_hands_out_nothing_another_took_over() -> None:
    """#62: a member's machine suspended (its clock stood still: by that clock its lease
    still holds) while another member saw it dead and took its claims over: back, it hands
    none of them to its application, whatever its clock says: the delivery record finds
    each claim gone (the fence of the store). Was: handed out unflagged, as the member that
    took them over did: a silent repeat."""
    box, _ = _world("/t", "/t", "/t")
    frozen, clock = Clock(), Clock()
    a = _member(box, frozen)
    held = _rounds(a, frozen, 0.5)
    assert len(held) == 3
    b = _member(box, clock)
    taken = _rounds(b, clock, 5.0)  # (a says nothing for 5 s: dead to b, its claims b's)
    assert sorted(i.email.body for i in taken) == ["m0", "m1", "m2"]
    assert [i.claim.deliver() for i in taken] == [1, 1, 1]
    assert [i.claim.deliver() for i in held] == [None, None, None]
    assert _rounds(a, frozen, 0.5) == []  # (its claims checked under the lock: none its own)
    assert {i.claim.state() for i in held} == {"lost"}


# ---------------------------------------------------------------- a stateful group's order


def _head(stream: str, seq: int, count: int = 0) -> Head:
    return Head("/t", stream=stream, seq=seq, count=count)


def test_a_publisher_s_message_waits_while_an_earlier_one_has_not_arrived() -> None:
    """(#62) What a stateful member must not claim yet: a message whose publisher's
    earlier one is missing, with what follows it; a batch covers its messages' numbers;
    a publisher not seen yet, a message without numbers and a repeat wait for nothing."""
    seen = {"p": 5, "q": 1}
    assert order_gaps([(1, _head("p", 5)), (2, _head("p", 6))], seen) == frozenset()
    assert order_gaps([(1, _head("p", 7)), (2, _head("p", 8))], seen) == {1, 2}
    # the missing one arrived (waiting anywhere among them): nothing waits
    assert order_gaps([(3, _head("p", 6)), (1, _head("p", 5))], seen) == frozenset()
    assert order_gaps([(1, _head("p", 5, count=3)), (2, _head("p", 8))], seen) == frozenset()
    assert order_gaps([(1, _head("p", 5, count=2)), (2, _head("p", 8))], seen) == {2}
    assert order_gaps([(1, _head("q", 3)), (2, _head("p", 5))], seen) == {1}  # per publisher
    assert order_gaps([(1, _head("new", 40)), (2, Head("/t"))], seen) == frozenset()
    assert order_gaps([(1, _head("p", 2))], seen) == frozenset()  # a repeat, or a restart
    # a publisher not seen yet: a gap among its waiting messages shows all the same
    assert order_gaps([(1, _head("new", 40)), (2, _head("new", 42))], seen) == {2}
    assert order_gaps([(2, _head("new", 42)), (3, _head("new", 41))], seen) == frozenset()
    assert order_gaps([(2, _head("new", 43)), (1, _head("new", 40))], {}) == {2}


def test_a_stateful_plan_claims_past_a_missing_message_only_once_it_waited_gap_wait() -> None:
    settings = GroupSettings(prefetch=5, reorder=0.2, gap_wait=10.0)
    waiting = [(4, 1.0), (7, 1.0), (8, 1.0)]
    assert plan("stateful", "a", ["a"], {}, waiting, 0, settings, gaps=frozenset({7, 8})) == Plan(
        [4]
    )
    waited = [(4, 11.0), (7, 11.0), (8, 1.0)]
    assert plan("stateful", "a", ["a"], {}, waited, 0, settings, gaps=frozenset({7, 8})) == Plan(
        [4, 7]
    )


def _publish(box: MemoryMailbox, seq: int) -> None:
    box.deliver(
        Email("/t", f"m{seq}", "a@x", ("g@x",), headers=Headers({
            "Source-Timestamp": str(1000 + seq), "Publisher-GID": "01.02",
            "Publisher-Sequence-Number": str(seq),
        }))
    )  # fmt: skip


def test_a_stateful_group_processes_a_message_delivered_late_before_the_ones_sent_after_it() -> (
    None
):
    """(#62 item 3) A busy server delivers a publisher's message 2 s after the next ones
    (past the 0.25-s reorder wait): the active member still hands them out in send order."""
    box, _ = _world()
    clock = Clock()
    member = _member(box, clock, GroupSettings(heartbeat=0.25, expiry=1.0), mode="stateful")
    got = []
    _publish(box, 0)
    got += _rounds(member, clock, 1.0)
    _publish(box, 2)  # (1 is still on its way)
    _publish(box, 3)
    got += _rounds(member, clock, 2.0)
    _publish(box, 1)
    got += _rounds(member, clock, 2.0)
    bodies = [incoming.email.body for incoming in got]
    assert bodies == ["m0", "m1", "m2", "m3"]


def test_a_stateful_member_that_starts_while_a_message_is_late_waits_for_it() -> None:
    """(#62 item 3) A member that has not seen the publisher yet starts with 0, 2 and 3
    waiting and 1 still on its way: the gap among them shows, it hands out 0 and waits
    (was: 0, 2, 3, then 1)."""
    box, _ = _world()
    clock = Clock()
    for seq in (0, 2, 3):
        _publish(box, seq)
    member = _member(box, clock, GroupSettings(heartbeat=0.25, expiry=1.0), mode="stateful")
    got = _rounds(member, clock, 2.0)
    assert [incoming.email.body for incoming in got] == ["m0"]
    _publish(box, 1)
    got += _rounds(member, clock, 2.0)
    assert [incoming.email.body for incoming in got] == ["m0", "m1", "m2", "m3"]


def test_a_stateful_group_takes_a_message_that_never_comes_as_lost_after_gap_wait() -> None:
    box, _ = _world()
    clock = Clock()
    settings = GroupSettings(heartbeat=0.25, expiry=1.0, gap_wait=3.0)
    member = _member(box, clock, settings, mode="stateful")
    _publish(box, 0)
    got = _rounds(member, clock, 1.0)
    _publish(box, 2)
    got += _rounds(member, clock, 2.0)
    assert [incoming.email.body for incoming in got] == ["m0"]
    got += _rounds(member, clock, 2.0)
    assert [incoming.email.body for incoming in got] == ["m0", "m2"]
