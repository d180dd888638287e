"""The pure parts of the group protocol: liveness and each round's plan, table-driven,
and the protocol rounds against the in-process store with a fake clock."""

from __future__ import annotations

import pytest

from emailmw._groups import GroupSettings, Liveness, MemberRecord, Plan, check_group, owner, plan

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
        # the active takes the dead members' claims first, then claims with the room left
        ("a", ["a"], {"c": [1, 2]}, [(5, 1.0), (6, 1.0)], 0, Plan([5], {"c": [1, 2]})),
        # a message still within the reorder wait stops the claiming in send order
        ("a", ["a"], {}, [(5, 1.0), (7, 0.1), (6, 1.0)], 0, Plan([5])),
        # not alive (hung): nothing
        ("a", [], {}, [(5, 1.0)], 0, Plan()),
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


def test_a_lock_left_by_a_dead_member_is_broken_by_the_first_live_one() -> None:
    """Rounds on a fake clock against the in-process store: a lock one taking has held for
    three expiries (its holder died holding it) is broken by the first live member, and
    the waiting message claimed."""
    from emailmw._groups import GroupReceiver
    from emailmw._transport.group_memory import MemoryGroupStore, MemoryMailbox
    from emailmw._types import Email, Headers

    box = MemoryMailbox()
    store = MemoryGroupStore(box, "g")
    store.join("ghost")
    assert store.try_lock("ghost")  # and then it died
    box.deliver(Email("/t", "job", "a@x", ("g@x",), headers=Headers({"Source-Timestamp": "1"})))
    receiver = GroupReceiver(
        store, mode="stateless", group="g", topic="/t",
        parse=lambda raw, uid: Email("/t", "job", "a@x", ("g@x",)),
        settings=GroupSettings(heartbeat=0.25, expiry=1.0),
    )  # fmt: skip
    got = []
    for step in range(24):
        got += receiver._round(100.0 + step * 0.25)
        if got:
            break
    assert [incoming.email.body for incoming in got] == ["job"]
    assert step * 0.25 <= 4.0  # seen held, then held three expiries more at most
    assert store.lock_id() is None
