"""Security's pure parts: keystore, signatures, permissions, encryption, replay guard and
the decision state machine, without a transport."""

from __future__ import annotations

import base64
import json
import os
import quopri
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import emailmw
from emailmw import ConfigError, Email, PermissionDeniedError, SecurityError, UndecryptableError
from emailmw._core.config import SecurityOptions, load_options
from emailmw._core.protocol import Recipients, classify, publish_email, request_email
from emailmw._core.types import Gid
from emailmw._core.wire import build, parse, prepare_outgoing
from emailmw._security import (
    Keystore,
    ReplayGuard,
    Security,
    decrypt,
    encrypt,
    load_permissions,
    name_matches,
    read_signature,
    sign,
    verify,
)
from emailmw._security._signing import sign_custody

RECIPIENTS = Recipients("talker@example.test", ("inbox@example.test",))


@pytest.fixture(scope="module")
def keystore(tmp_path_factory: pytest.TempPathFactory) -> Keystore:
    store = Keystore.create(tmp_path_factory.mktemp("ks") / "keystore")
    for name in ("talker", "listener", "robot"):
        store.create_key(name)
    return store


def message(body: str = "hello", topic: str = "/chatter", **headers: str) -> Email:
    email = publish_email(
        topic,
        body,
        recipients=RECIPIENTS,
        gid=Gid(7),
        sequence_number=0,
        timestamp_ns=time.time_ns(),
        headers=headers or None,
    )
    return prepare_outgoing(email, RECIPIENTS.from_)


def signed(keystore: Keystore, email: Email, name: str = "talker") -> Email:
    return sign(email, keystore.identity(name))


def verifies(keystore: Keystore, email: Email) -> bool:
    signature = read_signature(email)
    assert signature is not None
    assert not isinstance(signature, str)
    return verify(email, signature, keystore.trusted()[signature.identity].verify_key)


# ------------------------------------------------------------------------------ keystore


def test_keystore_keeps_private_keys_apart_and_refuses_readable_ones(keystore: Keystore) -> None:
    assert sorted(p.name for p in (keystore.path / "public").iterdir()) == [
        "listener.json",
        "robot.json",
        "talker.json",
    ]
    assert (keystore.path / "private").stat().st_mode & 0o777 == 0o700
    key_file = keystore.path / "private" / "talker.pem"
    assert key_file.stat().st_mode & 0o777 == 0o600
    identity = keystore.identity("talker")
    assert "PRIVATE" not in repr(identity)
    assert "talker" in repr(identity)
    os.chmod(key_file, 0o644)
    try:
        with pytest.raises(SecurityError, match=r"chmod 600 .*talker\.pem"):
            keystore.identity("talker")
    finally:
        os.chmod(key_file, 0o600)
    with pytest.raises(SecurityError, match="create-key"):
        keystore.identity("nobody")
    with pytest.raises(SecurityError, match="exists"):
        keystore.create_key("talker")
    with pytest.raises(SecurityError, match="not an identity name"):
        keystore.create_key("../etc")


def test_a_removed_public_key_is_untrusted_at_once(tmp_path: Path) -> None:
    store = Keystore.create(tmp_path / "ks")
    store.create_key("a")
    store.create_key("b")
    assert set(store.trusted()) == {"a", "b"}
    (store.path / "public" / "b.json").unlink()
    assert set(store.trusted()) == {"a"}


def test_not_a_keystore_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(SecurityError, match="create-keystore"):
        Keystore(tmp_path)


# ------------------------------------------------------------------------------ signing


def test_a_signature_covers_what_an_email_means(keystore: Keystore) -> None:
    email = signed(keystore, message(Trace="abc"))
    assert verifies(keystore, email)
    tampered = {
        "body": email.replace(body="goodbye"),
        "subject": email.replace(subject="/other"),
        "gid": email.replace(headers=email.headers.merged({"Publisher-GID": "8"})),
        "seq": email.replace(headers=email.headers.merged({"Publisher-Sequence-Number": "5"})),
        "stamp": email.replace(headers=email.headers.merged({"Source-Timestamp": "1"})),
        "date": email.replace(headers=email.headers.merged({"Date": "Mon, 1 Jan 2024 0:0:0"})),
        "message-id": email.replace(message_id="<x@y>"),
        "in-reply-to": email.replace(in_reply_to="<x@y>"),
        "from": email.replace(from_="mallory@example.test"),
        "app header": email.replace(headers=email.headers.merged({"Trace": "abd"})),
        "added metadata": email.replace(headers=email.headers.merged({"Client-GID": "1"})),
        "added type": email.replace(headers=email.headers.merged({"Message-Type": "a/msg/B"})),
    }
    for what, forged in tampered.items():
        assert not verifies(keystore, forged), what


def _requote(raw: bytes) -> bytes:
    """What a relay may do to a message: body re-encoded as quoted-printable, headers
    re-folded, trace headers added on top, LF line endings."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = [
        line.replace(b": ", b":\r\n  ", 1) if line.startswith(b"Subject") else line
        for line in head.split(b"\r\n")
        if not line.startswith(b"Content-Transfer-Encoding")
    ]
    text = base64.b64decode(body) if b"base64" in head else body
    new_body = quopri.encodestring(text.replace(b"\r\n", b"\n"))
    trace = [b"Received: from relay.example.test by mx.example.test", b"Delivered-To: a@b"]
    out = b"\n".join([*trace, *lines, b"Content-Transfer-Encoding: quoted-printable"])
    return out.replace(b"\r\n", b"\n") + b"\n\n" + new_body


@settings(max_examples=60, deadline=None)
@given(body=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_a_signature_survives_what_mail_servers_do_to_bytes(keystore: Keystore, body: str) -> None:
    email = signed(keystore, message(body.replace("\r", "")))
    arrived = parse(_requote(build(email)))
    assert arrived.body == email.body
    assert verifies(keystore, arrived)


# ------------------------------------------------------------------------------ permissions


@pytest.mark.parametrize(
    ("pattern", "name", "match"),
    [
        ("/chatter", "/chatter", True),
        ("/chatter", "/chatter2", False),
        ("/robot1/*", "/robot1/arm", True),
        ("/robot1/*", "/robot1/arm/joint", False),
        ("/robot1/**", "/robot1/arm/joint", True),
        ("/robot1/**", "/robot1", True),
        ("/robot1/**", "/robot10", False),
        ("/*/cmd", "/r2/cmd", True),
        ("/**/cmd", "/a/b/cmd", True),
        ("/a.b", "/aXb", False),
    ],
)
def test_ros_name_wildcards(pattern: str, name: str, match: bool) -> None:
    assert name_matches(pattern, name) is match


def test_a_permissions_file_with_a_mistake_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "permissions.yaml"
    for text, key in (
        ("identities:\n  robot:\n    publish: [chatter]\n", "identities.robot.publish[0]"),
        ("identities:\n  robot:\n    shout: [/chatter]\n", "identities.robot.shout"),
        ("identities:\n  robot: [/chatter]\n", "identities.robot"),
        ("identity: {}\n", None),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_permissions(path)
        assert str(path) in str(err.value)
        if key:
            assert f"key '{key}'" in str(err.value)
    path.write_text("identities:\n  robot:\n    publish: [/robot/**]\n    call: /add\n")
    perms = load_permissions(path)
    assert perms.allows("robot", "publish", "/robot/arm")
    assert perms.allows("robot", "call", "/add")
    assert not perms.allows("robot", "subscribe", "/robot/arm")
    assert not perms.allows("talker", "publish", "/robot/arm")
    assert perms.allows("talker", "publish", "/_emailmw/graph")


def test_an_identity_is_bound_to_the_accounts_it_answers_from(tmp_path: Path) -> None:
    path = tmp_path / "permissions.yaml"
    path.write_text("identities:\n  robot:\n    accounts: [robot@lab, 'a b@lab']\n")
    with pytest.raises(ConfigError, match=r"identities.robot.accounts\[1\]'.*an address"):
        load_permissions(path)
    path.write_text("identities:\n  robot:\n    serve: [/add]\n    accounts: Robot@Lab\n")
    perms = load_permissions(path)
    assert perms.answers_from("robot", "robot@lab")
    assert not perms.answers_from("robot", "arm@lab")
    assert not perms.answers_from("talker", "robot@lab")
    assert perms.bound_to(frozenset({"robot@lab"}))
    assert not perms.bound_to(frozenset({"arm@lab"}))


def test_only_recipients_without_an_identity_bound_to_the_account_is_one_line(
    keystore: Keystore, tmp_path: Path
) -> None:
    path = tmp_path / "permissions.yaml"
    path.write_text("identities:\n  talker:\n    call: [/add]\n  robot: {serve: [/add]}\n")
    security = {"keystore": str(keystore.path), "identity": "talker", "permissions": str(path)}
    config = {"email": {"recipients": {"to": "robot@lab"}, "security": security}}
    with (
        emailmw.Context(config) as ctx,
        pytest.raises(ConfigError, match=r"add accounts: \[robot@lab\] to that identity"),
    ):
        emailmw.ServiceClient("/add", context=ctx, only_recipients=True)
    path.write_text(path.read_text().replace("[/add]}", "[/add], accounts: [robot@lab]}"))
    with emailmw.Context(config) as ctx:
        emailmw.ServiceClient("/add", context=ctx, only_recipients=True)


# ------------------------------------------------------------------------------ encryption


def test_encrypted_bodies_open_for_their_recipients_only(keystore: Keystore) -> None:
    trusted = keystore.trusted()
    email = encrypt(
        message("secret plans " * 50), [trusted["listener"], trusted["robot"]], "talker"
    )
    assert "secret" not in email.body
    assert all(len(line) <= 76 for line in email.body.splitlines())
    arrived = parse(build(email))
    for name in ("listener", "robot"):
        assert decrypt(arrived, keystore.identity(name), "talker").body == "secret plans " * 50
    with pytest.raises(UndecryptableError, match="encrypted for listener, robot, not for"):
        decrypt(arrived, keystore.identity("talker"), "talker")
    with pytest.raises(UndecryptableError, match="no identity"):
        decrypt(arrived, None, "talker")
    flipped = arrived.replace(body=arrived.body[:10] + ("A" if arrived.body[10] != "A" else "B")
                              + arrived.body[11:])  # fmt: skip
    with pytest.raises(UndecryptableError, match="does not decrypt"):
        decrypt(flipped, keystore.identity("robot"), "talker")
    # bound to its Subject, its Message-ID and its signer
    for moved, signer in (
        (arrived.replace(subject="/elsewhere"), "talker"),
        (arrived.with_message_id("<other@example.test>"), "talker"),
        (arrived, "robot"),
    ):
        with pytest.raises(UndecryptableError, match="does not decrypt"):
            decrypt(moved, keystore.identity("robot"), signer)


# ------------------------------------------------------------------------------ replay guard


def test_the_replay_guard_refuses_old_future_and_seen_and_remembers_across_restarts(
    tmp_path: Path,
) -> None:
    now = time.time_ns()
    path = tmp_path / "state.json.seen"
    guard = ReplayGuard(600, path)
    assert guard.check("<a@b>", now - 10**9, now) is None
    guard.accept("<a@b>", now - 10**9, now)
    assert "accepted before" in (guard.check("<a@b>", now - 10**9, now) or "")
    assert "outside the 600 s" in (guard.check("<c@b>", now - 601 * 10**9, now) or "")
    assert "in the future" in (guard.check("<c@b>", now + 601 * 10**9, now) or "")
    guard.close()
    again = ReplayGuard(600, path)
    assert "accepted before" in (again.check("<a@b>", now - 10**9, now) or "")
    again.close()


# ------------------------------------------------------------------------------ decisions


def security(keystore: Keystore, mode: str, identity: str | None = "listener",
             permissions: str | None = None) -> Security:  # fmt: skip
    return Security(
        SecurityOptions(
            keystore=str(keystore.path), identity=identity, verify=mode, permissions=permissions
        )
    )


def decide(sec: Security, email: Email, *, redelivered: bool = False) -> tuple[bool, str]:
    decision = sec.incoming(parse(build(email)), classify(email, time.time_ns()),
                            redelivered=redelivered)  # fmt: skip
    return decision.deliver, decision.status


def test_each_mode_decides_as_documented(keystore: Keystore, tmp_path: Path) -> None:
    outsider = Keystore.create(tmp_path / "outsider")
    outsider.create_key("mallory")
    good = signed(keystore, message())
    cases = {
        "verified": good,
        "unsigned": message(),
        "invalid": good.replace(body="forged"),
        "untrusted": sign(message(), outsider.identity("mallory")),
    }
    for mode, delivered in (("enforce", {"verified"}), ("permissive", set(cases))):
        sec = security(keystore, mode)
        for status, email in cases.items():
            assert decide(sec, email) == (status in delivered, status), (mode, status)
        assert decide(sec, good) == (mode == "permissive", "replayed")
        assert sec.counts["verified"] == 1
        sec.close()
    off = security(keystore, "off")
    assert decide(off, cases["invalid"]) == (True, "unchecked")


def test_verified_mail_carries_its_identity_and_only_its_signed_headers(
    keystore: Keystore,
) -> None:
    email = signed(keystore, message(Trace="t1"))
    added = email.replace(headers=email.headers.merged({"Command": "self-destruct"}))
    sec = security(keystore, "enforce")
    decision = sec.incoming(added, classify(added, time.time_ns()))
    assert decision.deliver
    assert decision.route.info.identity == "talker"  # type: ignore[union-attr]
    assert decision.email.headers.get("Trace") == "t1"
    assert "Command" not in decision.email.headers


def test_a_redelivered_email_is_not_its_own_replay(keystore: Keystore) -> None:
    sec = security(keystore, "enforce")
    email = signed(keystore, message())
    assert decide(sec, email) == (True, "verified")
    assert decide(sec, email, redelivered=True) == (True, "verified")
    assert decide(sec, email) == (False, "replayed")


def test_grants_decide_on_both_sides(keystore: Keystore, tmp_path: Path) -> None:
    perms = tmp_path / "permissions.yaml"
    perms.write_text(
        "identities:\n"
        "  talker: {publish: [/chatter], call: [/add]}\n"
        "  listener: {subscribe: [/chatter], serve: [/add]}\n"
    )
    listener = security(keystore, "enforce", "listener", str(perms))
    listener.check_local("subscribe", "/chatter")
    with pytest.raises(PermissionDeniedError, match=r"'listener' may not publish '/chatter'"):
        listener.check_local("publish", "/chatter")
    assert decide(listener, signed(keystore, message())) == (True, "verified")
    assert decide(listener, signed(keystore, message(topic="/cmd"))) == (False, "denied")
    assert decide(listener, signed(keystore, message(), "robot")) == (False, "denied")
    request = prepare_outgoing(
        request_email("/add", "1 2", recipients=RECIPIENTS, client_gid=Gid(3),
                      sequence_number=0, timestamp_ns=time.time_ns()),
        RECIPIENTS.from_,
    )  # fmt: skip
    assert decide(listener, signed(keystore, request)) == (True, "verified")
    talker = security(keystore, "enforce", "talker", str(perms))
    with pytest.raises(PermissionDeniedError):
        talker.outgoing(message(topic="/cmd"), RECIPIENTS.from_)
    out = talker.outgoing(message(), RECIPIENTS.from_)
    assert verifies(keystore, out)


def test_encrypted_mail_without_the_key_is_refused_with_the_reason_in_every_mode(
    keystore: Keystore,
) -> None:
    email = signed(keystore, encrypt(message("s"), [keystore.trusted()["robot"]], "talker"))
    for mode in ("off", "permissive", "enforce"):
        decision = security(keystore, mode).incoming(email, classify(email, time.time_ns()))
        assert (decision.deliver, decision.status) == (False, "undecryptable")
        assert "encrypted for robot" in decision.reason
    robot = security(keystore, "enforce", "robot").incoming(email, classify(email, time.time_ns()))
    assert (robot.deliver, robot.email.body) == (True, "s")


# ------------------------------------------------------------------------------ command line


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emailmw", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_the_security_commands_make_and_list_a_keystore(tmp_path: Path) -> None:
    store = tmp_path / "keystore"
    assert _cli("security", "create-keystore", str(store)).returncode == 0
    made = _cli("security", "create-key", str(store), "robot1", "--days", "30")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("robot1 SHA256:")
    listed = _cli("security", "list-keys", str(store))
    assert listed.stdout.split("\t")[0] == "robot1"
    assert "private key here" in listed.stdout
    for args, says in (
        (("create-key", str(store), "robot1"), "exists"),
        (("list-keys", str(tmp_path)), "create-keystore"),
        (("create-key", str(store), "a/b"), "not an identity name"),
    ):
        out = _cli("security", *args)
        assert (out.returncode, out.stdout) == (1, "")
        assert out.stderr.count("\n") == 1
        assert says in out.stderr
        assert "Traceback" not in out.stderr
    private = store / "private" / "robot1.pem"
    os.chmod(private, 0o644)
    config = tmp_path / "email.yml"
    account = {
        "user": {"url-smtp": "smtps://127.0.0.1:1", "url-imap": "imaps://127.0.0.1:1",
                 "username": "a@example.test", "password": "pw"},
        "recipients": {"to": "a@example.test"},
        "security": {"keystore": str(store), "identity": "robot1"},
    }  # fmt: skip
    config.write_text(yaml.safe_dump({"email": account}))
    out = _cli("--config", str(config), "topic", "pub", "/x", "std_msgs/msg/String", "data: a",
               "--once")  # fmt: skip
    assert out.returncode == 1
    assert f"run 'chmod 600 {private}'" in out.stderr
    assert "Traceback" not in out.stderr


def test_security_settings_come_from_the_environment_too(
    keystore: Keystore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("EMAILMW_SECURITY_KEYSTORE", str(keystore.path))
    monkeypatch.setenv("EMAILMW_SECURITY_IDENTITY", "talker")
    monkeypatch.chdir(tmp_path)  # no ./email.yml
    monkeypatch.delenv("EMAILMW_CONFIG_FILE", raising=False)
    monkeypatch.delenv("EMAIL_CONFIG_FILE", raising=False)
    options = load_options(None)
    assert (options.security.keystore, options.security.identity) == (str(keystore.path), "talker")
    assert options.security.verify == "enforce"
    with pytest.raises(ConfigError, match=r"email.security.verify"):
        load_options({"email": {"security": {"keystore": str(keystore.path), "verify": "on"}}})
    with pytest.raises(ConfigError, match=r"email.security.keystore.*create-keystore"):
        load_options({"email": {"security": {"keystore": str(tmp_path / "none")}}})


def test_an_intraprocess_context_signs_and_verifies_end_to_end(keystore: Keystore) -> None:
    config = {"email": {"security": {"keystore": str(keystore.path), "identity": "talker"}}}
    with emailmw.Context(config) as ctx:
        sub = emailmw.Subscription("/chatter", context=ctx)
        emailmw.Publisher("/chatter", context=ctx).publish("hi")
        got = emailmw.wait_for_message_with_info(sub, 10)
        assert got is not None
        assert (got[0], got[1].identity) == ("hi", "talker")
        assert ctx.security.counts["verified"] == 1


def test_the_seen_file_forgets_what_the_window_refuses_anyway(tmp_path: Path) -> None:
    path = tmp_path / "state.json.seen"
    guard = ReplayGuard(1, path)
    now = time.time_ns()
    for i in range(4095):
        guard.accept(f"<old{i}@b>", now - 10 * 10**9, now)
    guard.accept("<new@b>", now, now)  # the 4096th: the old ones are past twice the window
    guard.close()
    assert path.read_text().splitlines() == [f"{now} <new@b>"]


# ------------------------------------------------------------------ faces, acks, custody

FACE_PERMISSIONS = """\
identities:
  talker:
    publish: [/chatter]
    stem: {send: ["/robot/arm/cmd/status"], as: ["/base/station"]}
    ymp: {send: ["/robot/motion/arm/move"], as: [base]}
  listener:
    subscribe: [/chatter]
    stem: {as: ["/robot/arm"]}
    ymp: {as: [robot]}
    floctrl: {as: ["/plant/*"], to: ["/plant/*"], topics: [status]}
  robot: {relay: ["/stem/robot"], accounts: [robot@example.test]}
  gw2: {relay: ["/stem/robot"], accounts: [gw2@example.test]}
  gw3: {relay: ["/stem/robot"]}
"""


def _face_security(keystore: Keystore, tmp_path: Path, identity: str, **more: object) -> Security:
    perms = tmp_path / "faces.yaml"
    perms.write_text(FACE_PERMISSIONS)
    options = SecurityOptions(keystore=str(keystore.path), identity=identity, verify="enforce",
                              permissions=str(perms))  # fmt: skip
    return Security(options, **more)  # type: ignore[arg-type]


def _routed(face: str, to: str, from_: str, body: str, *, hops: int = 0) -> Email:
    from emailmw._core.addressing import Address, Envelope
    from emailmw._core.protocol import routed_email

    to_hub, to_name = to.split(":")
    from_hub, from_name = from_.split(":")
    envelope = Envelope(Address(to_name, to_hub), Address(from_name, from_hub), face, hops=hops)
    email = routed_email(envelope, f"{face} test", body, to="robot@example.test",
                         from_="base@example.test", timestamp_ns=time.time_ns())  # fmt: skip
    return prepare_outgoing(email, "base@example.test")


def _decide_routed(sec: Security, email: Email) -> tuple[bool, str, str]:
    arrived = parse(build(email))
    decision = sec.incoming(arrived, classify(arrived, time.time_ns()))
    return decision.deliver, decision.status, decision.reason


def test_face_grants_in_the_permissions_file_name_file_and_key(tmp_path: Path) -> None:
    good = tmp_path / "p.yaml"
    good.write_text(FACE_PERMISSIONS)
    perms = load_permissions(good)
    assert perms.allows("talker", "stem.send", "/robot/arm/cmd/status")
    assert not perms.allows("talker", "stem.send", "/robot/arm/cmd/reboot")
    assert perms.allows("listener", "floctrl.as", "/plant/line1")
    assert not perms.allows("robot", "stem.as", "/robot/arm")
    for text, key in (
        ("identities: {a: {stem: {sned: []}}}", "identities.a.stem.sned"),
        ("identities: {a: {ymp: [x]}}", "identities.a.ymp"),
        ("identities: {a: {stem: {send: [robot]}}}", r"identities.a.stem.send\[0\]"),
        ("identities: {a: {bogus: []}}", "identities.a.bogus"),
    ):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ConfigError, match=rf"bad.yaml.*{key}"):
            load_permissions(bad)


def test_routed_mail_needs_its_faces_grants_on_both_sides(
    keystore: Keystore, tmp_path: Path
) -> None:
    robot = _face_security(keystore, tmp_path, "listener", hub="robot")
    status = '{"type":"cmd","cmd":"status","msg_id":5}'
    reboot = '{"type":"cmd","cmd":"reboot","msg_id":6}'
    cases = [  # (signer, email, delivered)
        ("talker", _routed("stem", "robot:arm", "base:station", status), True),
        ("talker", _routed("stem", "robot:arm", "base:station", reboot), False),
        ("robot", _routed("stem", "robot:arm", "base:station", status), False),  # no grants
        ("talker", _routed("stem", "robot:arm", "base:other", status), False),  # speaks as?
        ("talker", _routed("stem", ":arm", "base:station", status), True),  # this hub
    ]
    for signer, email, delivered in cases:
        got = _decide_routed(robot, signed(keystore, email, signer))
        assert got[:2] == ((True, "verified") if delivered else (False, "denied")), (signer, got)
    # a local send without the grant raises, as for topics
    base = _face_security(keystore, tmp_path, "talker", hub="base")
    base.outgoing(_routed("stem", "robot:arm", "base:station", status), "base@example.test")
    with pytest.raises(PermissionDeniedError, match=r"stem.send '/robot/arm/cmd/reboot'.*"
                       r"identities.talker.stem.send in .*faces.yaml"):  # fmt: skip
        base.outgoing(_routed("stem", "robot:arm", "base:station", reboot), "base@example.test")


def test_a_ymp_sender_host_is_the_signed_route_not_a_header(
    keystore: Keystore, tmp_path: Path
) -> None:
    robot = _face_security(keystore, tmp_path, "listener", hub="robot")

    def request(sender_host: str, action: str) -> str:
        return json.dumps({"sender": {"host": sender_host, "protocol": "p", "service": "s"},
                           "id": "1", "host": "robot", "protocol": "motion", "service": "arm",
                           "action": action, "payload": {}})  # fmt: skip

    ok = _routed("ymp", "robot:ymp", "base:ymp", request("base", "move"))
    assert _decide_routed(robot, signed(keystore, ok))[:2] == (True, "verified")
    for email, why in (
        (_routed("ymp", "robot:ymp", "base:ymp", request("base", "reboot")), "ymp.send"),
        (_routed("ymp", "robot:ymp", "base:ymp", request("plant", "move")), "not the hub"),
        (_routed("ymp", "robot:ymp", "plant:ymp", request("plant", "move")), "ymp.as 'plant'"),
    ):
        deliver, status, reason = _decide_routed(robot, signed(keystore, email))
        assert (deliver, status) == (False, "denied")
        assert why in reason


def _ack(topic: str, subscriber: str) -> Email:
    from emailmw._core.protocol import ack_email

    published = message(topic=topic)
    return prepare_outgoing(
        ack_email(published, subscriber=subscriber, delivery_count=1, from_="x@example.test",
                  timestamp_ns=time.time_ns()),
        "x@example.test",
    )  # fmt: skip


def test_an_ack_counts_from_a_subscriber_of_its_topic_named_by_its_signature(
    keystore: Keystore, tmp_path: Path
) -> None:
    talker = _face_security(keystore, tmp_path, "talker")
    deliver, status, _ = _decide_routed(talker, signed(keystore, _ack("/chatter", "bob"), "robot"))
    assert (deliver, status) == (False, "denied")
    arrived = parse(build(signed(keystore, _ack("/chatter", "bob"), "listener")))
    decision = talker.incoming(arrived, classify(arrived, time.time_ns()))
    assert decision.deliver
    assert decision.route.info.subscriber == "listener"  # type: ignore[union-attr]


def test_a_relayed_message_keeps_its_originators_signature(
    keystore: Keystore, tmp_path: Path
) -> None:
    """A relay's copy carries the originator's signature: the destination names the
    originator and the relays, checks the grants on the originator, and refuses a copy
    whose relay changed what it may not, dropped the origin or lied about the path."""
    from emailmw._core.protocol import routed_email
    from emailmw._delivery.routing import forwarded_message_id

    base = _face_security(keystore, tmp_path, "talker", hub="base")
    relay = _face_security(keystore, tmp_path, "robot", hub="gw")  # relays Stem to robot only
    robot = _face_security(keystore, tmp_path, "listener", hub="robot")
    status = '{"type":"cmd","cmd":"status","msg_id":5}'
    first = base.outgoing(_routed("stem", "robot:arm", "base:station", status), "b@example.test")

    def relayed(email: Email, **change: str) -> Email:
        route = classify(email, 0)
        envelope = route.envelope.forwarded()  # type: ignore[union-attr]
        stamp = route.info.source_timestamp  # type: ignore[union-attr]
        copy = routed_email(envelope, email.subject, change.get("body", email.body),
                            to="robot@example.test", from_="gw@example.test",
                            timestamp_ns=stamp)  # fmt: skip
        copy = copy.with_message_id(forwarded_message_id(email.message_id, envelope))
        keep = {"emailmw-origin", "route-via", "route-custody"} - set(
            change.get("strip", "").split(",")
        )
        custody = [(k, v) for k, v in email.headers.items() if k.lower() in keep]
        return relay.outgoing(copy.replace(headers=[*copy.headers.items(), *custody]),
                              "gw@example.test")  # fmt: skip

    copy = relayed(first)
    arrived = parse(build(copy))
    decision = robot.incoming(arrived, classify(arrived, time.time_ns()))
    assert (decision.deliver, decision.status) == (True, "verified"), decision.reason
    info = decision.route.info  # type: ignore[union-attr]
    assert (info.identity, info.via) == ("talker", ("robot",))
    assert _decide_routed(robot, copy)[1] == "replayed"  # the same message, by its origin
    reboot = '{"type":"cmd","cmd":"reboot","msg_id":5}'
    forged = _routed("stem", "robot:arm", "base:station", reboot, hops=1)
    for bad, why in (
        (relayed(first, body=reboot), "originator signature of 'talker' does not verify"),
        (relayed(first, strip="emailmw-origin"), "without its originator's signature"),
        (relay.outgoing(forged, "gw@example.test"), "without its originator's signature"),
    ):
        deliver, status, reason = _decide_routed(robot, bad)
        assert (deliver, status) == (False, "invalid"), reason
        assert why in reason
    lying = copy.replace(headers=copy.headers.merged({"Route-Via": "talker"}))
    assert _decide_routed(robot, sign(lying, keystore.identity("robot")))[2].startswith(
        "signed by 'robot', but the last hop is 'talker'"
    )


def test_relaying_is_a_grant_checked_for_every_relay_at_every_hop(
    keystore: Keystore, tmp_path: Path
) -> None:
    """A trusted identity without the relay grant that re-signs a relayed copy (naming
    itself in Route-Via, as a relay does) is refused wherever the copy arrives, and a
    relay cannot send what it may not relay; a granted relay's copy is delivered."""
    from emailmw._core.addressing import Envelope
    from emailmw._core.protocol import routed_email

    base = _face_security(keystore, tmp_path, "talker", hub="base")
    robot = _face_security(keystore, tmp_path, "listener", hub="robot")
    status = '{"type":"cmd","cmd":"status","msg_id":7}'
    first = base.outgoing(_routed("stem", "robot:arm", "base:station", status), "b@example.test")

    def copy_by(email: Email, relay: str) -> Email:
        """What a relay sends on: one hop more, its identity appended, signed by it."""
        route = classify(email, 0)
        envelope: Envelope = route.envelope.forwarded()  # type: ignore[union-attr]
        copy = routed_email(envelope, email.subject, email.body, to="robot@example.test",
                            from_=f"{relay}@example.test",
                            timestamp_ns=route.info.source_timestamp)  # type: ignore[union-attr]  # fmt: skip
        via = [v for v in [email.headers.get("Route-Via", ""), relay] if v]
        custody = [("Emailmw-Origin", email.headers["Emailmw-Origin"]),
                   ("Route-Via", ", ".join(via)),
                   ("Route-Custody", email.headers["Route-Custody"])]  # fmt: skip
        copy = copy.replace(headers=[*copy.headers.items(), *custody])
        copy = prepare_outgoing(copy.with_message_id(f"<{relay}.{time.time_ns()}@x>"), "r@x")
        origin = email.headers["Emailmw-Origin"].split("m=")[1].split(";")[0]
        return sign(sign_custody(copy, keystore.identity(relay), origin), keystore.identity(relay))

    granted = copy_by(first, "robot")
    assert _decide_routed(robot, granted)[:2] == (True, "verified")
    for chain, refused in ((copy_by(first, "listener"), "listener"),  # no relay grant
                           (copy_by(granted, "listener"), "listener"),  # granted, then not
                           (copy_by(copy_by(first, "talker"), "robot"), "talker")):  # fmt: skip
        deliver, status, reason = _decide_routed(
            _face_security(keystore, tmp_path, "listener", hub="robot"), chain
        )
        assert (deliver, status) == (False, "denied"), reason
        assert reason == f"relay {refused!r} (Route-Via) has no grant to relay '/stem/robot'"
    # a relay may not send on what it may not relay (its own permissions say so first)
    other = base.outgoing(_routed("stem", "far:arm", "base:station", status), "b@example.test")
    relay = _face_security(keystore, tmp_path, "robot", hub="gw")
    route = classify(other, 0)
    forwarded = routed_email(route.envelope.forwarded(), other.subject, other.body,  # type: ignore[union-attr]
                             to="far@example.test", from_="gw@example.test",
                             timestamp_ns=time.time_ns())  # fmt: skip
    with pytest.raises(PermissionDeniedError, match="may not relay '/stem/far'"):
        relay.outgoing(forwarded, "gw@example.test")


def _relay_copy(
    email: Email, relay: str, keystore: Keystore, tmp_path: Path, to: str, *, hop: bool = True
) -> Email:
    """What relay ``relay`` sends on to ``to``, as a gateway does (through its own
    ``Security.outgoing``): one hop more, its identity appended to Route-Via and
    Route-Custody, signed by it. ``hop=False``: the relay replaces the last hop instead."""
    from emailmw._core.protocol import routed_email

    route = classify(email, 0)
    envelope = route.envelope.forwarded() if hop else route.envelope  # type: ignore[union-attr]
    copy = routed_email(envelope, email.subject, email.body, to=to, from_=to,
                        timestamp_ns=route.info.source_timestamp)  # type: ignore[union-attr]  # fmt: skip
    via = [v.strip() for v in email.headers.get("Route-Via", "").split(",") if v.strip()]
    chain = email.headers["Route-Custody"].split(", ")
    if not hop:
        via, chain = via[:-1], chain[:-1]
    custody = [("Emailmw-Origin", email.headers["Emailmw-Origin"]),
               ("Route-Via", ", ".join(via)), ("Route-Custody", ", ".join(chain))]  # fmt: skip
    copy = copy.replace(headers=[*copy.headers.items(), *custody])
    copy = copy.with_message_id(f"<{relay}.{time.time_ns()}@x>")
    return _face_security(keystore, tmp_path, relay, hub="gw").outgoing(copy, to)


def test_a_relayed_copy_counts_only_where_each_hop_sent_it(tmp_path: Path) -> None:
    """Route-Custody: each hop signs whom it sent its copy to, chained to the hop before.
    A relay's copy counts only when the hop before it sent the message to one of the
    relay's accounts: an identity that holds the relay grant but was never sent the
    message (it took a stored copy) cannot relay it, however it signs; a relay bound to
    no account, a chain with a hop left out, and a relayed copy without a chain are
    refused. The legitimate two-hop path is delivered."""
    keystore = Keystore.create(tmp_path / "relays")
    for name in ("talker", "listener", "robot", "gw2", "gw3"):
        keystore.create_key(name)
    base = _face_security(keystore, tmp_path, "talker", hub="base")
    status = '{"type":"cmd","cmd":"status","msg_id":9}'
    # the originator sends to the first gateway's account; gateway robot sends on to gw2's
    first = base.outgoing(
        _routed("stem", "robot:arm", "base:station", status).replace(to=("robot@example.test",)),
        "b@example.test",
    )
    one = _relay_copy(first, "robot", keystore, tmp_path, "gw2@example.test")
    two = _relay_copy(one, "gw2", keystore, tmp_path, "arm@example.test")
    arm = _face_security(keystore, tmp_path, "listener", hub="robot",
                         accounts=("arm@example.test",))  # fmt: skip
    deliver, status_, reason = _decide_routed(arm, two)
    assert (deliver, status_) == (True, "verified"), reason
    # gw2 holds the grant but was never sent the originator's copy (it went to robot's
    # account): gw2 takes it from there and relays it itself
    for copy, why in (
        (_relay_copy(first, "gw2", keystore, tmp_path, "arm@example.test"),
         "relay 'gw2' was not sent this message: 'talker' sent it to none of its accounts"),
        # the same after the legitimate path: gw2 appends a hop to the copy it delivered
        (_relay_copy(two, "gw2", keystore, tmp_path, "arm@example.test"),
         "relay 'gw2' was not sent this message: 'gw2' sent it to none of its accounts"),
        # a granted relay bound to no account
        (_relay_copy(first, "gw3", keystore, tmp_path, "arm@example.test"),
         "relay 'gw3' is bound to no account: add its accounts (identities.gw3.accounts)"),
    ):  # fmt: skip
        fresh = _face_security(keystore, tmp_path, "listener", hub="robot",
                               accounts=("arm@example.test",))  # fmt: skip
        deliver, status_, reason = _decide_routed(fresh, copy)
        assert (deliver, status_) == (False, "denied"), reason
        assert why in reason
    # gw2 puts itself in robot's place (the chain one hop shorter, robot's hop left out)
    skipped = _relay_copy(one, "gw2", keystore, tmp_path, "arm@example.test", hop=False)
    fresh = _face_security(keystore, tmp_path, "listener", hub="robot")
    deliver, status_, reason = _decide_routed(fresh, skipped)
    assert (deliver, status_) == (False, "denied"), reason
    assert "relay 'gw2' was not sent this message: 'talker' sent it" in reason
    # a chain that does not name the hops Route-Via names
    short = ", ".join(two.headers["Route-Custody"].split(", ")[::2])
    cut = two.replace(headers=two.headers.merged({"Route-Custody": short}))
    deliver, status_, reason = _decide_routed(fresh, sign(cut, keystore.identity("gw2")))
    assert (deliver, status_) == (False, "invalid")
    assert reason == "Route-Custody names other hops than Route-Via"
    # a relayed copy without the chain
    bare = two.replace(headers=[(k, v) for k, v in two.headers.items()
                                if k.lower() != "route-custody"])  # fmt: skip
    deliver, status_, reason = _decide_routed(fresh, sign(bare, keystore.identity("gw2")))
    assert (deliver, status_) == (False, "invalid")
    assert "relayed without its chain of custody (Route-Custody)" in reason
    # a chain whose hop names other accounts than the ones it signed
    entries = two.headers["Route-Custody"].split(", ")
    hop1 = entries[1].split(" ")
    hop1[2] = "t=" + "A" * 16
    forged = ", ".join([entries[0], " ".join(hop1), entries[2]])
    tampered = two.replace(headers=two.headers.merged({"Route-Custody": forged}))
    deliver, status_, reason = _decide_routed(fresh, sign(tampered, keystore.identity("gw2")))
    assert (deliver, status_) == (False, "invalid")
    assert reason == "hop 1 of Route-Custody ('robot') does not verify"


def test_signed_mail_is_for_its_recipients_only(keystore: Keystore, tmp_path: Path) -> None:
    talker = _face_security(keystore, tmp_path, "talker")
    email = talker.outgoing(
        message().replace(to=("inbox@example.test",), bcc=("hidden@example.test",)),
        RECIPIENTS.from_,
    )
    assert "hidden" not in build(email).decode()
    for account, delivered in (
        ("inbox@example.test", True),
        ("Hidden@Example.test", True),  # Bcc counts, however spelled
        ("other@example.test", False),
    ):
        sec = _face_security(keystore, tmp_path, "listener", accounts=(account,))
        deliver, status, reason = _decide_routed(sec, email)
        assert deliver is delivered, (account, reason)
        if not delivered:
            assert status == "replayed"
            assert "signed for other recipients" in reason


def test_freshness_is_judged_at_arrival(keystore: Keystore) -> None:
    """A receiver that was down longer than the window takes what arrived meanwhile; a
    copy that arrives after the window is refused."""
    sec = security(keystore, "enforce")
    email = signed(keystore, message())
    arrived = parse(build(email))
    route = classify(arrived, 0)
    sent = route.info.source_timestamp  # type: ignore[union-attr]
    later = sent + 3600 * 10**9
    ok = sec.incoming(arrived, route, now_ns=later, arrival_ns=sent + 10**9)
    assert (ok.deliver, ok.status) == (True, "verified")
    again = signed(keystore, message())
    route = classify(again, 0)
    late = sec.incoming(again, route, now_ns=later, arrival_ns=later)
    assert (late.deliver, late.status) == (False, "replayed")
    assert "when it arrived" in late.reason


# ------------------------------------------------------------------ files


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_files_that_hold_trust_or_mail_are_private_whatever_the_umask(tmp_path: Path) -> None:
    from emailmw._transport.outbox import Spool
    from emailmw._transport.outbox import Submission as SpoolEnvelope

    old = os.umask(0)
    try:
        store = Keystore.create(tmp_path / "ks")
        store.create_key("talker")
        (tmp_path / "spool").mkdir(mode=0o777)
        (tmp_path / "spool" / ".1-2-3.msg.tmp").write_bytes(b"half a write")
        spool = Spool(str(tmp_path / "spool"))
        written = spool.write(SpoolEnvelope("a@b", ("c@d",), b"Subject: x\r\n\r\nbody", "<m@b>"))
        guard = ReplayGuard(600, tmp_path / "state.json.seen")
        guard.accept("<m@b>", time.time_ns(), time.time_ns())
        guard.close()
    finally:
        os.umask(old)
    assert (_mode(store.path), _mode(store.path / "public"), _mode(store.path / "private")) == (
        0o700, 0o755, 0o700,
    )  # fmt: skip
    assert _mode(store.path / "public" / "talker.json") == 0o644
    assert _mode(store.path / "private" / "talker.pem") == 0o600
    assert (_mode(tmp_path / "spool"), _mode(written)) == (0o700, 0o600)
    assert not (tmp_path / "spool" / ".1-2-3.msg.tmp").exists()  # cleaned up at start
    spool.close()
    assert _mode(tmp_path / "state.json.seen") == 0o600


@pytest.mark.parametrize("where", ["public/talker.json", "public", "."])
def test_a_keystore_others_may_write_to_is_refused_with_the_fix(tmp_path: Path, where: str) -> None:
    store = Keystore.create(tmp_path / "ks")
    store.create_key("talker")
    planted = store.path / where
    planted.chmod(planted.stat().st_mode | 0o022)
    fixed = {"public/talker.json": "644", "public": "755", ".": "700"}[where]
    options = SecurityOptions(keystore=str(store.path), identity="talker", verify="enforce")
    with pytest.raises(SecurityError, match=rf"may be written by others.*chmod {fixed} "):
        Security(options)
    planted.chmod(planted.stat().st_mode & ~0o022)
    Security(options).close()


def test_a_signed_message_back_through_its_group_is_a_repeat_an_outside_copy_a_replay(
    keystore: Keystore,
) -> None:
    """#56: the replay guard accepts a Message-ID when the polling thread verifies it; a
    group member's claim taken over before its application got it and taken back came
    again with ``redelivered`` false (no application had it) and was quarantined as
    replayed (4 of 10 lost). What came back through its group (``returned``) is a repeat;
    the same copy from outside the group is still a replay."""
    from emailmw._delivery.handlers import SubscriptionHandler
    from emailmw._delivery.polling import PollingManager
    from emailmw._transport.base import IncomingEmail

    class Sink:
        def __init__(self) -> None:
            self.bodies: list[str] = []

        def _push_message(self, body: str, info: object, ticket: object) -> None:
            self.bodies.append(body)

    sec = security(keystore, "enforce")
    sink = Sink()
    handler = SubscriptionHandler()
    handler.register("/chatter", sink)
    # (as a group's polling thread: duplicates are the group's to judge)
    manager = PollingManager(emailmw.intraprocess_pair()[1], security=sec, drop_duplicates=False)
    manager.register_handler(handler)
    email = parse(build(signed(keystore, message())))
    outcomes: list[str] = []

    def incoming(**flags: bool) -> IncomingEmail:
        return IncomingEmail(email, settle=lambda outcome, then: outcomes.append(outcome),
                             **flags)  # fmt: skip

    first = incoming()
    manager.dispatch(first)  # verified; then its claim is lost (taken over) unsettled
    first.withdraw()
    manager.dispatch(incoming(returned=True))  # taken back: no application had it
    assert len(sink.bodies) == 2
    manager.dispatch(incoming())  # the same copy, not from the group: a replay
    assert len(sink.bodies) == 2
    assert outcomes == ["quarantine"]
    sec.close()


def test_parts_that_do_not_make_the_body_their_digest_names_are_refused_not_verified(
    keystore: Keystore,
) -> None:
    # (#59: each part's signature held, so they counted as verified, though quarantined)
    from emailmw._core.packing import split_email

    config = {"email": {"security": {"keystore": str(keystore.path), "identity": "talker"}}}
    with emailmw.Context(config) as ctx:
        sub = emailmw.Subscription("/chatter", context=ctx)
        ctx.start_receiving()
        body = "".join(f"line {i:05d}\n" for i in range(400))
        to_itself = Recipients(ctx.address, (ctx.address,))
        whole = publish_email("/chatter", body, recipients=to_itself, gid=Gid(7),
                              sequence_number=0, timestamp_ns=time.time_ns())  # fmt: skip
        parts = split_email(whole.with_message_id("<whole@x>"), 1024)
        assert len(parts) >= 3
        swapped = parts[1].replace(body=parts[1].body.replace("line", "LINE"))
        for part in [parts[0], swapped, *parts[2:]]:
            ctx.sender.send(part)
        emailmw.Publisher("/chatter", context=ctx).publish("after")
        assert emailmw.wait_for_message(sub, 10) == "after"
        assert sub.get_message() is None
        counts = ctx.security.counts
        assert (counts["part-digest"], counts["verified"]) == (len(parts), 1)
