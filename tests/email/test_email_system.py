"""emailmw over a real Postfix + Dovecot: several processes and accounts, no mocks."""

from __future__ import annotations

import hashlib
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import emailmw
from emailmw._transport.native import NativeReceiver
from emailmw.testing.mailserver import MailServer
from tests.conftest import MakeContext

from .helpers import TRANSPORTS, Peer, folder_subjects, inject, transport_extra, write_config


def test_pub_sub_two_subscriber_processes_with_cc_and_bcc(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    peers: list[Peer],
    tmp_path: Path,
) -> None:
    publisher, to, cc, bcc = account(), account(), account(), account()
    for address in (cc, bcc):
        peer = Peer(
            "sub", write_config(tmp_path / f"{address}.yml", mailserver.config(address)), "/chatter"
        )
        peers.append(peer)
    for peer in peers:
        peer.wait_ready()
    ctx = email_context(publisher, to=to, recipients={"to": to, "cc": cc, "bcc": bcc})
    pub = emailmw.Publisher("/chatter", context=ctx)
    for i in range(5):
        pub.publish(f"data: {i}")
    for peer in peers:
        got = peer.messages(5)
        assert sorted(m["body"] for m in got) == [f"data: {i}" for i in range(5)]
        assert {m["gid"] for m in got} == {pub.gid.value}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_service_call_across_processes(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    peers: list[Peer],
    tmp_path: Path,
    transport: str,
) -> None:
    client_address, server_address = account(), account()
    server = Peer(
        "server",
        write_config(
            tmp_path / "server.yml",
            mailserver.config(server_address, transport=transport, **transport_extra(transport)),
        ),
        "/add_two_ints",
    )
    peers.append(server)
    server.wait_ready()
    ctx = email_context(
        client_address, to=server_address, transport=transport, **transport_extra(transport)
    )
    client = emailmw.ServiceClient("/add_two_ints", context=ctx)
    assert [client.call(f"{i} {i + 1}", timeout=30) for i in range(3)] == ["1", "3", "5"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_non_ascii_topic_and_one_mib_body(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    peers: list[Peer],
    tmp_path: Path,
    transport: str,
) -> None:
    sender, receiver = account(), account()
    topic = "/capteurs/température/北京 🚀"
    peer = Peer(
        "sub",
        write_config(
            tmp_path / "sub.yml",
            mailserver.config(receiver, transport=transport, **transport_extra(transport)),
        ),
        topic,
    )
    peers.append(peer)
    peer.wait_ready()
    pub = emailmw.Publisher(topic, context=email_context(sender, to=receiver, transport=transport))
    big = "".join(f"line {i}: {'é' * (i % 50)} ✓\n" for i in range(20_000))[: 1024 * 1024]
    pub.publish("small: ünïcode")
    pub.publish(big)
    got = peer.messages(2)
    by_length = {m["length"]: m for m in got}
    assert by_length[len("small: ünïcode")]["body"] == "small: ünïcode"
    assert by_length[len(big)]["sha256"] == hashlib.sha256(big.encode()).hexdigest()


def test_burst_of_200_none_lost_none_duplicated_order_restored(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    peers: list[Peer],
    tmp_path: Path,
) -> None:
    sender, receiver = account(), account()
    peer = Peer("sub", write_config(tmp_path / "sub.yml", mailserver.config(receiver)), "/burst")
    peers.append(peer)
    peer.wait_ready()
    ctx = email_context(sender, to=receiver)
    pub = emailmw.Publisher("/burst", context=ctx)
    for i in range(200):
        pub.publish(f"n: {i}")
    assert ctx.flush(60)
    got = peer.messages(200, timeout=120)
    assert len(got) == 200
    seqs = [m["seq"] for m in got]
    assert sorted(seqs) == list(range(200)), "lost or duplicated"
    # Publisher-Sequence-Number restores the publisher's order, whatever the arrival order
    restored = [m["body"] for m in sorted(got, key=lambda m: m["seq"])]
    assert restored == [f"n: {i}" for i in range(200)]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_killed_subscriber_restarts_from_its_state_file(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    peers: list[Peer],
    tmp_path: Path,
    transport: str,
) -> None:
    sender, receiver = account(), account()
    config = write_config(
        tmp_path / "sub.yml",
        mailserver.config(
            receiver,
            transport=transport,
            **{"state-file": str(tmp_path / "state.json")},
            **transport_extra(transport),
        ),
    )
    first = Peer("sub", config, "/stream")
    peers.append(first)
    first.wait_ready()
    ctx = email_context(sender, to=receiver)
    pub = emailmw.Publisher("/stream", context=ctx)
    for i in range(10):
        pub.publish(f"m{i}")
    assert sorted(m["seq"] for m in first.messages(10)) == list(range(10))
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(10)
    # the stream goes on while the subscriber is dead
    for i in range(10, 20):
        pub.publish(f"m{i}")
    assert ctx.flush(30)

    second = Peer("sub", config, "/stream")
    peers.append(second)
    second.wait_ready()
    got = second.messages(10)
    pub.publish("m20")  # a sentinel: anything re-delivered would have come before it
    got = second.messages(11)
    assert sorted(m["seq"] for m in got) == list(range(10, 21))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_wrong_password_is_an_authentication_error_naming_the_server(
    mailserver: MailServer, account: Callable[[], str], transport: str
) -> None:
    config = mailserver.config(account(), transport=transport)
    config["user"]["password"] = "not-the-password"
    with pytest.raises(emailmw.AuthenticationError) as info:
        emailmw.Context({"email": config})
    assert f"127.0.0.1:{mailserver.smtps_port}" in str(info.value) or (
        f"127.0.0.1:{mailserver.imaps_port}" in str(info.value)
    )
    assert "not-the-password" not in str(info.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("tls", [True, False], ids=["implicit-tls", "starttls"])
def test_untrusted_certificate_is_a_tls_error_unless_the_ca_is_configured(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    transport: str,
    tls: bool,
) -> None:
    address = account()
    config = mailserver.config(address, transport=transport, tls=tls)
    del config["tls"]
    with pytest.raises(emailmw.TLSError):
        emailmw.Context({"email": config})
    # the same account with the CA configured works, over the same ports
    ctx = email_context(address, transport=transport, tls=tls, **transport_extra(transport))
    sub = emailmw.Subscription("t", context=ctx)
    emailmw.Publisher("t", context=ctx).publish("over verified TLS")
    assert emailmw.wait_for_message(sub, 30) == "over verified TLS"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_unreachable_server_is_a_connect_error_within_the_timeout(
    mailserver: MailServer, account: Callable[[], str], transport: str
) -> None:
    # a server that accepts connections and never says anything
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()  # nothing listens there any more
    try:
        for url_port in (port, refused_port):
            config = mailserver.config(account(), transport=transport, timeout=1.5)
            config["user"]["url-smtp"] = f"smtps://127.0.0.1:{url_port}"
            config["user"]["url-imap"] = f"imaps://127.0.0.1:{url_port}"
            start = time.monotonic()
            with pytest.raises((emailmw.ConnectError, emailmw.TLSError)) as info:
                emailmw.Context({"email": config})
            assert time.monotonic() - start < 1.5 + 5, "the configured timeout was not honoured"
            assert f"127.0.0.1:{url_port}" in str(info.value)
    finally:
        silent.close()


FOREIGN = [
    b"From: person@example.test\r\nSubject: Re: your robot\r\nMIME-Version: 1.0\r\n"
    b"Content-Type: multipart/alternative; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n"
    b"\r\nthanks\r\n--b\r\nContent-Type: text/html\r\n\r\n<p>thanks</p>\r\n--b--\r\n",
    b"From: person@example.test\r\nSubject: newsletter\r\nContent-Type: text/html\r\n\r\n"
    b"<h1>hello</h1>\r\n",
    b"From: person@example.test\r\nSubject: lunch?\r\n\r\nsee you at noon\r\n",
]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_foreign_mail_is_ignored_and_left_in_place(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    transport: str,
) -> None:
    address = account()
    ctx = email_context(
        address, transport=transport, **{"on-receive": "delete"}, **transport_extra(transport)
    )
    sub = emailmw.Subscription("ours", context=ctx)
    pub = emailmw.Publisher("ours", context=ctx)
    for raw in FOREIGN:
        inject(mailserver, address, raw)
    pub.publish("first")
    assert emailmw.wait_for_message(sub, 30) == "first"
    pub.publish("second")  # the polling thread survived the foreign mail
    assert emailmw.wait_for_message(sub, 30) == "second"
    subjects = b"".join(folder_subjects(mailserver, address))
    for raw in FOREIGN:
        assert raw.split(b"Subject: ")[1].split(b"\r\n")[0] in subjects
    assert b"ours" not in subjects  # emailmw's own mail was deleted as configured


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_on_receive_move_files_emailmw_mail_away(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    transport: str,
) -> None:
    address = account()
    ctx = email_context(
        address,
        transport=transport,
        **{"on-receive": "move:Processed"},
        **transport_extra(transport),
    )
    sub = emailmw.Subscription("filed", context=ctx)
    emailmw.Publisher("filed", context=ctx).publish("x")
    assert emailmw.wait_for_message(sub, 30) == "x"
    ctx.shutdown()
    assert folder_subjects(mailserver, address) == []
    assert len(folder_subjects(mailserver, address, "Processed")) == 1


def test_idle_receiver_wakes_for_new_mail(
    account: Callable[[], str], email_context: MakeContext
) -> None:
    """After the quiet period the native receiver waits in IDLE; mail still arrives."""
    address = account()
    ctx = email_context(address, poll={"interval": 0.005, "idle-after": 0.2})
    sub = emailmw.Subscription("late", context=ctx)
    receiver = ctx.receiver
    assert isinstance(receiver, NativeReceiver)
    ctx.start_receiving()  # nothing waits on the subscription yet
    idle = threading.Event()
    deadline = time.monotonic() + 30
    while receiver.mode != "idle" and time.monotonic() < deadline:
        idle.wait(0.05)  # a deadline loop on the condition, not a fixed sleep
    assert receiver.mode == "idle"
    emailmw.Publisher("late", context=ctx).publish("woke up")
    assert emailmw.wait_for_message(sub, 30) == "woke up"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_refused_recipient_is_raised_or_reported_by_flush(
    mailserver: MailServer, account: Callable[[], str], transport: str
) -> None:
    """With the server guarantee (the default) send() raises the refusal; with memory it
    returns at once and the refusal, which nobody else was told of, comes back via flush()."""
    nobody = "nobody-here@example.test"
    sender, receiver = emailmw.open_transport(
        {"email": mailserver.config(account(), transport=transport)}
    )
    receiver.close()
    with sender:
        with pytest.raises(emailmw.SendError, match=r"nobody-here@example\.test") as info:
            sender.send(emailmw.Email("t", "b", sender.address, nobody))
        assert not info.value.temporary  # 550: not retried
        sender.send(emailmw.Email("t", "b", sender.address, nobody), guarantee="memory")
        with pytest.raises(emailmw.SendError, match=r"nobody-here@example\.test"):
            sender.flush(30)
        assert sender.flush(30)  # reported once; nothing else pending


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_transient_local_late_joiner_reads_the_mailbox(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    transport: str,
) -> None:
    """The mailbox is the durable store: the publisher may be gone when the subscriber
    joins, and the subscriber's context started after the messages arrived."""
    listener = account()
    pub_ctx = email_context(account(), to=listener)
    pub = emailmw.Node("talker", context=pub_ctx).create_publisher(
        emailmw.std_msgs.msg.Int64, "/latched"
    )
    for i in range(4):
        pub.publish(emailmw.std_msgs.msg.Int64(i))
    assert pub_ctx.flush(30)
    pub_ctx.shutdown()
    sender, receiver = emailmw.open_transport({"email": mailserver.config(listener)})
    sender.close()
    deadline = time.monotonic() + 30
    while len(receiver.history("/latched", 10)) < 4 and time.monotonic() < deadline:
        threading.Event().wait(0.1)  # delivery through Postfix: a deadline loop on it
    receiver.close()

    ctx = email_context(listener, transport=transport, **transport_extra(transport))
    node = emailmw.Node("late", context=ctx)
    got: list[int] = []
    node.create_subscription(
        emailmw.std_msgs.msg.Int64,
        "/latched",
        lambda m: got.append(m.data),
        emailmw.QoSProfile(depth=2, durability=emailmw.DurabilityPolicy.TRANSIENT_LOCAL),
    )
    executor = emailmw.SingleThreadedExecutor()
    executor.add_node(node)
    end = time.monotonic() + 30
    while got != [2, 3] and time.monotonic() < end:
        executor.spin_once(end - time.monotonic())
    assert got == [2, 3]
