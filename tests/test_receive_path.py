"""No email can stop a receiver: arbitrary bytes through the whole receive path, the resume
position and its settlement as a state machine, and the bounds that hold against floods.
Intraprocess and pure; the same against the real server is in tests/email/test_reliability.py."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import emailmw
from emailmw import Gid, InvalidHeaderError
from emailmw._core.config import load_options
from emailmw._core.protocol import Recipients, publish_email, response_email
from emailmw._core.wire import build
from emailmw._transport.common import MailboxActions, ResumePosition, folder_roles, uid_set
from emailmw._transport.curl import parse_list
from emailmw._transport.intraprocess import IntraprocessReceiver
from emailmw.testing._modes import wait_for as wait_until

from .test_wire import ANY_BYTES


@pytest.fixture(scope="module")
def raw_ctx() -> Iterator[emailmw.Context]:
    context = emailmw.Context({"intraprocess": True})
    yield context
    context.shutdown()


def _legit(topic: str, body: str) -> bytes:
    email = publish_email(
        topic,
        body,
        recipients=Recipients("a@example.test", ("b@example.test",)),
        gid=Gid(7),
        sequence_number=0,
        timestamp_ns=1,
    ).with_message_id(f"<{uuid.uuid4().hex}@example.test>")
    return build(email)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_BYTES)
def test_no_bytes_stop_the_receive_path(raw_ctx: emailmw.Context, raw: bytes) -> None:
    """Whatever arrives, the next legitimate email is delivered: bytes go through the same
    parsing as fetched mail, then classification, routing and the subscription."""
    receiver = raw_ctx.receiver
    assert isinstance(receiver, IntraprocessReceiver)
    topic = f"/after/{uuid.uuid4().hex}"
    with emailmw.Subscription(topic, context=raw_ctx) as sub:
        receiver.deliver_bytes(raw)  # never raises, whatever the bytes
        assert receiver.deliver_bytes(_legit(topic, "still here"))
        assert emailmw.wait_for_message(sub, 10) == "still here"
    assert raw_ctx._polling.running


POISON = [
    b"Subject: /p\r\nSource-Timestamp: 1\r\nPublisher-GID: 1\r\n"
    b"Content-Type: text/plain; charset=undefined\r\n\r\nabc\r\n",
    b"Subject: /p\r\nSource-Timestamp: 1\r\nPublisher-GID: 1\r\n"
    b"Content-Type: text/plain; charset=punycode\r\n\r\nabc-9999999999\r\n",
    b"Subject: =?undefined?q?a?=\r\nSource-Timestamp: 1\r\nPublisher-GID: 1\r\n\r\nabc\r\n",
    b"Subject: /p\r\nSource-Timestamp: 1\r\nPublisher-GID: 1\r\n"
    b"Content-Type: text/plain; charset=utf\x00\r\n\r\nabc\r\n",
    b"Subject: /p\r\nSource-Timestamp: 1\r\nPublisher-GID: 1\r\n"
    b"Content-Type: text/plain; charset=unicode_escape\r\n\r\n\\ud800\r\n",
    b"Subject: /p\r\nSource-Timestamp: 10000000000000000000000000000000000000000\r\n"
    b"Publisher-GID: 1\r\n\r\nabc\r\n",
]


def test_poison_between_legitimate_mail_is_logged_once_each_and_delivers_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each kind of poison is logged once with its reason; repeats of a kind are counted
    per 10 s (a receiver's own log of unusable mail: a context of its own, fresh)."""
    raw_ctx = emailmw.Context({"intraprocess": True})
    receiver = raw_ctx.receiver
    assert isinstance(receiver, IntraprocessReceiver)
    topic = f"/mixed/{uuid.uuid4().hex}"
    poison_topic = emailmw.Subscription("/p", context=raw_ctx)
    with emailmw.Subscription(topic, context=raw_ctx) as sub, caplog.at_level(logging.INFO):
        for i, raw in enumerate(POISON):
            receiver.deliver_bytes(raw)
            receiver.deliver_bytes(_legit(topic, f"m{i}"))
        got = [emailmw.wait_for_message(sub, 10) for _ in POISON]
    assert got == [f"m{i}" for i in range(len(POISON))]
    assert not poison_topic.has_message()
    raw_ctx.shutdown()
    complaints = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # one line each, but for the two whose reason is the same (an unknown charset
    # 'undefined', in the body and in the Subject): counted, said once
    assert len(complaints) == len(POISON) - 1
    assert sum("'undefined'" in line for line in complaints) == 1


def test_publish_refuses_headers_only_the_sender_and_servers_set(ctx: emailmw.Context) -> None:
    pub = emailmw.Publisher("t", context=ctx)
    for name in ("Sender", "Return-Path", "Date", "Received", "Resent-From", "resent-date"):
        with pytest.raises(InvalidHeaderError, match=name):
            pub.publish("x", {name: "v"})
    pub.publish("x", {"X-Trace": "fine"})


# ----------------------------------------------------------------------------- bounds


def test_a_keep_all_subscription_is_back_pressure_at_queue_limit_never_a_drop() -> None:
    """A subscription without a depth keeps what it is handed; the context holds at most
    queue-limit unsettled emails, and the rest waits in the mailbox until the application
    has taken some: all eight arrive, in order, none dropped."""
    with emailmw.Context({"intraprocess": True, "queue-limit": 5}) as ctx:
        sub = emailmw.Subscription("t", context=ctx)
        pub = emailmw.Publisher("t", context=ctx)
        for i in range(8):
            pub.publish(str(i))
        assert emailmw.wait_for_message(sub, 5) == "0"
        assert wait_until(lambda: ctx.budget.held_emails == 5)  # full: the rest waits
        assert len(sub._queue) == 5
        assert [emailmw.wait_for_message(sub, 5) for _ in range(7)] == list("1234567")
        assert sub.dropped == 0


def test_a_flood_of_requests_is_back_pressure_at_queue_limit_never_a_drop() -> None:
    """Thirty requests with queue-limit 10: at most ten wait in the server at a time (taken
    or not, until answered), the rest in the mailbox; each is answered in the end."""
    with emailmw.Context({"intraprocess": True, "queue-limit": 10}) as ctx:
        server = emailmw.ServiceServer("svc", context=ctx)
        clients = [emailmw.ServiceClient("svc", context=ctx) for _ in range(30)]
        calls = [(client, client.send_request(f"x{i}")) for i, client in enumerate(clients)]
        assert wait_until(lambda: len(server._pending) == 10)
        taken = [server.get_request() for _ in range(10)]
        assert all(t is not None for t in taken)
        assert not server.has_request()  # every one taken, none answered: nothing more
        assert ctx.budget.held_emails == 10
        answered = 0
        while answered < 30:
            request = emailmw.wait_for_request(server, 5) if answered >= 10 else taken[answered]
            assert request is not None
            server.send_response(request.id, request.content.upper())
            answered += 1
        for i, (client, seq) in enumerate(calls):
            assert emailmw.wait_for_response(client, seq, 5) == f"X{i}"


def test_a_client_keeps_only_replies_to_its_own_pending_requests(ctx: emailmw.Context) -> None:
    server = emailmw.ServiceServer("svc", context=ctx)
    client = emailmw.ServiceClient("svc", context=ctx)
    receiver = ctx.receiver
    assert isinstance(receiver, IntraprocessReceiver)
    seq = client.send_request("q")
    request = emailmw.wait_for_request_with_info(server, 5)
    assert request is not None
    original = server._pending[request[0].id][0]
    # forgeries: a right GID and sequence number with a made-up In-Reply-To, replies to
    # requests never sent, in numbers
    for n in range(200):
        forged = response_email(
            original.with_message_id(f"<forged{n}@elsewhere.test>"),
            "forged",
            from_="mallory@example.test",
            timestamp_ns=1,
        )
        headers = forged.headers.merged({"Request-Sequence-Number": str(seq + n % 2)})
        receiver.deliver_bytes(build(forged.replace(headers=headers, message_id=f"<f{n}@x>")))
    server.send_response(request[0].id, "real")
    assert emailmw.wait_for_response(client, seq, 5) == "real"
    assert client.unexpected_responses == 200
    assert client._waiting == {}
    assert len(client._pending) == 0


def test_a_late_reply_to_an_abandoned_call_is_dropped(ctx: emailmw.Context) -> None:
    emailmw.ServiceServer("slow", context=ctx)  # never answers by itself
    client = emailmw.ServiceClient("slow", context=ctx)
    with pytest.raises(emailmw.ServiceTimeoutError):
        client.call("q", timeout=0.05)
    assert len(client._pending) == 0


# ----------------------------------------------------------------------------- position


def _options(tmp_path: Path, **extra: object) -> emailmw.Options:
    return load_options({"intraprocess": True, "state-file": str(tmp_path / "s.json"), **extra})


def test_position_hands_out_again_what_was_not_settled(tmp_path: Path) -> None:
    position = ResumePosition(_options(tmp_path), "me@example.test")
    assert position.start(uidvalidity=7, uidnext=10) == []
    position.handing_out([10, 11, 12], settled=[13])
    for uid in (10, 11, 12):  # each reached an application
        position.give(7, uid, 0)
    assert position.next_uid == 14
    assert position.settle(7, 11)
    assert not position.settle(7, 11)  # once
    assert not position.settle(6, 10)  # a UID of the folder before a UIDVALIDITY change
    saved = json.loads((tmp_path / "s.json").read_text())
    assert (saved["last_uid"], saved["pending"]) == (13, [10, 12])

    # a process killed now: the next hands out 10 and 12 again, flagged, then new mail
    again = ResumePosition(_options(tmp_path), "me@example.test")
    assert again.start(uidvalidity=7, uidnext=20) == [10, 12]
    assert again.next_uid == 14
    assert again.redelivered(10)
    assert again.redelivered(12)
    assert not again.redelivered(14)
    assert again.start(uidvalidity=7, uidnext=20) is None  # a reconnect changes nothing


def test_after_a_uidvalidity_change_only_mail_seen_before_is_flagged(tmp_path: Path) -> None:
    """The folder is read again from its start; of what comes, mail this receiver may have
    handed out before is flagged (a Message-ID it handed out, or stored before the newest
    second it handed out), new mail is not (it flagged all of it: 10 of 10)."""
    s = 1_000_000_000
    position = ResumePosition(_options(tmp_path), "me@example.test")
    position.start(uidvalidity=7, uidnext=10)
    position.handing_out([10, 11, 12], what={10: ("<a@x>", 100 * s), 11: ("<b@x>", 101 * s),
                                             12: ("<c@x>", 101 * s)})  # fmt: skip
    assert position.settle(7, 10)
    assert position.settle(7, 11)

    def flags(p: ResumePosition) -> list[bool]:
        return [
            p.redelivered(1, "<a@x>", 100 * s),  # handed out before
            p.redelivered(2, "<z@x>", 99 * s),  # stored before the newest handed out
            p.redelivered(3, "<c@x>", 101 * s),  # handed out in the newest second (pending)
            p.redelivered(4, "<b@x>", 101 * s),  # handed out in the newest second (settled)
            p.redelivered(5, "<d@x>", 101 * s),  # that second, never handed out: new
            p.redelivered(6, "<e@x>", 102 * s),  # new
            p.redelivered(7, "<f@x>", None),  # new, date unknown
        ]

    # a process that restarts after the folder was recreated knows it from the state file
    restarted = ResumePosition(_options(tmp_path), "me@example.test")
    assert restarted.start(uidvalidity=8, uidnext=12) == []
    assert flags(restarted) == [True, True, True, True, False, False, False]
    # one that sees it change knows what it handed out itself too
    assert position.start(uidvalidity=8, uidnext=12) == []
    assert position.next_uid == 1
    assert position.pending == set()
    assert flags(position) == [True, True, True, True, False, False, False]
    assert not position.redelivered(12, "<a@x>", 100 * s)  # mail of the new folder


def test_an_old_state_file_without_pending_still_resumes(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(
        json.dumps(
            {"account": "me@example.test", "folder": "INBOX", "uidvalidity": 7, "last_uid": 4}
        )
    )
    position = ResumePosition(_options(tmp_path), "me@example.test")
    assert position.start(uidvalidity=7, uidnext=9) == []
    assert position.next_uid == 5


def test_settling_queues_the_mailbox_actions(tmp_path: Path) -> None:
    actions = MailboxActions(_options(tmp_path, **{"on-receive": "delete", "quarantine": "Q"}))
    done: list[int] = []
    assert actions.queue(3, "ack")
    assert actions.queue(4, "quarantine", lambda: done.append(4))
    assert not actions.queue(5, "leave")  # foreign mail is never touched
    assert actions.queue(1, "ack")
    taken = dict(actions.take(0.0))
    assert {a: sorted(u for u, _ in items) for a, items in taken.items()} == {
        "delete": [1, 3], "move:Q": [4]
    }  # fmt: skip
    assert actions.take(0.0) == []
    keep = MailboxActions(_options(tmp_path))
    assert not keep.queue(1, "ack")


def test_a_mailbox_action_that_fails_is_tried_again_after_a_backoff(tmp_path: Path) -> None:
    actions = MailboxActions(_options(tmp_path, quarantine="Q"))
    actions.queue(4, "quarantine", lambda: None)
    ((action, items),) = actions.take(10.0)
    assert actions.failed(action, items, 10.0)  # the first failure is the one to tell
    assert actions.retry_at() == 11.0
    assert actions.take(10.5) == []  # backing off
    actions.queue(6, "quarantine")  # (more of the same waits with it)
    ((_, again),) = actions.take(11.0)
    assert sorted(u for u, _ in again) == [4, 6]
    assert not actions.failed(action, again, 11.0)  # failing still: not news
    assert actions.retry_at() == 13.0  # doubled
    assert len(actions.take(13.0)) == 1
    assert actions.worked(action)  # it works again: news
    assert actions.retry_at() is None
    assert not actions.worked(action)


def test_uid_sets_are_ranges_only() -> None:
    assert uid_set([7, 1, 2, 3, 9, 10]) == "1:3,7:7,9:10"
    assert uid_set([]) == ""


@pytest.fixture(scope="module")
def enforcing_ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[emailmw.Context]:
    store = emailmw.Keystore.create(tmp_path_factory.mktemp("ks") / "keystore")
    store.create_key("me")
    context = emailmw.Context({"intraprocess": True, "security": {
        "keystore": str(store.path), "identity": "me", "verify": "enforce"}})  # fmt: skip
    yield context
    context.shutdown()


HEADER_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)),
    max_size=120,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raw=ANY_BYTES,
    signature=HEADER_TEXT,
    encryption=HEADER_TEXT,
    body=HEADER_TEXT,
)
def test_no_bytes_stop_an_enforcing_receiver(
    enforcing_ctx: emailmw.Context, raw: bytes, signature: str, encryption: str, body: str
) -> None:
    """Signature, encryption, routing and acknowledgement headers of any text, on
    emailmw-shaped mail and on any bytes, go through classification and the security
    decision; the next signed email is delivered."""
    receiver = enforcing_ctx.receiver
    assert isinstance(receiver, IntraprocessReceiver)
    topic = f"/after/{uuid.uuid4().hex}"
    shaped = (
        f"Subject: {topic}\r\nSource-Timestamp: {time.time_ns()}\r\nPublisher-GID: 1\r\n"
        f"Message-ID: <{uuid.uuid4().hex}@x>\r\nEmailmw-Signature: {signature}\r\n"
        f"Emailmw-Encryption: {encryption}\r\n\r\n{body}"
    ).encode()
    routed = (
        f"Subject: {topic}\r\nSource-Timestamp: {time.time_ns()}\r\n"
        f"Message-ID: <{uuid.uuid4().hex}@x>\r\nRoute-To: {signature}\r\n"
        f"Route-From: {encryption}\r\nRoute-Hops: {body[:4]}\r\nRoute-Face: stem\r\n\r\n"
    ).encode()
    acked = (
        f"Subject: {topic}\r\nSource-Timestamp: {body[:20]}\r\nIn-Reply-To: <{signature}>\r\n"
        f"Message-ID: <{uuid.uuid4().hex}@x>\r\nAck-Publisher-GID: {signature}\r\n"
        f"Ack-Sequence-Number: {encryption}\r\nAck-Subscriber: {body}\r\n\r\n"
    ).encode()
    with emailmw.Subscription(topic, context=enforcing_ctx) as sub:
        receiver.deliver_bytes(raw)
        receiver.deliver_bytes(shaped)
        receiver.deliver_bytes(routed)
        receiver.deliver_bytes(acked)
        emailmw.Publisher(topic, context=enforcing_ctx).publish("still here")
        assert emailmw.wait_for_message(sub, 10) == "still here"
        assert sub.get_message() is None
    assert enforcing_ctx._polling.running


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seq=HEADER_TEXT, count=HEADER_TEXT, subscriber=HEADER_TEXT, stamp=HEADER_TEXT)
def test_no_acknowledgement_stops_a_publisher_waiting_for_its_own(
    seq: str, count: str, subscriber: str, stamp: str
) -> None:
    """Acknowledgements of any text for a publisher that waits for one reach the
    acknowledgement handler (or are refused as malformed) without harm; the real one
    completes the publisher's future."""
    with emailmw.Context({"intraprocess": True}) as ctx:
        receiver = ctx.receiver
        assert isinstance(receiver, IntraprocessReceiver)
        topic = f"/acked/{uuid.uuid4().hex}"
        publisher = emailmw.Publisher(topic, context=ctx)
        with emailmw.Subscription(topic, context=ctx) as sub:
            for gid in (str(publisher.gid.value), seq):
                receiver.deliver_bytes((
                    f"Subject: {topic}\r\nSource-Timestamp: {stamp}\r\n"
                    f"Message-ID: <{uuid.uuid4().hex}@x>\r\nAck-Publisher-GID: {gid}\r\n"
                    f"Ack-Sequence-Number: {seq}\r\nAck-Subscriber: {subscriber}\r\n"
                    f"Delivery-Count: {count}\r\n\r\n"
                ).encode())  # fmt: skip
            future = publisher.publish("real", ack=True)
            assert future is not None
            assert emailmw.wait_for_message(sub, 10) == "real"
            assert future.result(10).sequence_number == 0


def test_folder_roles_come_from_the_list_answer_as_servers_write_it() -> None:
    """A ``LIST`` answer's SPECIAL-USE attributes (RFC 6154) name each role's folder:
    quoted names (escapes undone), atoms, any case of the attribute; the first folder with
    a role wins; a name sent as a literal is left out rather than misread."""
    answer = (
        b'* LIST (\\HasNoChildren \\Sent) "/" Sent\r\n'
        b'* LIST (\\HasNoChildren \\TRASH) "/" "Papierkorb"\r\n'
        b'* LIST (\\Archive) "." "[Gmail].Alle \\"Nachrichten\\""\r\n'
        b'* LIST (\\Junk) NIL "Spam"\r\n'
        b'* LIST (\\Junk) "/" "Junk2"\r\n'
        b'* LIST (\\Drafts) "/" {6}\r\nDrafts\r\n'
        b'* LIST (\\HasNoChildren) "/" INBOX\r\n'
    )
    roles = folder_roles(parse_list(answer))
    assert roles == {
        "\\sent": "Sent", "\\trash": "Papierkorb", "\\archive": '[Gmail].Alle "Nachrichten"',
        "\\junk": "Spam",
    }  # fmt: skip
