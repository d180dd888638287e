"""Who may say what (docs/security.md), against the real server: every attack is refused
in ``enforce`` (quarantined, never deleted, the reason logged), nothing legitimate is lost
and the receiver keeps running."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import imapclient
import pytest

import emailmw
from emailmw import Keystore, PermissionDeniedError
from emailmw._core.wire import build
from emailmw._security import sign
from emailmw.testing._modes import wait_for
from emailmw.testing.mailserver import MailServer
from tests.conftest import MakeContext

from ..helpers import deadline_loop
from .helpers import (
    TRANSPORTS,
    Peer,
    folder_subjects,
    inject,
    transport_extra,
    write_config,
)

PERMISSIONS = """\
identities:
  talker: {publish: [/chatter, /secret], call: [/add]}
  listener: {subscribe: [/chatter, /secret], serve: [/add]}
  robot: {publish: [/robot/**], subscribe: [/secret]}
  oldkey: {publish: [/chatter]}
  gone: {publish: [/chatter]}
"""


@pytest.fixture(scope="module")
def keystore(tmp_path_factory: pytest.TempPathFactory) -> Keystore:
    store = Keystore.create(tmp_path_factory.mktemp("sec") / "keystore")
    for name in ("talker", "listener", "robot", "gone"):
        store.create_key(name)
    store.create_key("oldkey", days=-1)  # expired yesterday
    (store.path / "permissions.yaml").write_text(PERMISSIONS)
    return store


@pytest.fixture(scope="module")
def outsider(tmp_path_factory: pytest.TempPathFactory) -> Keystore:
    store = Keystore.create(tmp_path_factory.mktemp("out") / "keystore")
    store.create_key("mallory")
    return store


def security(
    keystore: Keystore, identity: str, verify: str = "enforce", **more: Any
) -> dict[str, Any]:
    return {
        "security": {"keystore": str(keystore.path), "identity": identity, "verify": verify, **more}
    }


def raw_mail(subject: str, body: str, headers: dict[str, str], to: str) -> bytes:
    """An email as anyone can write it (what rmw_email or an attacker sends)."""
    lines = [
        "From: alice@example.test",
        f"To: {to}",
        "Cc: ",
        "Bcc: ",
        f"Subject: {subject}",
        f"Message-ID: <{time.time_ns()}@attacker.test>",
        "In-Reply-To: ",
        "References: ",
        *(f"{k}: {v}" for k, v in headers.items()),
        "",
        body,
        "",
    ]
    return "\r\n".join(lines).encode()


def wait_for_files(directory: Path, count: int, timeout: float = 30) -> list[Path]:
    more = deadline_loop(timeout)
    while more():
        found = sorted(p for sub in ("new", "cur") for p in (directory / sub).glob("*"))
        if len(found) >= count:
            return found
        time.sleep(0.02)
    raise AssertionError(f"{count} files did not reach {directory} in {timeout} s")


def quarantine_reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("quarantined")]


def wait_for_quarantined(
    caplog: pytest.LogCaptureFixture, count: int, timeout: float = 30
) -> list[str]:
    more = deadline_loop(timeout)
    while more() and len(quarantine_reasons(caplog)) < count:
        time.sleep(0.02)
    return quarantine_reasons(caplog)


def test_forged_publisher_gid_and_untrusted_or_unsigned_mail_are_quarantined(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    keystore: Keystore,
    outsider: Keystore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    inbox = account()
    listener = email_context(inbox, **security(keystore, "listener"))
    assert listener.options.quarantine == "Quarantine"
    sub = emailmw.Subscription("/chatter", context=listener)
    talker = email_context(account(), to=inbox, **security(keystore, "talker"))
    pub = emailmw.Publisher("/chatter", context=talker)
    with caplog.at_level(logging.INFO, logger="emailmw"):
        pub.publish("real 0")
        got = emailmw.wait_for_message_with_info(sub, 30)
        assert got is not None
        assert got[0] == "real 0"
        assert got[1].identity == "talker"
        forged_headers = {
            "Source-Timestamp": str(time.time_ns()),
            "Publisher-GID": str(pub.gid.value),  # the live publisher's
            "Publisher-Sequence-Number": "1",
        }
        inject(mailserver, inbox, raw_mail("/chatter", "forged, unsigned", forged_headers, inbox))
        signed_by_mallory = sign(
            emailmw.Email("/chatter", "forged, signed by mallory", "alice@example.test", inbox,
                          headers={**forged_headers, "Date": "Tue, 24 Nov 2026 10:00:00 GMT"},
                          message_id="<m1@attacker.test>"),
            outsider.identity("mallory"),
        )  # fmt: skip
        inject(mailserver, inbox, build(signed_by_mallory))
        pub.publish("real 1")
        got = emailmw.wait_for_message_with_info(sub, 30)
        assert got is not None
        assert (got[0], got[1].identity) == ("real 1", "talker")
        reasons = wait_for_quarantined(caplog, 2)
    assert sub.get_message() is None  # nothing forged was delivered
    assert any("unsigned" in r for r in reasons)
    assert any("untrusted" in r and "mallory" in r for r in reasons)
    listener.shutdown()
    assert sorted(folder_subjects(mailserver, inbox, "Quarantine")) == [b"Subject: /chatter"] * 2
    assert listener.security.counts["quarantined"] == 2


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_quarantine_that_fails_is_not_counted_and_is_done_once_the_folder_works(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    keystore: Keystore,
    caplog: pytest.LogCaptureFixture,
    transport: str,
) -> None:
    """The quarantine folder cannot be written: refused mail stays in the inbox, undelivered,
    and is not counted as quarantined (it was, and never tried again); once the folder
    works, it is moved there and counted, and the receiver went on all along."""
    inbox = account()
    listener = email_context(
        inbox, transport=transport, **transport_extra(transport), **security(keystore, "listener")
    )
    folder = mailserver.maildir(inbox) / ".Quarantine"
    _make_folder(mailserver, inbox, "Quarantine")
    modes = {p: p.stat().st_mode for p in (folder, *(folder / d for d in ("cur", "new", "tmp")))}
    for path in modes:
        path.chmod(0o555)  # the server's user may not write there
    try:
        sub = emailmw.Subscription("/chatter", context=listener)
        talker = email_context(account(), to=inbox, **security(keystore, "talker"))
        pub = emailmw.Publisher("/chatter", context=talker)
        with caplog.at_level(logging.INFO, logger="emailmw"):
            for i in range(2):
                unsigned = {"Source-Timestamp": str(time.time_ns()), "Publisher-GID": "7",
                            "Publisher-Sequence-Number": str(i)}  # fmt: skip
                inject(mailserver, inbox, raw_mail("/chatter", f"unsigned {i}", unsigned, inbox))
            pub.publish("real")
            assert emailmw.wait_for_message(sub, 30) == "real"  # the receiver goes on
            assert wait_for(lambda: listener.security.counts["unsigned"] == 2)
            assert wait_for(lambda: any("failed" in r.getMessage() for r in caplog.records))
        assert listener.security.counts["quarantined"] == 0
        assert folder_subjects(mailserver, inbox).count(b"Subject: /chatter") >= 2
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    # repaired: tried again (after a backoff of a second or two), moved and counted
    assert wait_for(lambda: listener.security.counts["quarantined"] == 2, 30)
    assert folder_subjects(mailserver, inbox, "Quarantine") == [b"Subject: /chatter"] * 2
    assert sub.get_message() is None


def _make_folder(server: MailServer, address: str, folder: str) -> None:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with imapclient.IMAPClient(server.host, port=server.imaps_port, ssl_context=context) as c:
        c.login(address, server.password)
        c.create_folder(folder)


def test_a_forged_response_to_a_pending_call_is_refused_and_the_real_answer_arrives(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    keystore: Keystore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client_box, server_box = account(), account()
    release = threading.Event()

    def add(request: str) -> str:
        assert release.wait(30)
        a, b = map(int, request.split())
        return str(a + b)

    server_ctx = email_context(server_box, to=client_box, **security(keystore, "listener"))
    emailmw.ServiceServer("/add", add, context=server_ctx)
    client_ctx = email_context(client_box, to=server_box, **security(keystore, "talker"))
    client = emailmw.ServiceClient("/add", context=client_ctx)
    answer: list[str] = []
    caller = threading.Thread(target=lambda: answer.append(client.call("2 3", 60)))
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        caller.start()
        # the attacker reads the request (an account holder of the shared server's mailbox)
        request = _read_request(mailserver, server_box)
        forged = (
            f"From: alice@example.test\r\nTo: {client_box}\r\nCc: \r\nBcc: \r\n"
            f"Subject: /add\r\nMessage-ID: <f{time.time_ns()}@attacker.test>\r\n"
            f"In-Reply-To: {request['message-id']}\r\nReferences: {request['message-id']}\r\n"
            f"Source-Timestamp: {time.time_ns()}\r\nClient-GID: {request['client-gid']}\r\n"
            f"Request-Sequence-Number: {request['request-sequence-number']}\r\n\r\n666\r\n"
        ).encode()
        inject(mailserver, client_box, forged)
        assert wait_for_quarantined(caplog, 1)
        release.set()
        caller.join(60)
    assert answer == ["5"]
    assert client.unexpected_responses == 0


def _read_request(server: MailServer, address: str) -> dict[str, str]:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    more = deadline_loop(30)
    with imapclient.IMAPClient(server.host, port=server.imaps_port, ssl_context=context) as c:
        c.login(address, server.password)
        c.select_folder("INBOX", readonly=True)
        while more():
            uids = c.search("ALL")
            if uids:
                raw = c.fetch(uids[:1], ["BODY.PEEK[HEADER]"])[uids[0]][b"BODY[HEADER]"]
                fields = {}
                for line in raw.decode().split("\r\n"):
                    name, _, value = line.partition(": ")
                    fields.setdefault(name.lower(), value.strip())
                return fields
            time.sleep(0.05)
    raise AssertionError("the request never arrived")


def test_a_body_tampered_in_the_mailbox_is_quarantined(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    keystore: Keystore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    inbox = account()
    listener = email_context(inbox, **security(keystore, "listener"))
    sub = emailmw.Subscription("/chatter", context=listener)  # not receiving yet
    talker = email_context(account(), to=inbox, **security(keystore, "talker"))
    pub = emailmw.Publisher("/chatter", context=talker)
    pub.publish("pay 10 euros")
    (stored,) = wait_for_files(mailserver.maildir(inbox), 1)
    stored.write_bytes(stored.read_bytes().replace(b"pay 10 euros", b"pay 99 euros"))
    pub.publish("after")
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        assert emailmw.wait_for_message(sub, 30) == "after"
        (reason,) = wait_for_quarantined(caplog, 1)
    assert "invalid" in reason
    assert "does not verify" in reason
    assert sub.get_message() is None


def test_unsigned_mail_as_from_rmw_email_in_each_mode(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    keystore: Keystore,
) -> None:
    for mode, delivered in (("off", True), ("permissive", True), ("enforce", False)):
        inbox = account()
        ctx = email_context(inbox, **security(keystore, "listener", mode))
        sub = emailmw.Subscription("/chatter", context=ctx)
        headers = {"Source-Timestamp": str(time.time_ns()), "Publisher-GID": "42"}
        inject(mailserver, inbox, raw_mail("/chatter", "from C++", headers, inbox))
        emailmw.Publisher("/chatter", context=email_context(
            account(), to=inbox, **security(keystore, "talker"))).publish("signed")  # fmt: skip
        got = {emailmw.wait_for_message(sub, 30) for _ in range(1 + delivered)}
        assert got == ({"from C++", "signed"} if delivered else {"signed"}), mode
        ctx.shutdown()
        quarantined = folder_subjects(mailserver, inbox, "Quarantine")
        assert quarantined == ([] if delivered else [b"Subject: /chatter"]), mode


def test_no_grant_expired_and_removed_keys_are_refused(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    keystore: Keystore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    inbox = account()
    listener = email_context(inbox, **security(keystore, "listener"))
    sub = emailmw.Subscription("/chatter", context=listener)
    with pytest.raises(PermissionDeniedError, match="'listener' may not publish '/chatter'"):
        emailmw.Publisher("/chatter", context=listener)
    no_rules = Path(keystore.path.parent / "allow-all.yaml")
    no_rules.write_text(  # the senders' own rules let them try anything
        "identities:\n"
        + "".join(f"  {n}: {{publish: ['/**']}}\n" for n in ("robot", "oldkey", "gone"))
    )

    def publisher(name: str) -> emailmw.Publisher:
        ctx = email_context(
            account(), to=inbox, **security(keystore, name, permissions=str(no_rules))
        )
        return emailmw.Publisher("/chatter", context=ctx)

    robot, old, gone = publisher("robot"), publisher("oldkey"), publisher("gone")
    talker = email_context(account(), to=inbox, **security(keystore, "talker"))
    real = emailmw.Publisher("/chatter", context=talker)
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        gone.publish("before removal")
        assert emailmw.wait_for_message(sub, 30) == "before removal"
        (keystore.path / "public" / "gone.json").unlink()
        robot.publish("no grant")
        old.publish("expired")
        gone.publish("after removal")
        real.publish("real")
        assert emailmw.wait_for_message(sub, 30) == "real"
        reasons = wait_for_quarantined(caplog, 3)
    assert sub.get_message() is None
    assert any("denied" in r and "robot" in r for r in reasons)
    assert any("untrusted" in r and "expired" in r for r in reasons)
    assert any("untrusted" in r and "'gone' is not trusted" in r for r in reasons)


def test_encrypted_topic_opens_for_its_recipient_only(
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    keystore: Keystore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    inbox, other = account(), account()
    listener = email_context(inbox, **security(keystore, "listener"))
    robot = email_context(other, **security(keystore, "robot", "permissive"))
    secret_for_listener = emailmw.Subscription("/secret", context=listener)
    secret_for_robot = emailmw.Subscription("/secret", context=robot)
    encrypting = security(keystore, "talker", encrypt={"/secret": ["listener"]})
    talker = email_context(account(), to=[inbox, other], **encrypting)
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        emailmw.Publisher("/secret", context=talker).publish("the plans")
        robot.start_receiving()
        assert emailmw.wait_for_message(secret_for_listener, 30) == "the plans"
        (reason,) = wait_for_quarantined(caplog, 1)
    assert "undecryptable" in reason
    assert "encrypted for listener" in reason
    assert secret_for_robot.get_message() is None
    (stored,) = wait_for_files(mailserver.maildir(inbox), 1)
    assert b"the plans" not in stored.read_bytes()


def test_a_replay_is_refused_also_after_the_receiver_was_killed(
    mailserver: MailServer,
    account: Callable[[], str],
    keystore: Keystore,
    tmp_path: Path,
    email_context: MakeContext,
) -> None:
    """The seen set is kept next to the state file: a receiver killed with SIGKILL and
    restarted inside the replay window still refuses a copy re-sent verbatim."""
    inbox = account()
    state = {"state-file": str(tmp_path / "state.json")}
    listening = mailserver.config(inbox, **security(keystore, "listener"), **state)
    config = write_config(tmp_path / "listener.yml", listening)
    talker = email_context(account(), to=inbox, **security(keystore, "talker"))
    pub = emailmw.Publisher("/chatter", context=talker)
    peer = Peer("sub", config, "/chatter")
    try:
        peer.wait_ready()
        pub.publish("once")
        (first,) = peer.messages(1)
        assert (first["body"], first["identity"]) == ("once", "talker")
        original = wait_for_files(mailserver.maildir(inbox), 1)[0].read_bytes()
        inject(mailserver, inbox, original)  # the same bytes, verbatim
        pub.publish("second")
        assert [m["body"] for m in peer.messages(2)] == ["once", "second"]
        peer.kill()
        peer = Peer("sub", config, "/chatter")
        peer.wait_ready()
        inject(mailserver, inbox, original)
        pub.publish("third")
        assert [m["body"] for m in peer.messages(1)] == ["third"]
        peer.kill()
        # quarantined, or left in place where a killed process had not moved it yet: never
        # deleted
        quarantined = folder_subjects(mailserver, inbox, "Quarantine")
        assert len(folder_subjects(mailserver, inbox)) + len(quarantined) == 5
    finally:
        peer.stop()


@pytest.mark.parametrize("batching", [False, True], ids=["alone", "batched"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_restarted_subscriber_takes_its_own_unfinished_mail_for_no_replay(
    mailserver: MailServer,
    account: Callable[[], str],
    keystore: Keystore,
    tmp_path: Path,
    email_context: MakeContext,
    peers: list[Peer],
    transport: str,
    batching: bool,
) -> None:
    """#62: a subscriber on a state file, signing in ``enforce``, SIGKILLed with messages
    verified (their Message-IDs in the replay guard's ``.seen`` file) and handed out but not
    taken: the restarted process gets them again and delivers them, for it handed them out
    itself and never settled them. Was: quarantined as ``replayed ... was accepted before``,
    lost though no application had them."""
    inbox, sender = account(), account()
    config = write_config(
        tmp_path / "listener.yml",
        mailserver.config(
            inbox, transport=transport, **transport_extra(transport),
            **security(keystore, "listener"), **{"state-file": str(tmp_path / "s.json")},
        ),
    )  # fmt: skip
    slow = Peer("sub", config, "/chatter", "--take-every", "0.2")
    peers.append(slow)
    slow.wait_ready()
    batch = {"batch": {"linger-ms": 200, "max-messages": 20}} if batching else {}
    talker = email_context(sender, to=inbox, **security(keystore, "talker"), **batch)
    if batching:
        assert talker.wait_for_readers("batch", 30)  # (the listener said it reads batches)
    pub = emailmw.Publisher("/chatter", context=talker)
    for i in range(30):
        pub.publish(f"m{i}")
    slow.messages(3, timeout=60)  # one taken every 0.2 s: the rest wait in its queue
    slow.kill()
    taken = {m["body"] for m in slow.messages(0)}
    assert len(taken) < 30, "all taken before the kill: nothing to show"
    second = Peer("sub", config, "/chatter")
    peers.append(second)
    second.wait_ready()
    pub.publish("m30")  # a sentinel: what comes again comes before it
    more = deadline_loop(90)
    while more() and "m30" not in {m["body"] for m in second.messages(0)}:
        time.sleep(0.1)
    sent = {f"m{i}" for i in range(31)}
    got = taken | {m["body"] for m in second.messages(0)}
    assert got == sent, f"lost: {sorted(sent - got)}"
    assert all(m["identity"] == "talker" for m in second.messages(0))
    assert folder_subjects(mailserver, inbox, "Quarantine") == []
