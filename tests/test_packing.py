"""Batches without a server: the batch format (``_packing``) round-trips any emails and
refuses what is not readable; the outbox gathers consecutive messages to the same
recipients within the linger and the limits, keeps the order, and falls back to single
emails when the server refuses a batch; the resume position settles a batch email once
every part is settled, remembering the parts across a restart."""

from __future__ import annotations

import contextlib
import email
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emailmw import BatchPolicy, Email, EmailReceiver, Gid, MalformedEmailError, SendError
from emailmw._core.config import load_options
from emailmw._core.packing import (
    PartOf,
    PieceDigest,
    Reassembly,
    batch_parts,
    build_batch,
    compress_body,
    decompress_body,
    join_parts,
    part_of,
    split_email,
)
from emailmw._core.protocol import PublishRoute, Recipients, classify, publish_email
from emailmw._core.wire import build, parse
from emailmw._delivery.polling import PollingManager
from emailmw._transport.base import IncomingEmail
from emailmw._transport.common import ResumePosition, unpack_fetched
from emailmw._transport.outbox import Outbox, Submission, Submitter

BATCH = BatchPolicy(linger_ms=200, max_messages=5, max_bytes=1 << 20)


def _raw(n: int, body: str = "data: x", to: str = "you@example.test") -> bytes:
    return build(Email(f"/t{n}", body, "me@example.test", to, message_id=f"<{n}@x>"))


def _batch(raws: list[bytes]) -> bytes:
    return build_batch(raws, from_="me@example.test", to=["you@example.test"],
                       message_id="<b@x>", timestamp_ns=10**18)  # fmt: skip


# -- the format -------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=300), min_size=1, max_size=8))
def test_a_batch_gives_back_exactly_its_emails(bodies: list[str]) -> None:
    raws = [_raw(n, body) for n, body in enumerate(bodies)]
    batch = _batch(raws)
    assert batch_parts(batch) == raws
    assert batch_parts(batch.replace(b"\r\n", b"\n")) == raws  # as a Maildir file holds it
    assert [parse(p).body for p in batch_parts(batch) or []] == bodies


def test_mail_tools_see_a_digest_of_emails() -> None:
    batch = _batch([_raw(1), _raw(2)])
    message = email.message_from_bytes(batch)
    assert message.get_content_type() == "multipart/digest"
    parts = message.get_payload()
    assert [p.get_content_type() for p in parts] == ["message/rfc822"] * 2
    assert [p.get_payload()[0]["Subject"] for p in parts] == ["/t1", "/t2"]
    assert message["Subject"] == "emailmw batch of 2:"


def test_a_plain_email_is_not_a_batch() -> None:
    assert batch_parts(_raw(1)) is None
    assert batch_parts(b"\xff\x00 junk") is None


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda b: b.replace(b"Batch-Count: 2", b"Batch-Count: 3"), "Batch-Count says 3"),
        (lambda b: b.replace(b"Batch-Count: 2", b"Batch-Count: x"), "not a number"),
        (lambda b: b[: b.rfind(b"\r\n--")], "no closing delimiter"),
        (lambda b: b.replace(b"multipart/digest", b"multipart/mixed"), "not multipart/digest"),
        (lambda b: b.replace(b"message/rfc822", b"text/html", 1), "a part of type text/html"),
    ],
)
def test_a_broken_batch_is_malformed(mangle: Callable[[bytes], bytes], reason: str) -> None:
    with pytest.raises(MalformedEmailError, match=reason):
        batch_parts(mangle(_batch([_raw(1), _raw(2)])))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_after_a_batch_header_unpack_or_are_malformed(junk: bytes) -> None:
    raw = b"Subject: x\r\nBatch-Count: 1\r\nContent-Type: multipart/digest; boundary=b\r\n\r\n"
    with contextlib.suppress(MalformedEmailError):
        batch_parts(raw + junk)


def test_a_poison_part_is_one_unusable_part_and_stops_no_other() -> None:
    poison = b"Subject: /t9\r\nContent-Type: text/plain; charset=punycode\r\n\r\nx\r\n"
    fetched = unpack_fetched(
        {7: _batch([_raw(1), poison, _raw(3)]), 8: _raw(4)}, where="test", max_size=1 << 20
    )
    assert [(f.uid, f.part, f.parts, f.email is not None) for f in fetched] == [
        (7, 0, 3, True),
        (7, 1, 3, False),
        (7, 2, 3, True),
        (8, 0, 0, True),
    ]


# -- the outbox -------------------------------------------------------------------------


class Recording(Submitter):
    """Accepts everything (after ``gate``), or refuses what ``refuse`` says; records each
    submission's emails (the parts of a batch, or the email itself)."""

    server = "smtps://recording:465"

    def __init__(self, refuse: Callable[[Submission], bool] = lambda _: False) -> None:
        self.sent: list[list[str]] = []
        self.refuse = refuse
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # a submission began

    def submit(self, envelope: Submission) -> None:
        self.entered.set()
        self.gate.wait(10)
        if self.refuse(envelope):
            raise SendError("552 too big", temporary=False)
        parts = batch_parts(envelope.raw)
        raws = parts if parts is not None else [envelope.raw]
        self.sent.append([parse(r).message_id or "" for r in raws])

    def close(self) -> None:
        pass


def _outbox(submitter: Submitter, tmp_path: Path | None = None, **extra: object) -> Outbox:
    config: dict[str, object] = {
        "user": {"url-smtp": "smtps://r", "url-imap": "imaps://r",
                 "username": "me@example.test", "password": "pw"},
        "recipients": {"to": "you@example.test"},
        "timeout": 5,
        **extra,
    }  # fmt: skip
    if tmp_path is not None:
        config["spool"] = str(tmp_path / "spool")
    return Outbox(submitter, load_options(config))


def _email(n: int, to: str = "you@example.test", subject: str = "/t") -> Email:
    return Email(subject, "data: x", "me@example.test", to, message_id=f"<{n}@x>")


@pytest.fixture
def closing() -> Iterator[Callable[[Outbox], Outbox]]:
    made: list[Outbox] = []
    yield lambda outbox: made.append(outbox) or outbox
    for outbox in made:
        outbox.close()


def test_messages_within_the_linger_go_as_one_email(
    closing: Callable[[Outbox], Outbox],
) -> None:
    submitter = Recording()
    submitter.gate.clear()  # (a submission in flight: the others come meanwhile)
    outbox = closing(_outbox(submitter))
    outbox.send(_email(0), guarantee="memory", batch=BATCH)
    assert submitter.entered.wait(5)
    for n in range(1, 4):
        outbox.send(_email(n), guarantee="memory", batch=BATCH)
    submitter.gate.set()
    assert outbox.flush(5)
    # the first went at once (the outbox was idle: Nagle), the rest gathered behind it
    assert submitter.sent == [["<0@x>"], ["<1@x>", "<2@x>", "<3@x>"]]


def test_a_message_to_an_idle_outbox_goes_at_once_not_after_the_linger(
    closing: Callable[[Outbox], Outbox],
) -> None:
    """A batch costs latency only when there is traffic to share it: paced messages each
    go at once, alone, whatever the linger."""
    submitter = Recording()
    outbox = closing(_outbox(submitter))
    slow = BatchPolicy(linger_ms=5000, max_messages=50)
    for n in range(3):
        started = time.monotonic()
        outbox.send(_email(n), guarantee="memory", batch=slow)
        assert outbox.flush(4)  # well within the 5 s linger
        assert time.monotonic() - started < 4
    assert submitter.sent == [["<0@x>"], ["<1@x>"], ["<2@x>"]]


def test_a_batch_carries_one_subject_and_keeps_each_streams_order(
    closing: Callable[[Outbox], Outbox],
) -> None:
    """Interleaved topics batch per topic (a group member claims a batch whole: it must
    carry its subscription's messages only), each topic's messages in order."""
    submitter = Recording()
    submitter.gate.clear()
    outbox = closing(_outbox(submitter))
    outbox.send(_email(0, subject="/a"), guarantee="memory", batch=BATCH)  # at once
    assert submitter.entered.wait(5)
    for n in range(1, 7):
        outbox.send(_email(n, subject="/a" if n % 2 else "/b"), guarantee="memory",
                    batch=BATCH)  # fmt: skip
    submitter.gate.set()
    assert outbox.flush(5)
    assert submitter.sent == [["<0@x>"], ["<1@x>", "<3@x>", "<5@x>"], ["<2@x>", "<4@x>", "<6@x>"]]


def test_a_batch_is_cut_at_max_messages_and_max_bytes(
    closing: Callable[[Outbox], Outbox],
) -> None:
    submitter = Recording()
    outbox = closing(_outbox(submitter))
    lingering = BatchPolicy(linger_ms=1000, max_messages=5)
    for n in range(12):
        outbox.send(_email(n), guarantee="memory", batch=lingering)
    assert outbox.flush(5)
    assert max(len(ids) for ids in submitter.sent) == 5
    assert [i for ids in submitter.sent for i in ids] == [f"<{n}@x>" for n in range(12)]
    submitter.sent.clear()
    submitter.gate.clear()
    small = BatchPolicy(linger_ms=200, max_messages=100, max_bytes=1024)
    for n in range(6):
        outbox.send(_email(n), guarantee="memory", batch=small)
    submitter.gate.set()
    assert outbox.flush(5)
    size = len(_raw(0))
    per_batch = 1024 // size
    assert all(len(ids) <= per_batch for ids in submitter.sent)
    assert sum(len(ids) for ids in submitter.sent) == 6


def test_order_is_kept_and_other_recipients_or_unbatched_mail_close_a_batch(
    closing: Callable[[Outbox], Outbox],
) -> None:
    submitter = Recording()
    submitter.gate.clear()
    outbox = closing(_outbox(submitter))
    outbox.send(_email(0), guarantee="memory")  # goes first, alone
    outbox.send(_email(1), guarantee="memory", batch=BATCH)
    outbox.send(_email(2), guarantee="memory", batch=BATCH)
    outbox.send(_email(3, to="other@example.test"), guarantee="memory", batch=BATCH)
    outbox.send(_email(4), guarantee="memory", batch=BATCH)
    outbox.send(_email(5), guarantee="memory")  # not batched: the stream's order holds
    outbox.send(_email(6), guarantee="memory", batch=BATCH)
    submitter.gate.set()
    assert outbox.flush(5)
    # another envelope's email waits its turn; none is taken ahead of its own stream's
    assert submitter.sent == [["<0@x>"], ["<1@x>", "<2@x>", "<4@x>"], ["<3@x>"], ["<5@x>"],
                              ["<6@x>"]]  # fmt: skip


def test_server_guarantee_returns_when_the_batch_is_accepted(
    closing: Callable[[Outbox], Outbox],
) -> None:
    submitter = Recording()
    submitter.gate.clear()  # the first email in flight while the others are sent
    outbox = closing(_outbox(submitter, batch={"linger-ms": 300, "max-messages": 10}))
    done: list[float] = []
    started = time.monotonic()

    def send(n: int) -> None:
        outbox.send(_email(n))  # the context's batch, the server guarantee
        done.append(time.monotonic() - started)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(4)]
    threads[0].start()
    assert submitter.entered.wait(5)
    for thread in threads[1:]:
        thread.start()
    deadline = time.monotonic() + 5
    while len(outbox._queue) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    submitter.gate.set()
    for thread in threads:
        thread.join(10)
    assert len(done) == 4
    assert sorted(len(ids) for ids in submitter.sent)[-1] >= 2  # they travelled together
    assert sum(len(ids) for ids in submitter.sent) == 4


def test_a_refused_batch_is_sent_again_one_by_one(
    closing: Callable[[Outbox], Outbox],
) -> None:
    submitter = Recording(refuse=lambda e: batch_parts(e.raw) is not None)
    submitter.gate.clear()
    outbox = closing(_outbox(submitter))
    outbox.send(_email(0), guarantee="memory", batch=BATCH)
    assert submitter.entered.wait(5)
    for n in range(1, 4):
        outbox.send(_email(n), guarantee="memory", batch=BATCH)
    submitter.gate.set()
    assert outbox.flush(5)
    assert submitter.sent == [["<0@x>"], ["<1@x>"], ["<2@x>"], ["<3@x>"]]


def test_spooled_messages_are_on_disk_before_the_batch_is_built(
    tmp_path: Path, closing: Callable[[Outbox], Outbox]
) -> None:
    submitter = Recording()
    submitter.gate.clear()
    outbox = closing(_outbox(submitter, tmp_path))
    for n in range(3):
        outbox.send(_email(n), guarantee="spool", batch=BATCH)
    assert len(list((tmp_path / "spool").glob("*.msg"))) == 3  # returned: each on disk
    submitter.gate.set()
    assert outbox.flush(5)
    assert sum(len(ids) for ids in submitter.sent) == 3
    assert list((tmp_path / "spool").glob("*.msg")) == []  # accepted: removed


# -- the receiving side's position ------------------------------------------------------


def test_a_batch_email_settles_when_all_its_parts_have(tmp_path: Path) -> None:
    options = load_options({"email": {"intraprocess": True,
                                      "state-file": str(tmp_path / "state.json")}})  # fmt: skip
    position = ResumePosition(options, "me@example.test")
    position.start(1, 10)
    position.handing_out([10])
    for part in (0, 1, 2):  # all three reached the application
        position.give(1, 10, part)
    assert position.settle_part(1, 10, 0, 3, "ack") is None
    assert position.settle_part(1, 10, 0, 3, "ack") is None  # idempotent
    assert position.settle_part(1, 10, 2, 3, "quarantine") is None
    # a restart in the middle: the settled parts are remembered
    again = ResumePosition(options, "me@example.test")
    assert again.start(1, 11) == [10]
    assert again.parts_settled(10) == {0: "ack", 2: "quarantine"}
    assert again.redelivered(10, part=1)
    # the last part: the whole email's outcome keeps the quarantined part readable
    assert again.settle_part(1, 10, 1, 3, "ack") == "quarantine"
    assert again.settle(1, 10)
    assert ResumePosition(options, "me@example.test").start(1, 11) == []


def test_only_what_reached_an_application_is_flagged_after_a_restart(tmp_path: Path) -> None:
    """A crashed subscriber's queue held messages no application had: they come again
    unflagged; what an application had comes flagged (the 'redelivered cries wolf' bug:
    every pending email's every part was flagged)."""
    options = load_options({"email": {"intraprocess": True,
                                      "state-file": str(tmp_path / "state.json")}})  # fmt: skip
    position = ResumePosition(options, "me@example.test")
    position.start(1, 10)
    position.handing_out([10, 11, 12])  # a batch email (10), two plain ones
    position.give(1, 10, 0)
    position.give(1, 10, 1)
    position.settle_part(1, 10, 0, 50, "ack")  # part 1 is with the application
    position.give(1, 11, 0)  # with the application; 12 waits in a queue
    again = ResumePosition(options, "me@example.test")
    assert again.start(1, 13) == [10, 11, 12]
    assert [again.redelivered(10, part=p) for p in (1, 2, 49)] == [True, False, False]
    assert again.redelivered(11)
    assert not again.redelivered(12)
    # a state file of an earlier version says nothing of what was given: all flagged
    data = json.loads((tmp_path / "state.json").read_text())
    del data["given"]
    (tmp_path / "state.json").write_text(json.dumps(data))
    old = ResumePosition(options, "me@example.test")
    old.start(1, 13)
    assert old.redelivered(12)
    assert old.redelivered(10, part=49)


@pytest.mark.parametrize(
    ("outcomes", "whole"),
    [
        (["ack", "ack"], "ack"),
        # a part left (not this process's to handle) or not processed (nack) keeps the
        # email where it is: acknowledging the others must not delete it
        (["leave", "ack"], "leave"),
        (["ack", "nack"], "leave"),
        (["leave", "leave"], "leave"),
        (["ack", "quarantine"], "quarantine"),
        (["nack", "quarantine"], "quarantine"),
    ],
)
def test_the_outcome_of_a_whole_batch(outcomes: list[str], whole: str) -> None:
    position = ResumePosition(load_options({"email": {"intraprocess": True}}), "me")
    position.start(1, 5)
    position.handing_out([5])
    results = [position.settle_part(1, 5, i, len(outcomes), o) for i, o in enumerate(outcomes)]
    assert results == [None] * (len(outcomes) - 1) + [whole]


# -- one message, several emails --------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400), st.integers(min_value=4, max_value=64))
def test_parts_join_back_into_the_message(body: str, chunk: int) -> None:
    message = Email("/big", body, "me@example.test", "you@example.test",
                    headers={"Source-Timestamp": "1"}, message_id="<big@x>")  # fmt: skip
    parts = split_email(message, chunk)
    assert all(len(p.body.encode("utf-8", "surrogatepass")) <= chunk for p in parts)
    if len(parts) == 1:
        assert parts == [message]
        return
    assert [part_of(p) for p in parts] == [
        PartOf("<big@x>", n, len(parts)) for n in range(1, len(parts) + 1)
    ]
    assert len({p.message_id for p in parts}) == len(parts)
    assert join_parts(parts) == message
    assert [parse(build(p)) for p in parts] == parts  # each goes on the wire as it is


@pytest.mark.parametrize("resent", [[], [1], [2, 3]])
def test_a_message_with_a_part_sent_again_from_a_spool_is_flagged_redelivered(
    resent: list[int],
) -> None:
    # a publisher killed after the server took a part, before its spool forgot it, sends
    # that part again marked (the outbox prepends the header to the stored bytes): the
    # message joined from any such part may be a repeat, so it is flagged
    message = publish_email("/big", "x" * 300, recipients=Recipients("you@x", ("you@x",)),
                            gid=Gid(1), sequence_number=7, timestamp_ns=1)  # fmt: skip
    message = message.replace(message_id="<big@x>")
    parts = [
        parse(b"Emailmw-Resent: spool\r\n" + build(p)) if n in resent else p
        for n, p in enumerate(split_email(message, 120), start=1)
    ]
    assert len(parts) == 3
    route = classify(join_parts(parts), 0)
    assert isinstance(route, PublishRoute)
    assert route.info.redelivered is bool(resent)


@pytest.mark.parametrize("value", ["x", "0/3", "4/3", "1/0", "1/200000"])
def test_a_part_header_out_of_range_is_malformed(value: str) -> None:
    email_ = Email("/big", "b", headers={"Part": value, "Part-Of": "<m@x>"})
    with pytest.raises(MalformedEmailError):
        part_of(email_)


def test_reassembly_holds_completes_refuses_and_gives_up() -> None:
    waiting: Reassembly[str] = Reassembly(timeout=10)
    assert waiting.offer(PartOf("<m@x>", 2, 3), "ann", "b", now=0) == ("held", [])
    assert waiting.offer(PartOf("<m@x>", 2, 3), "ann", "b again", now=1) == (
        "duplicate",
        ["b again"],
    )
    assert waiting.offer(PartOf("<m@x>", 1, 4), "ann", "odd", now=1) == ("refused", ["odd"])
    assert waiting.offer(PartOf("<m@x>", 1, 3), "eve", "forged", now=1) == ("held", [])
    assert waiting.offer(PartOf("<m@x>", 3, 3), "ann", "c", now=2) == ("held", [])
    assert waiting.offer(PartOf("<m@x>", 1, 3), "ann", "a", now=3) == ("complete", ["a", "b", "c"])
    assert waiting.expired(now=10.5) == []
    assert waiting.expired(now=11) == [("<m@x>", 3, [1], ["forged"], False)]
    assert len(waiting) == 0


def test_parts_of_a_message_another_signer_sent_whole_are_foreign_when_given_up() -> None:
    # (#59: another signer's parts naming a message it did not send stayed in INBOX)
    waiting: Reassembly[str] = Reassembly(timeout=10)
    waiting.offer(PartOf("<m@x>", 2, 2), "eve", "forged", now=0)
    waiting.offer(PartOf("<m@x>", 1, 2), "ann", "a", now=0)
    waiting.offer(PartOf("<n@x>", 1, 2), "ann", "lost on the way", now=0)
    assert waiting.offer(PartOf("<m@x>", 2, 2), "ann", "b", now=1)[0] == "complete"
    waiting.joined("<m@x>", "ann")  # (its body the one its parts name)
    assert sorted(waiting.expired(now=10)) == [
        ("<m@x>", 2, [2], ["forged"], True),  # eve's: foreign
        ("<n@x>", 2, [1], ["lost on the way"], False),  # ann's own, a part missing
    ]


def test_a_compressed_body_comes_back() -> None:
    pytest.importorskip("zstandard")
    text = "data: " + "ü" * 50_000
    packed = compress_body(text)
    assert len(packed) < 2_000
    assert decompress_body(packed, "zstd", 1 << 20) == text
    with pytest.raises(MalformedEmailError, match="exceeds"):
        decompress_body(packed, "zstd", 1_000)
    with pytest.raises(MalformedEmailError, match="unknown Body-Encoding"):
        decompress_body(packed, "brotli", 1 << 20)
    with pytest.raises(MalformedEmailError, match="unreadable"):
        decompress_body("not base64!", "zstd", 1 << 20)


def _thirty_bytes(message_id: str) -> Email:
    """A message of 30 bytes on /big with ``message_id`` (three parts of 12 bytes)."""
    recipients = Recipients("me@example.test", ("you@example.test",))
    return publish_email(
        "/big", "0123456789" * 3, recipients=recipients, gid=Gid(3), sequence_number=7,
        timestamp_ns=10**18,
    ).with_message_id(message_id)  # fmt: skip


class _Nothing(EmailReceiver):
    def receive(self, timeout: float | None = None) -> list[Email]:
        return []

    def close(self) -> None:
        pass


def _incoming(email_: Email, outcomes: list[str]) -> IncomingEmail:
    return IncomingEmail(email_, settle=lambda outcome, then: outcomes.append(outcome))


def test_the_polling_thread_delivers_a_message_once_every_part_is_there() -> None:
    """Out of order, with a duplicate: the handler gets the whole message once, and
    settling it settles each part; a message whose parts do not all come is given up and
    its parts left where they are."""
    polling = PollingManager(_Nothing(), part_timeout=30)
    got: list[tuple[str, str]] = []
    polling.register_handler(lambda email_, route, ticket: got.append((email_.body, route.topic)))
    recipients = Recipients("me@example.test", ("you@example.test",))
    message = publish_email(
        "/big", "0123456789" * 5, recipients=recipients, gid=Gid(3), sequence_number=7,
        timestamp_ns=10**18,
    ).with_message_id("<m@x>")  # fmt: skip
    parts = split_email(message, 12)
    outcomes: list[str] = []
    for index in (3, 0, 0, 4, 2, 1):
        polling.dispatch(_incoming(parts[index], outcomes))
    assert got == [("0123456789" * 5, "/big")]
    assert outcomes == ["ack"] + ["ack"] * 5  # the duplicate at once, then every part
    lonely = split_email(message.with_message_id("<n@x>"), 12)
    left: list[str] = []
    polling.dispatch(_incoming(lonely[0], left))
    polling._give_up_parts(time.monotonic() + 60)
    assert left == ["leave"]
    assert len(got) == 1


def test_parts_that_do_not_make_the_body_they_name_are_quarantined() -> None:
    """Each part names its whole's Message-ID and digest: a part of the signer's other
    message carrying the same Part-Of (or altered on the way) does not make a message; the
    parts are quarantined, nothing delivered. Part IDs are random, not the whole's ID."""
    polling = PollingManager(_Nothing(), part_timeout=30)
    got: list[str] = []
    polling.register_handler(lambda email_, route, ticket: got.append(email_.body))
    message = _thirty_bytes("<d@x>")
    parts = split_email(message, 12)
    assert {p.headers["Part-Digest"] for p in parts} == {
        "sha256=" + hashlib.sha256(message.body.encode()).hexdigest()
    }
    assert not any(str(p.message_id).startswith("<d.") for p in parts)  # (were <d.partN@x>)
    other = split_email(message.replace(body="9876543210" * 3), 12)
    outcomes: list[str] = []
    for part in (parts[0], other[1].replace(headers=parts[1].headers), parts[2]):
        polling.dispatch(_incoming(part, outcomes))
    assert got == []
    assert outcomes == ["quarantine"] * 3
    assert PieceDigest.of(message.body, parts[0].headers["Part-Digest"])
    assert PieceDigest.of("anything", None)  # (parts from before digests)


class _Fence:
    """A claim whose state the test sets (``emailmw._transport.base.Claim``)."""

    def __init__(self, state: str = "ready") -> None:
        self.now = state

    def state(self) -> str:
        return self.now

    def deliver(self) -> int | None:
        return 1 if self.now == "ready" else None


def test_a_part_that_comes_again_replaces_its_lost_copy() -> None:
    """A group member gave a part back (its claim lost here) and it came again: the new
    copy takes the part's place and the message is delivered (was: the new copy was
    acknowledged as a duplicate, the lost one withdrawn at the end: the message lost)."""
    polling = PollingManager(_Nothing(), part_timeout=30, drop_duplicates=False)  # (a group's)
    got: list[str] = []
    polling.register_handler(lambda email_, route, ticket: got.append(email_.body))
    message = _thirty_bytes("<r@x>")
    first, second, third = split_email(message, 12)
    outcomes: list[str] = []
    lost = _Fence()
    polling.dispatch(IncomingEmail(first, settle=lambda o, t: outcomes.append(o), claim=lost))
    polling.dispatch(IncomingEmail(second, settle=lambda o, t: outcomes.append(o),
                                   claim=_Fence()))  # fmt: skip
    lost.now = "lost"  # given back: another copy of it comes
    polling.dispatch(IncomingEmail(first, settle=lambda o, t: outcomes.append(o),
                                   claim=_Fence()))  # fmt: skip
    assert outcomes == []  # not taken for a duplicate and acknowledged
    polling.dispatch(IncomingEmail(third, settle=lambda o, t: outcomes.append(o),
                                   claim=_Fence()))  # fmt: skip
    assert got == ["0123456789" * 3]


def test_parts_that_went_to_another_group_member_are_given_up_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A group member gave its parts of a message back (another member joins it): at
    part-timeout they are forgotten without the warning of a message whose parts never
    came (it is not incomplete: another member has it); they are only left (a claim lost
    here moves nothing)."""
    polling = PollingManager(_Nothing(), part_timeout=30, drop_duplicates=False)
    message = _thirty_bytes("<g@x>")
    first, _, _ = split_email(message, 12)
    outcomes: list[str] = []
    fence = _Fence()
    polling.dispatch(IncomingEmail(first, settle=lambda o, t: outcomes.append(o), claim=fence))
    fence.now = "lost"
    with caplog.at_level("WARNING", logger="emailmw"):
        polling._give_up_parts(time.monotonic() + 60)
    assert not [r for r in caplog.records if "incomplete" in r.getMessage()]
    assert len(polling._reassembly) == 0
