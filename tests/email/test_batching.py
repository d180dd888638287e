"""Batches over the real server, both transports: many messages in few emails, each
received, settled and verified on its own; a poison part stops no other and is never
deleted; a subscriber killed in the middle of a batch loses nothing (a batching publisher
killed mid-burst: test_reliability.py); services batch too."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import emailmw
from emailmw import Keystore
from emailmw._core.packing import build_batch
from emailmw._core.protocol import publish_email
from emailmw._core.wire import build
from emailmw.testing.mailserver import MailServer
from tests.conftest import MakeContext

from ..helpers import deadline_loop
from .helpers import TRANSPORTS, Peer, folder_subjects, inject, transport_extra, write_config
from .test_security_server import wait_for_quarantined

BATCH = {"batch": {"linger-ms": 200, "max-messages": 20}}


def _batches(server: MailServer, address: str, folder: str = "INBOX") -> list[bytes]:
    return [s for s in folder_subjects(server, address, folder) if b"emailmw batch of" in s]


def _messages(server: MailServer, address: str, folder: str = "INBOX") -> list[bytes]:
    """The Subjects in ``folder`` but emailmw's own records (reader records, probes)."""
    return [s for s in folder_subjects(server, address, folder) if b"/_emailmw/graph" not in s]


def _receive(sub: emailmw.Subscription, count: int, timeout: float = 60) -> list[Any]:
    got: list[Any] = []
    more = deadline_loop(timeout)
    while len(got) < count and more():
        found = emailmw.wait_for_message_with_info(sub, 1)
        if found is not None:
            got.append(found)
    return got


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_batched_messages_arrive_each_on_its_own(
    mailserver: MailServer, account: Callable[[], str], email_context: MakeContext,
    transport: str,
) -> None:  # fmt: skip
    sender, receiver = account(), account()
    listener = email_context(receiver, transport=transport, **transport_extra(transport))
    sub = emailmw.Subscription("/batched", context=listener)
    listener.start_receiving()
    talker = email_context(sender, to=receiver, transport=transport, **BATCH)
    assert talker.wait_for_readers("batch", 30)  # the listener said it reads batches
    pub = emailmw.Publisher("/batched", context=talker, guarantee="memory")
    for i in range(60):
        pub.publish(f"m{i}")
    assert talker.flush(30)
    got = _receive(sub, 60)
    # (the server may deliver separate emails in another order: within a batch, the order
    # is the publisher's)
    assert sorted((info.sequence_number, body) for body, info in got) == [
        (i, f"m{i}") for i in range(60)
    ]
    assert {info.publisher_gid for _, info in got} == {pub.gid}
    emails = _messages(mailserver, receiver)
    # (the first goes at once, alone: the outbox was idle; the rest gather behind it)
    assert 3 <= len(_batches(mailserver, receiver)) >= len(emails) - 1
    assert len(emails) <= 10  # not 60


def test_an_unbatched_publisher_in_a_batching_context_sends_alone(
    mailserver: MailServer, account: Callable[[], str], email_context: MakeContext
) -> None:
    sender, receiver = account(), account()
    sub = emailmw.Subscription("/alone", context=email_context(receiver))
    talker = email_context(sender, to=receiver, **BATCH)
    pub = emailmw.Publisher("/alone", context=talker, guarantee="memory", batch=False)
    for i in range(5):
        pub.publish(f"m{i}")
    assert talker.flush(30)
    assert sorted(body for body, _ in _receive(sub, 5)) == [f"m{i}" for i in range(5)]
    assert _batches(mailserver, receiver) == []


def test_services_batch_requests_and_responses(
    mailserver: MailServer, account: Callable[[], str], email_context: MakeContext
) -> None:
    client_address, server_address = account(), account()
    # (with the server guarantee each send waits for its email: batches form from the
    # messages several threads send meanwhile; with memory, from what one thread queues)
    quick = {"send-guarantee": "memory", **BATCH}
    server_ctx = email_context(server_address, **quick)
    emailmw.ServiceServer("/add", lambda r: str(sum(map(int, r.split()))), context=server_ctx)
    server_ctx.start_receiving()
    client_ctx = email_context(client_address, to=server_address, **quick)
    client = emailmw.ServiceClient("/add", context=client_ctx)
    client_ctx.start_receiving()
    # each side said what it reads: the server hears from the client, and the client
    # from the server, once they asked (probes)
    assert client_ctx.wait_for_readers("batch", 30)
    assert server_ctx.wait_for_readers("batch", 30, recipients=[client_address])
    futures = [client.send_request_async(f"{i} {i}") for i in range(10)]
    assert [f.result(60)[0] for f in futures] == [str(2 * i) for i in range(10)]
    assert _batches(mailserver, server_address)  # the requests travelled together
    assert _batches(mailserver, client_address)  # and so did the responses


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_poison_part_stops_no_other_and_is_never_deleted(
    mailserver: MailServer, account: Callable[[], str], email_context: MakeContext,
    caplog: pytest.LogCaptureFixture, transport: str,
) -> None:  # fmt: skip
    receiver = account()
    listener = email_context(
        receiver, transport=transport, quarantine="Quarantine",
        **{"on-receive": "delete"}, **transport_extra(transport),
    )  # fmt: skip
    sub = emailmw.Subscription("/poison", context=listener)
    listener.start_receiving()
    recipients = emailmw.Recipients(receiver, (receiver,))

    def good(i: int) -> bytes:
        email = publish_email("/poison", f"m{i}", recipients=recipients, gid=emailmw.Gid(9),
                              sequence_number=i, timestamp_ns=time.time_ns())  # fmt: skip
        return build(email.with_message_id(f"<poison{i}.{time.time_ns()}@example.test>"))

    poison = b"Subject: /poison\r\nContent-Type: text/plain; charset=punycode\r\n\r\n\xff\r\n"
    batch = build_batch([good(0), poison, good(2)], from_=receiver, to=[receiver],
                        message_id=f"<b{time.time_ns()}@example.test>",
                        timestamp_ns=time.time_ns(), subjects=["/poison"])  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        inject(mailserver, receiver, batch)
        got = _receive(sub, 2)
        assert [body for body, _ in got] == ["m0", "m2"]
        more = deadline_loop(30)
        while more() and not _batches(mailserver, receiver, "Quarantine"):
            time.sleep(0.05)
    assert len(_batches(mailserver, receiver, "Quarantine")) == 1  # kept, not deleted
    assert _batches(mailserver, receiver) == []
    assert any("part 2" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_subscriber_killed_mid_batch_resumes_with_nothing_lost_or_repeated_unflagged(
    mailserver: MailServer, account: Callable[[], str], email_context: MakeContext,
    peers: list[Peer], tmp_path: Path, transport: str,
) -> None:  # fmt: skip
    sender, receiver = account(), account()
    config = write_config(
        tmp_path / "sub.yml",
        mailserver.config(receiver, transport=transport,
                          **{"state-file": str(tmp_path / "s.json")},
                          **transport_extra(transport)),
    )  # fmt: skip
    slow = Peer("sub", config, "/stream", "--take-every", "0.1")
    peers.append(slow)
    slow.wait_ready()
    talker = email_context(sender, to=receiver, **BATCH)
    assert talker.wait_for_readers("batch", 30)
    pub = emailmw.Publisher("/stream", context=talker, guarantee="memory")
    for i in range(40):
        pub.publish(f"m{i}")
    assert talker.flush(30)
    slow.messages(5, timeout=60)  # in the middle of the first batch
    slow.kill()
    taken = [m for m in slow.messages(0) if not m.get("redelivered")]
    second = Peer("sub", config, "/stream")
    peers.append(second)
    second.wait_ready()
    pub.publish("m40")  # a sentinel, in a batch of its own
    assert talker.flush(30)
    rest = second.messages(41 - len({m["seq"] for m in taken}), timeout=60)
    seqs = [m["seq"] for m in taken] + [m["seq"] for m in rest]
    assert sorted(set(seqs)) == list(range(41)), "lost"
    repeated = [m for m in rest if m["seq"] in {t["seq"] for t in taken}]
    assert all(m["redelivered"] for m in repeated)  # a repeat is flagged, never silent
    assert len(repeated) <= 1  # the parts settled before the kill do not come again
    assert len(_batches(mailserver, receiver)) >= 2


def test_each_part_is_verified_on_its_own(
    mailserver: MailServer, account: Callable[[], str], email_context: MakeContext,
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A batch whose second part was altered after signing: that part is refused (and
    kept, quarantined), the parts around it are delivered with their identity."""
    store = Keystore.create(tmp_path / "keystore")
    store.create_key("talker")
    store.create_key("listener")
    sender, receiver = account(), account()

    def security(identity: str) -> dict[str, Any]:
        return {"security": {"keystore": str(store.path), "identity": identity,
                             "verify": "enforce"}}  # fmt: skip

    listener = email_context(receiver, **security("listener"))
    sub = emailmw.Subscription("/signed", context=listener)
    listener.start_receiving()
    talker = email_context(sender, to=receiver, **security("talker"))
    recipients = talker.options.recipients
    raws = []
    for i in range(3):
        email = publish_email("/signed", f"m{i}", recipients=recipients, gid=emailmw.Gid(5),
                              sequence_number=i, timestamp_ns=time.time_ns())  # fmt: skip
        raws.append(build(talker.security.outgoing(email, sender)))
    raws[1] = raws[1].replace(b"m1", b"mX")
    batch = build_batch(raws, from_=sender, to=[receiver],
                        message_id=f"<b{time.time_ns()}@example.test>",
                        timestamp_ns=time.time_ns(), subjects=["/signed"])  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        inject(mailserver, receiver, batch)
        got = _receive(sub, 2)
        (reason,) = wait_for_quarantined(caplog, 1)
    assert [(body, info.identity) for body, info in got] == [("m0", "talker"), ("m2", "talker")]
    assert "signature" in reason
    more = deadline_loop(30)
    while more() and not _batches(mailserver, receiver, "Quarantine"):
        time.sleep(0.05)
    assert len(_batches(mailserver, receiver, "Quarantine")) == 1
