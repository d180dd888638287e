"""QoS over email: the delivery rules with explicit times, then through nodes."""

from __future__ import annotations

import time

import pytest

import emailmw
from emailmw import (
    Context,
    DeadlineMissed,
    DurabilityPolicy,
    Gid,
    HistoryPolicy,
    MessageInfo,
    MessageLost,
    Node,
    QoSProfile,
    SingleThreadedExecutor,
    std_msgs,
)
from emailmw._core.qos import Delivery

from .helpers import round_trip, spin_until

S = 1_000_000_000


def info(seq: int | None, source: int = 0, gid: int = 1) -> MessageInfo:
    return MessageInfo(source, source, Gid(gid), seq)


def bodies(items: list[tuple[str, MessageInfo]]) -> list[str]:
    return [body for body, _ in items]


def test_ordered_delivery_holds_back_until_the_gap_fills() -> None:
    d = Delivery(QoSProfile(ordered=True, gap_timeout=1.0), 0)
    assert bodies(d.offer("0", info(0), 0)[0]) == ["0"]
    assert d.offer("2", info(2), 10)[0] == []  # 1 missing: held back
    assert bodies(d.offer("1", info(1), 20)[0]) == ["1", "2"]  # gap filled: both, in order
    assert d.offer("1", info(1), 30)[0] == []  # already released: a duplicate
    assert d.duplicates == 1


def test_a_gap_that_does_not_fill_is_reported_lost_after_the_timeout() -> None:
    d = Delivery(QoSProfile(ordered=True, gap_timeout=1.0), 0)
    d.offer("5", info(5), 0)
    d.offer("8", info(8), 0)
    assert d.poll(S - 1) == ([], [])  # not yet
    assert d.next_check_ns() == S
    items, events = d.poll(S)
    assert bodies(items) == ["8"]
    assert events == [MessageLost(1, (6, 7), 2)]
    assert d.lost == 2


def test_streams_of_different_publishers_are_independent() -> None:
    d = Delivery(QoSProfile(ordered=True), 0)
    assert bodies(d.offer("a0", info(0, gid=1), 0)[0]) == ["a0"]
    assert bodies(d.offer("b7", info(7, gid=2), 0)[0]) == ["b7"]  # first seen: its start
    assert bodies(d.offer("a1", info(1, gid=1), 0)[0]) == ["a1"]


def test_lifespan_drops_and_counts_old_messages() -> None:
    d = Delivery(QoSProfile(lifespan=2.0), 0)
    assert d.offer("old", info(0, source=0), 3 * S)[0] == []
    assert bodies(d.offer("new", info(1, source=2 * S), 3 * S)[0]) == ["new"]
    assert d.expired == 1


def test_deadline_missed_once_per_period() -> None:
    d = Delivery(QoSProfile(deadline=1.0), 0)
    assert d.poll(S // 2) == ([], [])
    assert d.poll(S)[1] == [DeadlineMissed(1)]
    assert d.poll(S + 1)[1] == []
    d.offer("m", info(0), S + S // 2)  # a message restarts the period
    assert d.poll(2 * S)[1] == []
    assert d.poll(2 * S + S // 2)[1] == [DeadlineMissed(2)]


def test_unordered_drops_duplicates_and_keeps_rmw_email_messages() -> None:
    d = Delivery(QoSProfile(), 0)
    assert bodies(d.offer("x", info(3), 0)[0]) == ["x"]
    assert d.offer("x", info(3), 0)[0] == []
    assert bodies(d.offer("legacy", info(None), 0)[0]) == ["legacy"]
    assert bodies(d.offer("legacy", info(None), 0)[0]) == ["legacy"]


def test_invalid_profiles_are_rejected() -> None:
    for kwargs in ({"depth": 0}, {"lifespan": 0}, {"deadline": -1}, {"gap_timeout": 0}):
        with pytest.raises(ValueError, match="must be"):
            QoSProfile(**kwargs)  # type: ignore[arg-type]


def test_transient_local_late_joiner_gets_the_last_depth_messages(ctx: Context) -> None:
    node = Node("late", context=ctx)
    pub = node.create_publisher(std_msgs.msg.Int64, "/history")
    for i in range(5):
        pub.publish(std_msgs.msg.Int64(i))
    # wait until the five went through the (intraprocess) mailbox
    round_trip(ctx)
    got: list[int] = []
    node.create_subscription(
        std_msgs.msg.Int64,
        "/history",
        lambda m: got.append(m.data),
        QoSProfile(depth=3, durability=DurabilityPolicy.TRANSIENT_LOCAL),
    )
    volatile: list[int] = []
    node.create_subscription(std_msgs.msg.Int64, "/history", lambda m: volatile.append(m.data))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    assert spin_until(executor, lambda: len(got) == 3)
    pub.publish(std_msgs.msg.Int64(5))
    assert spin_until(executor, lambda: got == [2, 3, 4, 5])
    assert volatile == [5]  # a volatile subscription sees only what comes after it


def test_deadline_and_lifespan_through_a_node(ctx: Context) -> None:
    node = Node("watch", context=ctx)
    missed: list[DeadlineMissed] = []
    got: list[str] = []
    sub = node.create_subscription(
        std_msgs.msg.String,
        "/beat",
        lambda m: got.append(m.data),
        QoSProfile(deadline=0.05, lifespan=60.0),
        event_callbacks=emailmw.SubscriptionEventCallbacks(deadline=missed.append),
    )
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    assert spin_until(executor, lambda: len(missed) >= 2)
    # an old message (Source-Timestamp an hour ago) is dropped by the lifespan
    emailmw.Publisher("/beat", context=ctx)._send(
        emailmw.Email(
            "/beat",
            "data: stale",
            headers={
                "Source-Timestamp": str(time.time_ns() - 3600 * S),
                "Publisher-GID": "9",
                "Publisher-Sequence-Number": "0",
                "Message-Type": "std_msgs/msg/String",
            },
        )
    )
    node.create_publisher(std_msgs.msg.String, "/beat").publish(std_msgs.msg.String("fresh"))
    assert spin_until(executor, lambda: got == ["fresh"])
    assert sub.expired == 1


def test_lost_message_event_through_a_node(ctx: Context) -> None:
    node = Node("gaps", context=ctx)
    lost: list[MessageLost] = []
    got: list[str] = []
    node.create_subscription(
        std_msgs.msg.String,
        "/gappy",
        lambda m: got.append(m.data),
        QoSProfile(ordered=True, gap_timeout=0.1, history=HistoryPolicy.KEEP_ALL),
        event_callbacks=emailmw.SubscriptionEventCallbacks(message_lost=lost.append),
    )
    send = emailmw.Publisher("/gappy", context=ctx)._send
    for seq in (0, 1, 3):  # 2 never comes
        send(
            emailmw.Email(
                "/gappy",
                f"data: m{seq}",
                headers={
                    "Source-Timestamp": str(time.time_ns()),
                    "Publisher-GID": "77",
                    "Publisher-Sequence-Number": str(seq),
                },
            )
        )
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    assert spin_until(executor, lambda: got == ["m0", "m1", "m3"])
    assert lost == [MessageLost(77, (2,), 1)]


@pytest.mark.parametrize(
    ("history", "expected"),
    [(HistoryPolicy.KEEP_LAST, [3, 4]), (HistoryPolicy.KEEP_ALL, [0, 1, 2, 3, 4])],
)
def test_keep_last_and_keep_all_through_a_node(
    ctx: Context, history: HistoryPolicy, expected: list[int]
) -> None:
    node = Node("hist", context=ctx)
    got: list[int] = []
    node.create_subscription(
        std_msgs.msg.Int64, "/h", lambda m: got.append(m.data), QoSProfile(depth=2, history=history)
    )
    pub = node.create_publisher(std_msgs.msg.Int64, "/h")
    for i in range(5):
        pub.publish(std_msgs.msg.Int64(i))
    # nobody spins yet: all five have reached the subscription's queue once a later
    # message on another topic has come through
    round_trip(ctx)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    assert spin_until(executor, lambda: len(got) >= len(expected))
    executor.spin_once(0)
    assert got == expected
