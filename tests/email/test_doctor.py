"""``emailmw doctor`` against the real server: every check passing, and each made to fail
on purpose (a wrong password, an expired or misnamed certificate from the test CA, a
server clock five minutes off, a world-readable key, incompatible QoS in the graph)."""

from __future__ import annotations

import base64
import email.utils
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import emailmw
from emailmw import std_msgs
from emailmw.qos import QoSProfile, ReliabilityPolicy
from emailmw.testing.mailserver import MailServer

from ..helpers import round_trip
from .helpers import write_config


def doctor(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emailmw", "doctor", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def lines(out: subprocess.CompletedProcess[str], status: str) -> list[str]:
    return [line for line in out.stdout.splitlines() if line.startswith(status)]


def check_line(out: subprocess.CompletedProcess[str], status: str, name: str) -> str:
    found = [
        line
        for line in lines(out, status)
        if line.split()[1 : 1 + len(name.split())] == name.split()
    ]
    assert len(found) == 1, out.stdout
    return found[0]


class StubSMTP:
    """An SMTPS listener on loopback presenting ``cert``, whose greeting carries the date
    ``offset`` seconds from now, and which accepts any login: what a server with a wrong
    clock or a bad certificate shows the doctor."""

    def __init__(self, cert: Path, key: Path, offset: float = 0.0) -> None:
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert, key)
        self._offset = offset
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(10)
        try:
            with self._context.wrap_socket(raw, server_side=True) as conn:
                date = email.utils.formatdate(time.time() + self._offset, usegmt=True)
                conn.sendall(f"220 stub.example ESMTP ready at {date}\r\n".encode())
                reader = conn.makefile("rb")
                for line in reader:
                    verb = line.split(b" ", 1)[0].strip().upper()
                    if verb == b"EHLO":
                        conn.sendall(b"250-stub.example\r\n250 AUTH PLAIN LOGIN\r\n")
                    elif verb == b"AUTH":
                        conn.sendall(b"235 2.7.0 accepted\r\n")
                    elif verb == b"QUIT":
                        conn.sendall(b"221 bye\r\n")
                        return
                    else:
                        conn.sendall(b"250 ok\r\n")
        except (OSError, ssl.SSLError):
            return  # the doctor's TCP check, or a client that refused the certificate

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def stub(mailserver: MailServer, tmp_path: Path) -> Iterator[Callable[..., StubSMTP]]:
    made: list[StubSMTP] = []

    def make(*, offset: float = 0.0, **certificate: Any) -> StubSMTP:
        cert, key = mailserver.issue_certificate(tmp_path / f"cert{len(made)}", **certificate)
        made.append(StubSMTP(cert, key, offset))
        return made[-1]

    yield make
    for server in made:
        server.close()


def stub_config(mailserver: MailServer, account: str, path: Path, port: int) -> Path:
    config = mailserver.config(account)
    config["user"]["url-smtp"] = f"smtps://127.0.0.1:{port}"
    return write_config(path, config)


@pytest.mark.parametrize("tls", [True, False], ids=["implicit-tls", "starttls"])
def test_every_check_passes_on_a_sound_account(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path, tls: bool
) -> None:
    """Every check passes, with a folder named by its role (``move:\\Archive``: the
    server's ``Archiv``) and a day's budget (none of it used yet)."""
    settings = {"on-receive": "move:\\Archive", "limits": {"emails-per-day": 100}}
    config = write_config(tmp_path / "email.yml",
                          mailserver.config(account(), tls=tls, **settings))  # fmt: skip
    os.chmod(config, 0o600)
    out = doctor(config)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1].startswith("All ")
    mode = "implicit" if tls else "starttls"
    assert f"{mode} TLS, chain and host name verified" in check_line(out, "PASS", "imap tls")
    assert "INTERNALDATE" in check_line(out, "PASS", "clock")
    assert "\\Archive is the server's 'Archiv'" in check_line(out, "PASS", "imap roles")
    assert "IDLE, MOVE, UIDPLUS and SPECIAL-USE" in check_line(out, "PASS", "imap features")
    assert "0 of 100 emails in the last 24 h" in check_line(out, "PASS", "sending")
    for name in ("smtp login", "imap login", "imap folders", "imap quota", "graph", "spool"):
        check_line(out, "PASS", name)


def test_a_wrong_password_fails_both_logins_and_is_never_printed(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> None:
    config = mailserver.config(account())
    wrong = "Wr0ng-pass-7f3a"
    config["user"]["password"] = wrong
    path = write_config(tmp_path / "email.yml", config)
    out = doctor(path)
    assert out.returncode == 1
    for name in ("smtp login", "imap login"):
        assert "check email.user.username and email.user.password" in check_line(out, "FAIL", name)
    report = doctor(path, "--report")
    secrets = [wrong, base64.b64encode(wrong.encode()).decode(), wrong.encode().hex()]
    user = config["user"]["username"]
    secrets.append(base64.b64encode(f"\0{user}\0{wrong}".encode()).decode())
    for text in (out.stdout, out.stderr, report.stdout, report.stderr):
        for secret in secrets:
            assert secret not in text
    assert user not in report.stdout  # the report shows the domain alone
    assert "user: <redacted>@example.test" in report.stdout


def test_an_expired_certificate_from_the_test_ca_fails(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path, stub: Any
) -> None:
    server = stub(valid_from_days=-30, valid_until_days=-1)
    out = doctor(stub_config(mailserver, account(), tmp_path / "email.yml", server.port))
    assert out.returncode == 1
    assert "expired on" in check_line(out, "FAIL", "smtp certificate")
    assert "certificate has expired" in check_line(out, "FAIL", "smtp tls")
    assert not [line for line in out.stdout.splitlines() if "smtp login" in line]


def test_a_certificate_for_another_name_fails_with_the_names_it_has(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path, stub: Any
) -> None:
    server = stub(names=("other.example",))
    out = doctor(stub_config(mailserver, account(), tmp_path / "email.yml", server.port))
    assert out.returncode == 1
    line = check_line(out, "FAIL", "smtp tls")
    assert "the certificate is for other.example, not 127.0.0.1" in line
    check_line(out, "PASS", "smtp certificate")  # its dates are fine


def test_a_server_clock_five_minutes_off_fails(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path, stub: Any
) -> None:
    server = stub(offset=300)
    out = doctor(stub_config(mailserver, account(), tmp_path / "email.yml", server.port))
    assert out.returncode == 1
    line = check_line(out, "FAIL", "clock")
    assert "s behind the server (by the SMTP greeting)" in line
    assert float(line.split(" is ")[1].split(" s ")[0]) == pytest.approx(300, abs=3)
    check_line(out, "PASS", "smtp login")
    in_step = stub(offset=0)
    out = doctor(stub_config(mailserver, account(), tmp_path / "ok.yml", in_step.port))
    check_line(out, "PASS", "clock")


def test_a_world_readable_key_fails_until_fixed(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> None:
    store = emailmw.Keystore.create(tmp_path / "keystore")
    store.create_key("robot")
    security = {"keystore": str(store.path), "identity": "robot"}
    path = write_config(tmp_path / "email.yml", mailserver.config(account(), security=security))
    key = store.path / "private" / "robot.pem"
    os.chmod(key, 0o644)
    out = doctor(path)
    assert out.returncode == 1
    assert f"run 'chmod 600 {key}'" in check_line(out, "FAIL", "keystore")
    os.chmod(key, 0o600)
    out = doctor(path)
    assert "identity robot" in check_line(out, "PASS", "keystore")


def test_incompatible_qos_in_the_graph_warns(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> None:
    address = account()
    config = write_config(tmp_path / "email.yml", mailserver.config(address))
    with emailmw.Context(config) as ctx:
        talker = emailmw.Node("talker", context=ctx, announce_period=60)
        talker.create_publisher(
            std_msgs.msg.String,
            "/scan",
            QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT),
        )
        listener = emailmw.Node("listener", context=ctx, announce_period=60)
        listener.create_subscription(std_msgs.msg.String, "/scan", lambda _: None, 10)
        round_trip(ctx, 30)
        out = doctor(config)
    line = check_line(out, "WARN", "graph")
    assert "/scan: publisher /talker and subscription /listener" in line
    assert "Best effort publisher and reliable subscription" in line
    assert out.returncode == 0  # a warning
    assert doctor(config, "--include-warnings").returncode == 1
