"""The doctor's judgements, from facts alone (no server): each check's PASS, WARN and FAIL
and the line that says what to do; the report holds no secret."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import replace
from pathlib import Path

import pytest

import emailmw
from emailmw._core.config import Endpoint, load_options
from emailmw._delivery.graph import Endpoint as GraphEndpoint
from emailmw._delivery.graph import Graph, NodeRecord
from emailmw._doctor import doctor as _doctor
from emailmw._doctor.doctor import Status
from emailmw._transport.ledger import SendLedger, ledger_path
from emailmw._transport.probe import Certificate, ServerProbe, _greeting_time
from emailmw.qos import (
    DurabilityPolicy,
    QoSCompatibility,
    QoSProfile,
    ReliabilityPolicy,
    qos_check_compatible,
)

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
SMTPS = Endpoint("smtps", "mail.example.test", 465)


def options(tmp_path: Path, **extra: object) -> emailmw.Options:
    config = {
        "email": {
            "transport": "native",
            "user": {
                "url-smtp": "smtps://mail.example.test:465",
                "url-imap": "imaps://mail.example.test:993",
                "username": "ann@example.test",
                "password": "Pw-91c7-secret",
            },
            "recipients": {"to": "ann@example.test"},
            **extra,
        }
    }
    return load_options(config)


def cert(days_from: float, days_until: float) -> Certificate:
    return Certificate(
        "CN=mail.example.test",
        "CN=test CA",
        NOW + dt.timedelta(days=days_from),
        NOW + dt.timedelta(days=days_until),
        ("mail.example.test",),
    )


def statuses(checks: list[_doctor.Check]) -> dict[str, Status]:
    return {c.name: c.status for c in checks}


@pytest.mark.parametrize(
    ("days_from", "days_until", "status", "words"),
    [
        (-30, 300, Status.PASS, "valid until 2027-09-22"),
        (-30, 5, Status.WARN, "renew"),
        (-30, -1, Status.FAIL, "expired on 2026-11-25"),
        (1, 300, Status.FAIL, "check this machine's clock"),
    ],
)
def test_certificate_dates(days_from: float, days_until: float, status: Status, words: str) -> None:
    probe = ServerProbe("smtp", SMTPS, certificate=cert(days_from, days_until))
    check = _doctor.judge_certificate(probe, NOW)
    assert check.status is status
    assert words in check.message


def test_a_server_judged_up_to_the_first_failed_step(tmp_path: Path) -> None:
    opts = options(tmp_path)
    unresolved = ServerProbe("smtp", SMTPS, resolve_error="cannot resolve mail.example.test")
    (only,) = _doctor.judge_server(unresolved, opts, NOW)
    assert (only.status, only.name) == (Status.FAIL, "smtp dns")
    assert "check email.user.url-smtp" in only.message
    refused = ServerProbe("smtp", SMTPS, addresses=("10.0.0.1",), connect_error="refused")
    assert statuses(_doctor.judge_server(refused, opts, NOW)) == {
        "smtp dns": Status.PASS,
        "smtp tcp": Status.FAIL,
    }
    untrusted = ServerProbe(
        "smtp", SMTPS, addresses=("10.0.0.1",), tls="implicit", certificate=cert(-1, 300),
        verify_error="unable to get local issuer certificate",
    )  # fmt: skip
    checks = _doctor.judge_server(untrusted, opts, NOW)
    assert checks[-1].status is Status.FAIL
    assert "give its CA as tls.ca-file" in checks[-1].message
    assert "smtp login" not in statuses(checks)
    wrong_password = ServerProbe(
        "smtp", SMTPS, addresses=("10.0.0.1",), tls="implicit", certificate=cert(-1, 300),
        verified=True, login_error="login as ann@example.test refused (535)",
    )  # fmt: skip
    checks = _doctor.judge_server(wrong_password, opts, NOW)
    assert statuses(checks)["smtp tls"] is Status.PASS
    assert statuses(checks)["smtp login"] is Status.FAIL


def test_no_tls_and_unverified_tls_warn(tmp_path: Path) -> None:
    clear = ServerProbe("smtp", Endpoint("smtp", "h", 25), addresses=("h",), tls="none",
                        logged_in=True)  # fmt: skip
    opts = options(tmp_path, tls={"starttls": False})
    assert statuses(_doctor.judge_server(clear, opts, NOW))["smtp tls"] is Status.WARN
    unverified = ServerProbe("smtp", SMTPS, addresses=("h",), tls="implicit",
                             certificate=cert(-1, 300), logged_in=True)  # fmt: skip
    opts = options(tmp_path, tls={"verify": False})
    tls = [c for c in _doctor.judge_server(unverified, opts, NOW) if c.name == "smtp tls"]
    assert tls[0].status is Status.WARN
    assert "tls.verify: false" in tls[0].message


@pytest.mark.parametrize(
    ("skew", "window", "status"),
    [(0.4, None, Status.PASS), (-5, None, Status.WARN), (90, None, Status.FAIL),
     (30, 20.0, Status.FAIL)],
)  # fmt: skip
def test_clock_skew(skew: float, window: float | None, status: Status) -> None:
    check = _doctor.judge_clock(1000.0, 1000.0 + skew, "the SMTP greeting", replay_window=window)
    assert check.status is status
    if status is not Status.PASS:
        assert ("ahead of" if skew > 0 else "behind") in check.message
        assert "sync" in check.message
    if window is not None:
        assert "replayed" in check.message


def test_an_unreadable_clock_warns() -> None:
    check = _doctor.judge_clock(None, None, "", error="no APPEND")
    assert check.status is Status.WARN
    assert "no APPEND" in check.message


def test_the_greeting_date_is_read() -> None:
    assert _greeting_time("220 mx ESMTP ready at Thu, 26 Nov 2026 12:00:00 +0000") == (
        NOW.timestamp()
    )
    assert _greeting_time("220 mx ESMTP Sat, 26 Nov 2026 12:00:00 GMT") == NOW.timestamp()
    assert _greeting_time("220 mx ESMTP Postfix") is None


@pytest.mark.parametrize(
    ("quota", "status"),
    [(None, Status.PASS), ((100, 1000), Status.PASS), ((850, 1000), Status.WARN),
     ((990, 1000), Status.FAIL)],
)  # fmt: skip
def test_quota(quota: tuple[int, int] | None, status: Status) -> None:
    assert _doctor.judge_quota(quota).status is status


def test_a_missing_folder_fails(tmp_path: Path) -> None:
    probe = ServerProbe("imap", SMTPS, folders=("INBOX", "Sent"), logged_in=True)
    assert _doctor.judge_folders(probe, options(tmp_path)).status is Status.PASS
    check = _doctor.judge_folders(probe, options(tmp_path, folder="robots"))
    assert check.status is Status.FAIL
    assert "fix email.folder" in check.message


def test_qos_compatibility_as_ros_decides() -> None:
    reliable, best_effort = QoSProfile(), QoSProfile(reliability=ReliabilityPolicy.BEST_EFFORT)
    latched = QoSProfile(durability=DurabilityPolicy.TRANSIENT_LOCAL)
    assert qos_check_compatible(reliable, best_effort) == (QoSCompatibility.OK, "")
    assert qos_check_compatible(best_effort, reliable)[0] is QoSCompatibility.ERROR
    assert qos_check_compatible(reliable, latched) == (
        QoSCompatibility.ERROR,
        "ERROR: Volatile publisher and transient local subscription;",
    )
    assert qos_check_compatible(latched, reliable)[0] is QoSCompatibility.OK


def _record(name: str, kind: str, reliability: str) -> NodeRecord:
    qos = (("reliability", reliability), ("durability", "volatile"))
    return NodeRecord(name, 1, 60, 0, endpoints=((kind, GraphEndpoint("/scan", "T", 1, qos)),))


def test_graph_with_incompatible_qos_warns() -> None:
    graph = Graph()
    graph.nodes["/lidar"] = _record("/lidar", "publisher", "best_effort")
    graph.nodes["/planner"] = _record("/planner", "subscription", "reliable")
    (check,) = _doctor.judge_graph(graph)
    assert check.status is Status.WARN
    assert "/scan: publisher /lidar and subscription /planner" in check.message
    graph.nodes["/lidar"] = _record("/lidar", "publisher", "reliable")
    assert _doctor.judge_graph(graph)[0].status is Status.PASS


def test_spool(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    assert _doctor.judge_spool(None, 0).status is Status.PASS
    assert _doctor.judge_spool(str(spool), 0).status is Status.PASS
    (spool / "failed").mkdir(parents=True)
    assert _doctor.judge_spool(str(spool), 0).status is Status.PASS
    (spool / f"{10**18:020d}-00000000-abcd.msg").write_bytes(b"{}\n")
    check = _doctor.judge_spool(str(spool), 10**9 + 42)
    assert check.status is Status.WARN
    assert "1 email(s) waiting, the oldest 42 s" in check.message
    (spool / "failed" / "x.msg").write_bytes(b"{}\n")
    assert "refused for good" in _doctor.judge_spool(str(spool), 0).message


def test_keystore_permissions_and_key_expiry(tmp_path: Path) -> None:
    store = emailmw.Keystore.create(tmp_path / "keys")
    store.create_key("robot")
    store.create_key("old", days=-1)
    store.create_key("soon", days=3)
    opts = options(tmp_path, security={"keystore": str(store.path), "identity": "robot"})
    now = dt.datetime.now(dt.UTC).timestamp()
    checks = _doctor.judge_keystore(opts, now)
    assert [c.status for c in checks if c.name == "keystore"] == [Status.PASS]
    keys = [c for c in checks if c.name == "keys"]
    assert [c.status for c in keys] == [Status.WARN, Status.WARN]
    assert "identity old expired on" in keys[0].message
    assert "identity soon expires on" in keys[1].message
    os.chmod(store.path / "private" / "robot.pem", 0o640)
    (failed,) = [c for c in _doctor.judge_keystore(opts, now) if c.name == "keystore"]
    assert failed.status is Status.FAIL
    assert "chmod 600" in failed.message
    own_expired = options(tmp_path, security={"keystore": str(store.path), "identity": "old"})
    os.chmod(store.path / "private" / "robot.pem", 0o600)
    keys = [c for c in _doctor.judge_keystore(own_expired, now) if c.name == "keys"]
    assert keys[0].status is Status.FAIL
    assert "this process's identity expired" in keys[0].message


def test_permissions_file(tmp_path: Path) -> None:
    store = emailmw.Keystore.create(tmp_path / "keys")
    opts = options(tmp_path, security={"keystore": str(store.path), "identity": "robot"})
    assert "no permissions file" in _doctor.judge_permissions(opts).message
    path = store.path / "permissions.yaml"
    path.write_text("identities:\n  robot:\n    publish: [/chatter]\n")
    assert _doctor.judge_permissions(opts).status is Status.PASS
    os.chmod(path, 0o666)
    assert "chmod 644" in _doctor.judge_permissions(opts).message
    os.chmod(path, 0o644)
    path.write_text("identities:\n  other:\n    publish: [/chatter]\n")
    assert _doctor.judge_permissions(opts).status is Status.WARN
    path.write_text("identities:\n  robot:\n    shout: [/chatter]\n")
    check = _doctor.judge_permissions(opts)
    assert check.status is Status.FAIL
    assert "unknown action" in check.message


def test_run_without_or_with_a_broken_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("EMAILMW_CONFIG_FILE", raising=False)
    monkeypatch.delenv("EMAIL_CONFIG_FILE", raising=False)
    (check,), _ = _doctor.run(None)
    assert (check.status, check.name) == (Status.FAIL, "config")
    assert "write ./email.yml" in check.message
    bad = tmp_path / "email.yml"
    bad.write_text("email:\n  user: [\n")
    (check,), _ = _doctor.run(str(bad))
    assert check.message.startswith(f"{bad}:3:1: ")


def test_a_probe_that_breaks_is_a_failed_line_and_the_report_has_no_secret(
    tmp_path: Path,
) -> None:
    path = tmp_path / "email.yml"
    path.touch(mode=0o600)
    path.write_text(
        "email:\n  transport: native\n  user:\n    url-smtp: smtps://mail.example.test:465\n"
        "    url-imap: imaps://mail.example.test:993\n    username: ann@example.test\n"
        "    password: Pw-91c7-secret\n  recipients: {to: ann@example.test}\n"
    )

    def broken(_: emailmw.Options) -> ServerProbe:
        raise RuntimeError("server said Pw-91c7-secret back")

    checks, opts = _doctor.run(str(path), smtp=broken, imap=broken)
    assert statuses(checks)["smtp tcp"] is Status.FAIL
    assert all("Pw-91c7-secret" not in c.message for c in checks)
    text = _doctor.report(checks, opts)
    assert "Pw-91c7-secret" not in text
    assert "ann@" not in text
    assert "user: <redacted>@example.test" in text
    assert text.splitlines()[-1] == _doctor.summary(checks)


def test_folder_roles_features_profile_and_the_day_s_sending(tmp_path: Path) -> None:
    """The account as the profile and the server say: a role the configuration names that
    no folder has fails (naming the roles there); missing IMAP extensions warn with what
    emailmw does without them; a profile whose servers are not the provider's warns; the
    day's sending is read from the machine's ledger and warns at 80 %."""
    probe = ServerProbe(
        "imap", SMTPS, folders=("INBOX", "Trash"), logged_in=True,
        roles={"\\trash": "Trash"}, capabilities=frozenset({"IMAP4REV1", "IDLE", "UIDPLUS"}),
    )  # fmt: skip
    found = _doctor.judge_roles(probe, options(tmp_path, **{"on-receive": "move:\\Trash"}))
    assert [c.status for c in found] == [Status.PASS]
    assert "the server's 'Trash'" in found[0].message
    (missing,) = _doctor.judge_roles(probe, options(tmp_path, quarantine="\\Junk"))
    assert missing.status is Status.FAIL
    assert "roles there: \\trash Trash" in missing.message
    assert _doctor.judge_roles(probe, options(tmp_path)) == []
    features = _doctor.judge_capabilities(probe)
    assert features.status is Status.WARN
    assert "no MOVE: a move is COPY + expunge" in features.message
    assert "no SPECIAL-USE" in features.message
    assert "Courier" not in features.message
    courier = replace(probe, capabilities=probe.capabilities | {"MOVE", "SPECIAL-USE"},
                      greeting="* OK [CAPABILITY IMAP4rev1] Courier-IMAP ready.")  # fmt: skip
    said = _doctor.judge_capabilities(courier)
    assert said.status is Status.WARN
    assert "Courier-IMAP: its IDLE looks for new mail only every" in said.message
    assert _doctor.judge_profile(options(tmp_path)) is None
    gmail = options(tmp_path, provider="gmail")
    profile = _doctor.judge_profile(gmail)
    assert profile is not None
    assert profile.status is Status.WARN
    assert "url-imap is mail.example.test, the profile's imap.gmail.com" in profile.message
    assert gmail.on_receive == "keep"
    assert options(tmp_path, provider="gmail", **{"on-receive": "delete"}).on_receive == (
        "move:\\Trash"
    )
    assert _doctor.judge_sending(options(tmp_path), NOW.timestamp()) is None
    limited = options(tmp_path, limits={"emails-per-day": 10, "emails-per-minute": 5})
    assert limited.user is not None
    ledger = SendLedger(ledger_path(limited.user.username, limited.user.smtp.url), now=0)
    now = NOW.timestamp()
    for t in (now - 2 * 86_400, now - 3600, now - 30, now - 20):
        ledger.record(t)
    check = _doctor.judge_sending(limited, now)
    assert check is not None
    assert check.status is Status.PASS
    assert check.message == (
        "sent from this machine: 3 of 10 emails in the last 24 h (emails-per-day), 2 of 5 "
        "emails in the last minute (emails-per-minute)"
    )
    for t in range(5):
        ledger.record(now - t - 1)
    check = _doctor.judge_sending(limited, now)
    assert check is not None
    assert check.status is Status.WARN


def test_doctor_says_what_the_provider_profile_filled_in(tmp_path: Path) -> None:
    # (#58: a profile's servers, login and limits were invisible: an Outlook.com account
    # with provider: outlook had Exchange Online's limits and nothing said so)
    path = tmp_path / "email.yml"
    path.touch(mode=0o600)
    path.write_text(
        "email:\n  provider: gmail\n  user:\n    username: ann@gmail.com\n"
        "    password: Pw-91c7-secret\n  limits: {emails-per-day: 200}\n"
        "  recipients: {to: ann@gmail.com}\n  on-receive: delete\n"
    )

    def offline(_: emailmw.Options) -> ServerProbe:
        raise RuntimeError("not reached in this test")

    checks, _ = _doctor.run(str(path), smtp=offline, imap=offline)
    (profile,) = [c for c in checks if c.name == "provider"]
    assert profile.status is Status.PASS
    assert profile.message == (
        "gmail: the servers are the profile's; it filled in "
        "user.url-smtp smtps://smtp.gmail.com:465, user.url-imap imaps://imap.gmail.com:993, "
        "limits.recipients-per-email 100, limits.max-connections 15, on-receive move:\\Trash"
    )
