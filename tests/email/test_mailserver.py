"""The project's mail server helper: it runs beside any other server on the machine."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from emailmw.testing.mailserver import MailServer, free_ports

pytestmark = pytest.mark.mailserver


@pytest.fixture
def state_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="emailmw-ms-", dir="/tmp") as path:
        yield Path(path)


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emailmw.testing.mailserver", "--state", str(state), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_second_server_takes_free_ports_and_the_command_line_says_which(
    mailserver: MailServer, state_dir: Path
) -> None:
    """The test run's server is up; another one with no ports given starts beside it on
    ports of its own, and ``status``/``config`` in another process print those ports."""
    second = MailServer(state_dir=state_dir, pool_size=2)
    with second:
        assert second.running()
        assert all(second.ports.values())
        assert not set(second.ports.values()) & set(mailserver.ports.values())
        status = cli(state_dir, "status")
        assert status.returncode == 0, status.stderr
        for name, port in second.ports.items():
            assert f"{name.removesuffix('_port')}={port}" in status.stdout
        config = yaml.safe_load(cli(state_dir, "config", "alice").stdout)["email"]
        assert config["user"]["url-smtp"] == f"smtps://127.0.0.1:{second.smtps_port}"
        assert config["user"]["url-imap"] == f"imaps://127.0.0.1:{second.imaps_port}"
        # written to a file: its owner's alone (it holds the password), as doctor wants
        out = state_dir / "email.yml"
        assert cli(state_dir, "config", "alice", "--out", str(out)).returncode == 0
        assert out.stat().st_mode & 0o777 == 0o600
        assert yaml.safe_load(out.read_text())["email"] == config
    assert cli(state_dir, "status").returncode == 3


def test_config_of_a_server_not_running_is_a_one_line_error(state_dir: Path) -> None:
    result = cli(state_dir, "config", "alice")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "start it first" in result.stderr


def test_ports_given_on_the_command_line_are_used(mailserver: MailServer, state_dir: Path) -> None:
    wanted = free_ports(4)
    names = ("smtp", "smtps", "imap", "imaps")
    flags = [f"--{name}-port={port}" for name, port in zip(names, wanted, strict=True)]
    started = cli(state_dir, "start", *flags)
    try:
        assert started.returncode == 0, started.stderr
        for port in wanted:
            assert f":{port}" in started.stdout
    finally:
        cli(state_dir, "stop")


def test_postfix_starts_again_after_a_cleanup_process_died_mid_write() -> None:
    """Stopped while a message came in, Postfix's cleanup left its half-written file in
    ``incoming/``; the next start's queue check warns of the name and, unable to write the
    maillog as the mail owner, failed the start ("Postfix integrity check failed!": a
    reliability test stopped and started Postfix under load). It starts."""
    state = Path(f"/tmp/emailmw-pf-{uuid.uuid4().hex[:8]}")  # the daemons must traverse it
    server = MailServer(state_dir=state).start()
    try:
        server.stop_postfix()
        incoming = server.state_dir / "postfix" / "spool" / "incoming"
        left = incoming / "503354.18118"  # cleanup's temporary name: inode.pid
        left.write_bytes(b"")
        subprocess.run(["chown", "postfix:postfix", str(left)], check=True)
        server.start_postfix()
        assert "bogus file name" in (server.state_dir / "postfix" / "maillog").read_text()
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)


_START_AND_SELECT = """
import ssl, sys, tempfile, time
from pathlib import Path
import imapclient
from emailmw.testing.mailserver import MailServer
server = MailServer(state_dir=Path(tempfile.mkdtemp(prefix="emailmw-user-", dir="/tmp")),
                    vmail_user=sys.argv[1], pool_size=2)
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # (all four at one moment)
with server:
    client = imapclient.IMAPClient(
        "127.0.0.1", port=server.imaps_port, ssl=True,
        ssl_context=ssl.create_default_context(cafile=str(server.ca_file)))
    client.login(server.fresh_account(), "secret")
    print(client.select_folder("INBOX")[b"UIDVALIDITY"])
"""


def test_servers_started_at_once_on_a_fresh_machine_all_serve_their_mailboxes(
    mailserver: MailServer,
) -> None:
    """Four servers started at the same moment by four processes (the suite's workers on a
    fresh machine), none finding the mail user they run as: each makes or waits for it,
    and every mailbox opens (was: a server that read the user while another made it chowned
    its mail folder to another gid than Dovecot's, and every SELECT was [SERVERBUG]; the
    others' useradd failed with 'already exists'; 2 of 4 servers in one of 6 tries)."""
    del mailserver  # (started first: it checks that servers can run here)
    user = f"emt{uuid.uuid4().hex[:8]}"
    try:
        command = [sys.executable, "-c", _START_AND_SELECT, user, str(time.time() + 5)]
        runs = [
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(4)
        ]
        results = [run.communicate(timeout=180) for run in runs]
        assert [run.returncode for run in runs] == [0] * 4, [err[-600:] for _, err in results]
    finally:
        subprocess.run(["userdel", user], capture_output=True, check=False)
        subprocess.run(["groupdel", user], capture_output=True, check=False)
