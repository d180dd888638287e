"""Every consumer of mail reads what an email carries through one stage (``_carried``):
the verdicts of the stage itself, and what consumers above it make of batched mail (the
command line's rates, bags' types). No mail server: ``tests/email`` has the rest."""

from __future__ import annotations

import time
from typing import Any

import pytest

import emailmw
from emailmw._cli.topic import RateWindow, bw_line, hz_line
from emailmw._core import carried as _carried
from emailmw._core.packing import build_batch
from emailmw._core.protocol import Recipients, publish_email
from emailmw._core.types import Gid
from emailmw._core.wire import build

RECIPIENTS = Recipients("a@example.test", ("b@example.test",))


def _raw(seq: int, topic: str = "/t") -> bytes:
    email = publish_email(topic, f"m{seq}", recipients=RECIPIENTS, gid=Gid(3),
                          sequence_number=seq, timestamp_ns=10**18 + seq)  # fmt: skip
    return build(email.with_message_id(f"<{seq}@example.test>"))


def test_the_stage_gives_each_message_its_verdict() -> None:
    """A plain email; a batch whose parts are a good message, one cut in its headers and
    one that is not emailmw's (each poison: a batch carries emailmw's only); foreign mail
    left alone; a broken batch one poison item. Nothing raises."""
    (plain,) = _carried.unpack(_raw(0))
    assert (plain.verdict, plain.count, plain.email is not None) == ("ok", 0, True)
    cut = b"Subject: /t\r\nSource-Timestamp: 1\r\nPublisher-GID: 9\r\nPublisher-Seq"
    alien = b"Subject: hi\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n--x--\r\n"
    batch = build_batch([_raw(1), cut, alien], from_="a@example.test", to=["b@example.test"],
                        message_id="<b@example.test>", timestamp_ns=10**18)  # fmt: skip
    items = _carried.unpack(batch)
    assert [(i.index, i.count, i.verdict) for i in items] == [
        (0, 3, "ok"), (1, 3, "poison"), (2, 3, "poison"),
    ]  # fmt: skip
    assert items[1].label() == " (part 2/3)"
    (foreign,) = _carried.unpack(alien)
    assert foreign.verdict == "foreign"
    (broken,) = _carried.unpack(batch[: len(batch) // 2])
    assert (broken.verdict, broken.count) == ("poison", 0)
    assert "batch" in broken.reason


def test_a_batch_email_s_own_fields_are_its_topmost() -> None:
    """The delivery is the topmost Received (the lower ones are earlier hops)."""
    raw = (b"Received: by mx; Fri, 15 Jan 2027 08:00:00 +0000\r\n"
           b"Received: from submission; Fri, 15 Jan 2027 07:59:57 +0000\r\n") + _raw(0)  # fmt: skip
    assert _carried.outer_fields(raw)["received"].endswith("08:00:00 +0000")


def test_topic_hz_and_bw_say_the_publishing_rate_when_mail_comes_in_bursts() -> None:
    """A 10 Hz topic whose messages arrive twenty at once (batches): the rate is 10 Hz from
    the first window on (was: the arrival times, all within milliseconds)."""
    window = RateWindow(100)
    start = 1_800_000_000.0
    for burst in range(3):
        for i in reversed(range(20)):  # (a server may store a batch's emails in any order)
            seq = burst * 20 + i
            window.add(start + seq / 10, 100, 0.5)
        line = hz_line(window)
        assert line.startswith("average rate: 10.000"), line
    assert "min: 0.100s max: 0.100s" in hz_line(window)
    assert bw_line(window).startswith("1000.00 B/s")


def test_action_feedback_and_status_say_their_types() -> None:
    """Feedback and status mail names its type (was none: bags wrote them as
    std_msgs/msg/String)."""
    from emailmw.action import ActionServer
    from emailmw.example_interfaces.action import Fibonacci

    seen: list[Any] = []
    with emailmw.Context({"intraprocess": True}) as ctx:
        node = emailmw.Node("server", context=ctx)
        feedback = emailmw.Subscription("/fib/_action/feedback", context=ctx)
        status = emailmw.Subscription("/fib/_action/status", context=ctx)

        def execute(handle: Any) -> Any:
            handle.publish_feedback(Fibonacci.Feedback(sequence=[0, 1]))
            handle.succeed()
            return Fibonacci.Result(sequence=[0, 1])

        ActionServer(node, Fibonacci, "/fib", execute)
        client = emailmw.action.ActionClient(node, Fibonacci, "/fib")
        future = client.send_goal_async(Fibonacci.Goal(order=2))
        deadline = time.monotonic() + 10
        while (len(seen) < 2 or not future.done()) and time.monotonic() < deadline:
            emailmw.spin_once(node, timeout_sec=0.05)
            for sub in (feedback, status):
                got = sub.get_message_with_info()
                if got is not None:
                    seen.append(got[1].message_type)
    assert "example_interfaces/action/Fibonacci_FeedbackMessage" in seen
    assert "action_msgs/msg/GoalStatusArray" in seen


@pytest.mark.parametrize("seqs", [[0, 1, 2], list(range(12))])
def test_a_batch_s_messages_land_in_its_order(seqs: list[int]) -> None:
    """The pipeline's landing reads batches through the stage: a row a message, keyed
    email#i in the batch's order, dated by the batch email."""
    pytest.importorskip("pyarrow")
    from emailmw._pipeline.landing import _rows

    received = b"Received: by mx; Fri, 15 Jan 2027 08:00:00 +0000\r\n"
    batch = received + build_batch([_raw(s) for s in seqs], from_="a@example.test",
                                   to=["b@example.test"], message_id="<b@example.test>",
                                   timestamp_ns=10**18)  # fmt: skip
    rows = _rows(batch, None, None)
    assert [suffix for suffix, _ in rows] == [f"#{i + 1}" for i in range(len(seqs))]
    assert {row[11] for _, row in rows} == {1_800_000_000 * 10**9 + 0}  # delivered_ns
