"""Trust on every path (docs/security.md), against the real server, each test written as
the attack: routed Stem/YMP/floctrl mail, acknowledgements, relays through a gateway,
replays to another account, a receiver down for longer than the replay window, responses
from the wrong server and a transplanted ciphertext. Receivers run in ``enforce``; every
attack is quarantined with its reason (never deleted), legitimate traffic arrives and the
receiver goes on, on both transports."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import emailmw
from emailmw import Email, Keystore, floctrl, stem, ymp
from emailmw.testing._modes import wait_for
from emailmw.testing.mailserver import MailServer
from tests.conftest import MakeContext

from .helpers import TRANSPORTS, Peer, folder_subjects, inject, transport_extra, write_config
from .test_security_server import wait_for_files, wait_for_quarantined

PERMISSIONS = """\
identities:
  station:
    publish: [/chatter]
    call: [/add]
    stem: {send: ["/robot/arm/cmd/status", "/far/arm/cmd/status"], as: ["/base/*", "/lab/*"]}
    ymp: {send: ["/robot/motion/arm/*"], as: [base]}
    floctrl: {as: ["/plant/line1"], to: ["/plant/*"], topics: [status]}
  arm:
    subscribe: [/chatter, /secret]
    serve: [/add]
    stem: {as: ["/robot/arm", "/far/arm"]}
    ymp: {as: [robot]}
  talker: {publish: [/chatter, /secret], call: [/add]}
  robot: {publish: [/secret], serve: [/add]}
  mallory: {}
  gw: {relay: ["/stem/**", "/ymp/**"]}
  rogue: {relay: ["/stem/**", "/ymp/**"]}
"""
ALLOW_ALL = """\
identities:
  mallory:
    publish: ["/**"]
    subscribe: ["/**"]
    serve: ["/**"]
    stem: {send: ["/**"], as: ["/**"]}
    ymp: {send: ["/**"], as: ["*"]}
    floctrl: {as: ["/**"], to: ["/**"], topics: ["**"]}
    relay: ["/**"]
  robot: {publish: ["/**"], serve: ["/**"]}
"""


@pytest.fixture(scope="module")
def keystore(tmp_path_factory: pytest.TempPathFactory) -> Keystore:
    store = Keystore.create(tmp_path_factory.mktemp("paths") / "keystore")
    for name in ("station", "arm", "talker", "robot", "mallory", "gw", "rogue"):
        store.create_key(name)
    (store.path / "permissions.yaml").write_text(PERMISSIONS)
    (store.path.parent / "allow-all.yaml").write_text(ALLOW_ALL)
    return store


def secure(keystore: Keystore, identity: str, **more: Any) -> dict[str, Any]:
    """An identity's security section; mallory and robot believe they may do anything
    (their own permissions file says so): the receiver's decides."""
    if identity in ("mallory", "robot") and "permissions" not in more:
        more["permissions"] = str(keystore.path.parent / "allow-all.yaml")
    return {"security": {"keystore": str(keystore.path), "identity": identity,
                         "verify": "enforce", **more}}  # fmt: skip


def bound(keystore: Keystore, tmp_path: Path, **accounts: list[str]) -> str:
    """A permissions file: :data:`PERMISSIONS` with each named identity bound to its
    ``accounts`` (a relay's copy counts only when the hop before it sent the message to one
    of them)."""
    document = yaml.safe_load(PERMISSIONS)
    for identity, addresses in accounts.items():
        document["identities"][identity]["accounts"] = addresses
    path = tmp_path / "bound-permissions.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def hub(hub: str, routes: dict[str, str]) -> dict[str, Any]:
    return {"routing": {"hub": hub, "routes": routes}}


Made = Callable[..., emailmw.Context]


@pytest.fixture
def made(email_context: MakeContext, keystore: Keystore) -> Made:
    def make(address: str, identity: str, transport: str = "native", **extra: Any) -> Any:
        more = {k: extra.pop(k) for k in ("encrypt", "permissions") if k in extra}
        return email_context(address, transport=transport, **transport_extra(transport),
                             **secure(keystore, identity, **more), **extra)  # fmt: skip

    return make


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stem_commands_and_responses_need_their_grants(
    account: Callable[[], str], made: Made, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """mallory, trusted but granted nothing, cannot make a cell reboot nor answer a
    pending request in the cell's place; the station, granted status, gets its answer."""
    robot_box, base_box, evil_box = account(), account(), account()
    robot = made(robot_box, "arm", transport, **hub("robot", {"base": base_box}))
    base = made(base_box, "station", transport, **hub("base", {"robot": robot_box}))
    evil = made(evil_box, "mallory", **hub("base", {"robot": robot_box}))
    ran: list[str] = []
    release = threading.Event()

    class Arm(stem.Cell):
        def status_cmd(self, msg: stem.StemMessage) -> str:
            ran.append(f"status by {msg.info.identity if msg.info else None}")
            assert release.wait(30)
            return "fine"

        def reboot_cmd(self, msg: stem.StemMessage) -> str:
            ran.append("reboot")
            return "rebooting"

    Arm("arm", context=robot)
    station = stem.Cell("station", context=base)
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        stem.Cell("station", context=evil).send("robot:arm", type="cmd", cmd="reboot")
        asked = station.send("robot:arm", type="cmd", cmd="status")  # its msg_id, to forge
        future = station._pending.add(asked.msg_id, None)
        # mallory answers in the arm's place (she read the msg_id off the wire)
        as_arm = made(account(), "mallory", **hub("robot", {"base": base_box}))
        stem.Cell("arm", context=as_arm).send(
            "base:station", type="response", data="forged", reply_id=asked.msg_id
        )
        reasons = wait_for_quarantined(caplog, 2)
        release.set()
        assert future.result(30) == "fine"
    assert any("cmd reboot" in r and "denied" in r and "'mallory'" in r for r in reasons)
    assert any("response" in r and "'mallory' has no grant to stem.as '/robot/arm'" in r
               for r in reasons)  # fmt: skip
    assert ran == ["status by station"]
    with pytest.raises(emailmw.PermissionDeniedError, match=r"identities.station.stem.send"):
        station.send("robot:arm", type="cmd", cmd="reboot")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_ymp_and_floctrl_mail_needs_its_grants(
    account: Callable[[], str], made: Made, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """mallory sends as host base (From set to base's account, which a header cannot
    prove) and injects a floctrl message: both quarantined; the station's go through."""
    robot_box, base_box = account(), account()
    robot = made(robot_box, "arm", transport, **hub("robot", {"base": base_box}))
    base = made(base_box, "station", transport, **hub("base", {"robot": robot_box}))
    host = ymp.YmpHost(context=robot)
    calls: list[str] = []
    host.add_service("motion", "arm", {"move": lambda r: calls.append("move") or {"ok": 1}})
    got: list[floctrl.Message] = []
    floctrl.Node("plant", "line2", context=robot).subscribe_to("status", got.append)
    evil = made(account(), "mallory", **{"from": base_box}, **hub("base", {"robot": robot_box}))
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        ymp.YmpHost(context=evil).request("robot", "motion", "arm", "move", {})
        node = floctrl.Node("plant", "line1", supernode_hub="robot", context=evil)
        node.publish(floctrl.Message(1, "/plant", "status", "forged"))
        reasons = wait_for_quarantined(caplog, 2)
        answer = ymp.YmpHost(context=base).request("robot", "motion", "arm", "move", {})
        assert answer.result(30).payload == {"ok": 1}
    assert calls == ["move"]
    assert got == []
    assert any("ymp.as 'base'" in r and "mallory" in r for r in reasons), reasons
    assert any("floctrl.as '/plant/line1'" in r and "mallory" in r for r in reasons), reasons


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_forged_acknowledgement_is_not_counted(
    account: Callable[[], str], made: Made, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    talker_box, arm_box = account(), account()
    talker = made(talker_box, "talker", transport, to=arm_box)
    pub = emailmw.Publisher("/chatter", context=talker)
    arm = made(arm_box, "arm")
    sub = emailmw.Subscription("/chatter", context=arm)  # not receiving yet
    evil = made(account(), "mallory", to=talker_box)
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        future = pub.publish("hello", ack=True)
        assert future is not None
        forged = Email("/chatter", "", to=(talker_box,), headers={
            "Source-Timestamp": str(time.time_ns()), "Ack-Publisher-GID": str(pub.gid.value),
            "Ack-Sequence-Number": "0", "Ack-Subscriber": "arm", "Delivery-Count": "1",
        }, in_reply_to="<x@y>")  # fmt: skip
        evil.sender.send(forged)
        (reason,) = wait_for_quarantined(caplog, 1)
        assert not future.done()
        assert emailmw.wait_for_message(sub, 30) == "hello"
        ack = future.result(30)
    assert "denied" in reason
    assert "'mallory' has no grant to subscribe '/chatter'" in reason
    assert (ack.subscriber, ack.identity) == ("arm", "arm")
    assert [a.subscriber for a in pub.acks(0)] == ["arm"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_relay_keeps_the_originators_signature_and_cannot_speak_for_others(
    mailserver: MailServer,
    second_mailserver: MailServer,
    made: Made,
    keystore: Keystore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    transport: str,
) -> None:
    """Through a gateway (identity gw, granted relaying alone) the far cell sees the station as
    originator and gw as the hop; mallory, an account holder on the first server, cannot
    speak as the station through it."""
    from .test_routing_servers import gateway_context

    a, b = mailserver, second_mailserver
    la, ga, ea = a.fresh_account(), a.fresh_account(), a.fresh_account()
    fb, gb = b.fresh_account(), b.fresh_account()
    permissions = bound(keystore, tmp_path, gw=[ga, gb])
    lab = made(la, "station", permissions=permissions, **hub("lab", {"far": ga}))
    far = emailmw.Context({"email": b.config(fb, transport=transport,
                                             **transport_extra(transport),
                                             **secure(keystore, "arm", permissions=permissions),
                                             **hub("far", {"lab": gb}))})  # fmt: skip
    evil = made(ea, "mallory", **hub("lab", {"far": ga}))
    seen: list[tuple[Any, ...]] = []

    class Arm(stem.Cell):
        def status_cmd(self, msg: stem.StemMessage) -> str:
            assert msg.info is not None
            seen.append((str(msg.from_), msg.info.identity, msg.info.via))
            return "fine"

    Arm("arm", context=far)
    gateway_security = secure(keystore, "gw", permissions=permissions)

    def relay(server: MailServer, address: str, name: str) -> emailmw.Context:
        config = server.config(address, routing={"hub": name}, **gateway_security)
        return emailmw.Context({"email": config})

    assert gateway_context  # (the plain gateway of the routing tests, here with identities)
    with (
        caplog.at_level(logging.WARNING, logger="emailmw"),
        emailmw.Gateway(
            {"a": relay(a, ga, "gwa"), "b": relay(b, gb, "gwb")},
            {"lab": (la, "a"), "far": (fb, "b")},
        ) as gateway,  # fmt: skip
    ):
        gateway.start()
        station = stem.Cell("station", context=lab)
        assert station.request("far:arm", "status").result(30) == "fine"
        stem.Cell("station", context=evil).send("far:arm", type="cmd", cmd="status")
        (reason,) = wait_for_quarantined(caplog, 1)
        assert station.request("far:arm", "status").result(30) == "fine"
    far.shutdown()
    assert seen == [("lab:station", "station", ("gw",))] * 2
    assert "denied" in reason
    assert "'mallory' has no grant to stem.as '/lab/station'" in reason


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_relayed_command_re_targeted_to_another_account_is_refused(
    mailserver: MailServer,
    second_mailserver: MailServer,
    third_mailserver: MailServer,
    keystore: Keystore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    transport: str,
) -> None:
    """Three servers, two gateways (identity gw, granted relaying, bound to the gateways'
    accounts): the station's command goes a -> b -> c. Two identities take the stored
    relayed copy, name themselves in Route-Via and Route-Custody as a relay does, re-sign
    it and send it to another account on c that also hosts hub ``far``: mallory (a trusted
    key, no grants: her relay hop has no grant) and rogue (granted relaying, bound to an
    account of its own: the last gateway never sent the command there). Both are refused
    there, the command runs once, and that receiver goes on with legitimate mail."""
    from emailmw._core.addressing import Envelope
    from emailmw._core.protocol import routed_email
    from emailmw._core.wire import build, parse

    a, b, c = mailserver, second_mailserver, third_mailserver
    la, ga, gb1, gb2, gc = (a.fresh_account(), a.fresh_account(), b.fresh_account(),
                            b.fresh_account(), c.fresh_account())  # fmt: skip
    fc, other, direct = c.fresh_account(), c.fresh_account(), c.fresh_account()  # hosts of far
    rogue_box = c.fresh_account()
    contexts: list[emailmw.Context] = []
    permissions = bound(keystore, tmp_path, gw=[ga, gb1, gb2, gc], rogue=[rogue_box])

    def context(server: MailServer, address: str, identity: str, **more: Any) -> Any:
        mine = {} if identity == "mallory" else {"permissions": permissions}
        config = server.config(address, **secure(keystore, identity, **mine), **more)
        contexts.append(emailmw.Context({"email": config}))
        return contexts[-1]

    seen: list[tuple[str, Any, Any]] = []

    class Arm(stem.Cell):
        def status_cmd(self, msg: stem.StemMessage) -> str:
            assert msg.info is not None
            seen.append((self.context.address, msg.info.identity, msg.info.via))
            return "fine"

    Arm("arm", context=context(c, fc, "arm", **hub("far", {"lab": gc})))
    target = context(c, other, "arm", transport=transport, **transport_extra(transport),
                     **hub("far", {"lab": direct}))  # fmt: skip
    Arm("arm", context=target)
    try:
        with (
            caplog.at_level(logging.WARNING, logger="emailmw"),
            emailmw.Gateway({"a": context(a, ga, "gw", routing={"hub": "gwa"}),
                             "b": context(b, gb1, "gw", routing={"hub": "gwb1"})},
                            {"lab": (la, "a"), "far": (gb2, "b")}) as gw1,
            emailmw.Gateway({"b": context(b, gb2, "gw", routing={"hub": "gwb2"}),
                             "c": context(c, gc, "gw", routing={"hub": "gwc"})},
                            {"lab": (gb1, "b"), "far": (fc, "c")}) as gw2,
        ):  # fmt: skip
            gw1.start()
            gw2.start()
            station = stem.Cell("station", context=context(a, la, "station",
                                                           **hub("lab", {"far": ga})))  # fmt: skip
            assert station.request("far:arm", "status").result(60) == "fine"
            assert seen == [(fc, "station", ("gw", "gw"))]
            command = next(parse(_verbatim(p)) for p in wait_for_files(c.maildir(fc), 1)
                           if b"Route-Hops: 2" in p.read_bytes())  # fmt: skip
            # each: one hop more, itself in Route-Via, re-signed for the other account
            route = emailmw._core.protocol.classify(command, 0)
            envelope: Envelope = route.envelope.forwarded()  # type: ignore[union-attr]
            copy = routed_email(envelope, command.subject, command.body, to=other,
                                from_=c.address("alice"),
                                timestamp_ns=route.info.source_timestamp)  # type: ignore[union-attr]  # fmt: skip
            kept = ("emailmw-origin", "route-via", "route-custody")
            custody = [(k, v) for k, v in command.headers.items() if k.lower() in kept]
            copy = copy.replace(headers=[*copy.headers.items(), *custody])
            evil = context(c, c.fresh_account(), "mallory")
            inject(c, other, build(evil.security.outgoing(copy, c.address("alice"))))
            (reason,) = wait_for_quarantined(caplog, 1)
            assert "denied" in reason
            assert "relay 'mallory' (Route-Via) has no grant to relay '/stem/far'" in reason
            rogue = context(c, rogue_box, "rogue")
            inject(c, other, build(rogue.security.outgoing(copy, rogue_box)))
            reasons = wait_for_quarantined(caplog, 2)
            assert len(reasons) == 2, reasons
            assert "denied" in reasons[1]
            assert "relay 'rogue' was not sent this message: 'gw' sent it to none" in reasons[1]
            # the receiver goes on: a command sent to it straight is run
            straight = stem.Cell("station", context=context(
                c, direct, "station", **hub("lab", {"far": other})))  # fmt: skip
            assert straight.request("far:arm", "status").result(60) == "fine"
    finally:
        for made_context in contexts:
            made_context.shutdown()
    assert seen[1:] == [(other, "station", ())]
    assert folder_subjects(c, other, "Quarantine") != []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_ymp_through_a_gateway_needs_its_originators_signature(
    mailserver: MailServer,
    second_mailserver: MailServer,
    keystore: Keystore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    transport: str,
) -> None:
    """Behind a gateway, a host's connection check sees the gateway's account, so only a
    signature proves who wrote a YMP message: an account holder on the first server who
    claims to be host ``base`` (unsigned, relayed by a gateway that checks nothing itself)
    and mallory (signed, no ``ymp.as base``) are both refused at the host in ``enforce``;
    the station's request, signed as base, is answered."""
    from .test_routing_servers import routed_raw

    a, b = mailserver, second_mailserver
    la, ga, rb, gb = a.fresh_account(), a.fresh_account(), b.fresh_account(), b.fresh_account()
    contexts: list[emailmw.Context] = []
    permissions = bound(keystore, tmp_path, gw=[ga, gb])

    def context(server: MailServer, address: str, identity: str, **more: Any) -> Any:
        security = secure(keystore, identity, **(
            {} if identity == "mallory" else {"permissions": permissions}))  # fmt: skip
        security["security"]["verify"] = more.pop("verify", "enforce")
        contexts.append(emailmw.Context({"email": server.config(address, **security, **more)}))
        return contexts[-1]

    robot = context(b, rb, "arm", transport=transport, **transport_extra(transport),
                    **hub("robot", {"base": gb}))  # fmt: skip
    calls: list[str] = []
    host = ymp.YmpHost(context=robot)
    host.add_service("motion", "arm", {"move": lambda r: calls.append("move") or {"ok": 1}})
    request = {"sender": {"host": "base", "protocol": "p", "service": "s"}, "id": "spoof",
               "host": "robot", "protocol": "motion", "service": "arm", "action": "move",
               "payload": {}}  # fmt: skip
    envelope = {"Route-To": "robot:ymp:", "Route-From": "base:ymp:", "Route-Face": "ymp"}
    try:
        with (
            caplog.at_level(logging.WARNING, logger="emailmw"),
            emailmw.Gateway({"a": context(a, ga, "gw", verify="off", routing={"hub": "gwa"}),
                             "b": context(b, gb, "gw", verify="off", routing={"hub": "gwb"})},
                            {"base": (la, "a"), "robot": (rb, "b")}) as gateway,
        ):  # fmt: skip
            gateway.start()
            inject(a, ga, routed_raw(ga, envelope, json.dumps(request), "spoofed"))
            evil = context(a, a.fresh_account(), "mallory", **hub("base", {"robot": ga}))
            ymp.YmpHost(context=evil).request("robot", "motion", "arm", "move", {})
            reasons = wait_for_quarantined(caplog, 2)
            base = context(a, la, "station", **hub("base", {"robot": ga}))
            answer = ymp.YmpHost(context=base).request("robot", "motion", "arm", "move", {})
            assert answer.result(60).payload == {"ok": 1}
    finally:
        for made_context in contexts:
            made_context.shutdown()
    assert calls == ["move"]
    assert any("relayed without its originator's signature" in r for r in reasons), reasons
    assert any("'mallory' has no grant to ymp.as 'base'" in r for r in reasons), reasons


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_part_sent_first_by_another_grant_holder_takes_no_slot(
    mailserver: MailServer,
    account: Callable[[], str],
    made: Made,
    caplog: pytest.LogCaptureFixture,
    transport: str,
) -> None:
    """robot may publish /secret too. Having seen part 1 of talker's split message, it
    sends its own part 2 first, with the real part 2's Message-ID and Part-Of: the part
    counts only for robot's message (never complete: given up at part-timeout, and
    quarantined as a part of a message another signer sent whole), the real part 2 is no
    replay, and talker's message arrives whole; part IDs are random."""
    from emailmw._core.packing import split_email
    from emailmw._core.protocol import Recipients, publish_email
    from emailmw._core.types import Gid
    from emailmw._core.wire import build, new_message_id

    inbox = account()
    listener = made(inbox, "arm", transport, **{"part-timeout": 5})
    sub = emailmw.Subscription("/secret", context=listener)
    talker, robot = made(account(), "talker", to=inbox), made(account(), "robot", to=inbox)
    body = "".join(f"line {i:05d} of talker's message\n" for i in range(300))
    recipients = Recipients(talker.address, (inbox,))
    whole = publish_email("/secret", body, recipients=recipients, gid=Gid.new(),
                          sequence_number=0, timestamp_ns=time.time_ns())  # fmt: skip
    whole = whole.with_message_id(new_message_id(talker.address))
    parts = [talker.security.outgoing(p, talker.address) for p in split_email(whole, 2048)]
    assert len(parts) >= 3
    assert not any(".part" in str(p.message_id) for p in parts)  # (were <ID.partN@...>)
    assert len({p.message_id for p in parts}) == len(parts)
    forged = parts[1].replace(body="robot's own part 2\n" * 100, from_=robot.address)
    unsigned = [(k, v) for k, v in forged.headers.items()
                if k.lower() not in ("emailmw-signature", "emailmw-recipients")]  # fmt: skip
    forged = robot.security.outgoing(forged.replace(headers=unsigned), robot.address)
    assert forged.message_id == parts[1].message_id
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        for email in [parts[0], forged, *parts[1:]]:
            inject(mailserver, inbox, build(email))
        assert emailmw.wait_for_message(sub, 60) == body
        assert wait_for(lambda: any(
            f"parts 2 of {len(parts)} of message" in r.getMessage()
            and "another signer's message of that Message-ID came whole: quarantined"
            in r.getMessage() for r in caplog.records), 30)  # fmt: skip
    assert wait_for(lambda: listener.security.counts["quarantined"] == 1, 30)
    assert listener.security.counts["foreign-part"] == 1
    assert listener.security.counts["verified"] == len(parts)
    assert sub.get_message() is None
    assert not any("replayed" in r.getMessage() for r in caplog.records)


def _verbatim(stored: Path) -> bytes:
    """A stored email as it was sent (Maildir keeps LF line ends; SMTP wants CRLF, and
    adds a line end to mail that lacks one)."""
    return stored.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_message_replayed_to_another_account_is_refused(
    mailserver: MailServer,
    account: Callable[[], str],
    made: Made,
    caplog: pytest.LogCaptureFixture,
    transport: str,
) -> None:
    first, second = account(), account()
    one = made(first, "arm")
    two = made(second, "arm", transport)
    sub_one = emailmw.Subscription("/chatter", context=one)
    sub_two = emailmw.Subscription("/chatter", context=two)
    talker = made(account(), "talker", to=first)
    emailmw.Publisher("/chatter", context=talker).publish("for the first account")
    assert emailmw.wait_for_message(sub_one, 30) == "for the first account"
    (captured,) = wait_for_files(mailserver.maildir(first), 1)
    two.start_receiving()
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        inject(mailserver, second, _verbatim(captured))
        (reason,) = wait_for_quarantined(caplog, 1)
        emailmw.Publisher("/chatter", context=made(account(), "talker", to=second)).publish("ok")
        assert emailmw.wait_for_message(sub_two, 30) == "ok"
    assert "replayed" in reason
    assert f"signed for other recipients, not for {second}" in reason
    assert sub_two.get_message() is None


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_receiver_down_longer_than_the_window_loses_nothing_and_still_refuses_replays(
    mailserver: MailServer,
    account: Callable[[], str],
    made: Made,
    keystore: Keystore,
    tmp_path: Path,
    transport: str,
) -> None:
    window = 3.0
    inbox = account()
    config = write_config(tmp_path / "arm.yml", mailserver.config(
        inbox, transport=transport, **transport_extra(transport),
        **secure(keystore, "arm", **{"replay-window": window}),
        **{"state-file": str(tmp_path / "state.json")},
    ))  # fmt: skip
    pub = emailmw.Publisher("/chatter", context=made(account(), "talker", to=inbox))
    peer = Peer("sub", config, "/chatter")
    try:
        peer.wait_ready()
        pub.publish("before")
        assert [m["body"] for m in peer.messages(1)] == ["before"]
        peer.kill()
        for i in range(5):
            pub.publish(f"while down {i}")
        down_since = time.monotonic()
        wait_for_files(mailserver.maildir(inbox), 6)
        # down for longer than the window: the condition is time itself
        assert wait_for(lambda: time.monotonic() - down_since > window + 1, window + 5)
        peer = Peer("sub", config, "/chatter")
        peer.wait_ready()
        got = sorted(m["body"] for m in peer.messages(5))
        assert got == [f"while down {i}" for i in range(5)]
        # a verbatim copy of one of them, arriving now, is outside the window
        stored = sorted(
            p for d in ("cur", "new") for p in (mailserver.maildir(inbox) / d).glob("*")
        )
        copy = next(p for p in stored if b"while down 0" in p.read_bytes())
        inject(mailserver, inbox, _verbatim(copy))
        pub.publish("after")
        assert peer.messages(6)[5]["body"] == "after"
        assert wait_for(lambda: b"Subject: /chatter" in folder_subjects(
            mailserver, inbox, "Quarantine"), 30)  # fmt: skip
    finally:
        peer.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("accepts", ["servers", "only_recipients", "only_recipients_from"])
def test_a_client_takes_responses_only_from_the_servers_it_accepts(
    mailserver: MailServer,
    account: Callable[[], str],
    made: Made,
    keystore: Keystore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    transport: str,
    accepts: str,
) -> None:
    """robot may serve /add (on its own account), but the client accepts arm only
    (``servers``), or the identity bound to the account it sent the request to only
    (``only_recipients``, the client's permissions file saying which account each serves
    from): robot's forged answer to the client's pending call is dropped, also when robot
    writes the server's account in ``From:`` (``only_recipients_from``: was accepted, the
    pin compared the From the signer chose); the real one returns."""
    from .test_security_server import _read_request

    client_box, server_box, robot_box = account(), account(), account()
    release = threading.Event()

    def add(request: str) -> str:
        assert release.wait(30)
        return str(sum(map(int, request.split())))

    emailmw.ServiceServer("/add", add, context=made(server_box, "arm", to=client_box))
    bound = tmp_path / "permissions.yaml"
    robot_grants = "  robot: {publish: [/secret], serve: [/add]"
    bound.write_text(
        PERMISSIONS.replace(
            "    serve: [/add]\n", f"    serve: [/add]\n    accounts: [{server_box}]\n", 1
        ).replace(robot_grants, f"{robot_grants}, accounts: [{robot_box}]")
    )
    client_ctx = made(client_box, "talker", transport, to=server_box, permissions=str(bound))
    option: dict[str, Any] = {"servers": ["arm"]} if accepts == "servers" else {
        "only_recipients": True}  # fmt: skip
    client = emailmw.ServiceClient("/add", context=client_ctx, **option)
    answer: list[str] = []
    caller = threading.Thread(target=lambda: answer.append(client.call("2 3", 60)))
    caller.start()
    request = _read_request(mailserver, server_box)
    robot = made(robot_box, "robot", to=client_box)
    sender = {"from_": server_box} if accepts == "only_recipients_from" else {}
    forged = Email("/add", "666", to=(client_box,), **sender, in_reply_to=request["message-id"],
                   references=(request["message-id"],), headers={
                       "Source-Timestamp": str(time.time_ns()),
                       "Client-GID": request["client-gid"],
                       "Request-Sequence-Number": request["request-sequence-number"]})  # fmt: skip
    robot.sender.send(forged)
    assert wait_for(lambda: client.unexpected_responses == 1, 30)
    release.set()
    caller.join(60)
    assert answer == ["5"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_ciphertext_re_signed_by_another_identity_does_not_open(
    mailserver: MailServer,
    account: Callable[[], str],
    made: Made,
    caplog: pytest.LogCaptureFixture,
    transport: str,
) -> None:
    inbox = account()
    arm = made(inbox, "arm", transport)
    sub = emailmw.Subscription("/secret", context=arm)  # not receiving yet
    talker = made(account(), "talker", to=inbox, encrypt={"/secret": ["arm"]})
    emailmw.Publisher("/secret", context=talker).publish("the plans")
    (stored,) = wait_for_files(mailserver.maildir(inbox), 1)
    original = emailmw.parse_email(stored.read_bytes())
    robot = made(account(), "robot", to=inbox)  # may publish /secret, itself
    keep = {"source-timestamp", "publisher-gid", "publisher-sequence-number",
            "emailmw-encryption"}  # fmt: skip
    transplanted = Email("/secret", original.body, to=(inbox,), headers={
        k: v for k, v in original.headers.items() if k.lower() in keep})  # fmt: skip
    robot.sender.send(transplanted)  # under robot's signature and a new Message-ID
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        assert emailmw.wait_for_message(sub, 30) == "the plans"
        (reason,) = wait_for_quarantined(caplog, 1)
    assert "undecryptable" in reason
    assert "re-signed by another identity" in reason
    assert sub.get_message() is None
