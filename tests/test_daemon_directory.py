"""Another local user cannot steer the graph daemon's files (#59): a user who makes the
victim's daemon directory first, with a link named as the daemon's log and a socket named
as its socket, gets nothing written through the link and is never believed. The victim is
a plain user (its directory under ``/tmp``: refused in one line, nothing written) or root
(its daemons live in ``/run``, which no other user can write to: the plant is not even
looked at; its daemon serves an account of the run's mail server). Two real users of this
machine."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from emailmw.testing.mailserver import MailServer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes two users of this machine")

#: run the command line as another user: every module it needs is imported first (this
#: machine's interpreter lives under /root, which another user cannot read), then the
#: process becomes that user and runs it
AS_USER = """
import contextlib, hashlib, io, json, os, pwd, socket, stat, subprocess, sys
import emailmw._cli as cli
uid, argv = int(sys.argv[1]), json.loads(sys.argv[2])
cli.parser(argv)  # (the command's modules, imported while they may be read)
import emailmw._cli.daemon, emailmw._cli.quick, emailmw._cli.common
if uid:
    os.setgroups([])
    os.setgid(pwd.getpwuid(uid).pw_gid)
    os.setuid(uid)
os.environ.pop("XDG_RUNTIME_DIR", None)
sys.exit(cli.main(argv, daemon=False))
"""

#: the attacker, as its own user: the victim's directory made first, a link named as the
#: daemon's log towards a file of the attacker's, and a socket that answers every ping
PLANT = """
import json, os, pwd, socket, sys
uid, directory, log, sock, target = int(sys.argv[1]), *sys.argv[2:6]
os.setgroups([])
os.setgid(pwd.getpwuid(uid).pw_gid)
os.setuid(uid)
os.makedirs(directory, mode=0o755, exist_ok=True)
os.chmod(os.path.dirname(directory), 0o755)
os.symlink(target, os.path.join(directory, log))
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(os.path.join(directory, sock))
listener.listen(8)
print("planted", flush=True)
while True:
    connection, _ = listener.accept()
    connection.recv(65536)
    connection.sendall(json.dumps({"status": 0, "pid": "THE ATTACKER", "served": 666}).encode())
    connection.close()
"""


def _user(name: str) -> Iterator[pwd.struct_passwd]:
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)  # fmt: skip
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture
def attacker() -> Iterator[pwd.struct_passwd]:
    yield from _user(f"emta{uuid.uuid4().hex[:6]}")


@pytest.fixture
def victim() -> Iterator[pwd.struct_passwd]:
    yield from _user(f"emtv{uuid.uuid4().hex[:6]}")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may reach (pytest's own is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="emailmw-users-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _account(directory: Path, owner: int) -> Path:
    """An in-process account's configuration, readable by ``owner``."""
    config = directory / "email.yml"
    config.write_text("email:\n  intraprocess: true\n")
    os.chown(config, owner, -1)
    config.chmod(0o600)
    return config


def _cli(uid: int, config: Path, *verb: str) -> subprocess.CompletedProcess[str]:
    argv = ["--config", str(config), "daemon", *verb]
    return subprocess.run([sys.executable, "-c", AS_USER, str(uid), json.dumps(argv)],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={k: v for k, v in os.environ.items()
                               if k != "XDG_RUNTIME_DIR"})  # fmt: skip


def _plant(
    attacker: pwd.struct_passwd, base: str, config: Path, target: Path
) -> subprocess.Popen[str]:
    digest = hashlib.sha256(str(config.resolve()).encode()).hexdigest()[:16]
    planted = subprocess.Popen(
        [sys.executable, "-c", PLANT, str(attacker.pw_uid), f"{base}/emailmw",
         f"daemon-{digest}.log", f"daemon-{digest}.sock", str(target)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert planted.stdout is not None
    assert planted.stdout.readline().strip() == "planted", planted.stderr
    return planted


@pytest.fixture
def target(shared: Path, attacker: pwd.struct_passwd) -> Path:
    """A file of the attacker's that a followed link would chmod and append to."""
    found = shared / "attackers-file"
    found.write_text("the attacker's\n")
    os.chown(found, attacker.pw_uid, attacker.pw_gid)
    found.chmod(0o644)
    return found


def test_a_plain_user_s_daemon_refuses_a_directory_another_user_made(
    shared: Path, attacker: pwd.struct_passwd, victim: pwd.struct_passwd
) -> None:
    config = _account(shared, victim.pw_uid)
    target = shared / "victims-file"  # (what the link points at: a file of the victim's)
    target.write_text("the attacker's\n")
    os.chown(target, victim.pw_uid, victim.pw_gid)
    target.chmod(0o644)
    base = f"/tmp/emailmw-{victim.pw_uid}"
    planted = _plant(attacker, base, config, target)
    try:
        for verb in ("start", "status", "stop"):
            done = _cli(victim.pw_uid, config, verb)
            assert done.returncode == 1, (verb, done.stdout, done.stderr)
            assert done.stderr.count("\n") == 1, done.stderr
            assert done.stderr.startswith(f"emailmw: error: {base}/emailmw (or the directory")
            assert "THE ATTACKER" not in done.stdout + done.stderr
        assert target.read_text() == "the attacker's\n"
        assert target.stat().st_mode & 0o777 == 0o644  # (not chmodded through the link)
    finally:
        planted.kill()
        planted.wait()
        shutil.rmtree(base, ignore_errors=True)


def test_root_s_daemon_lives_where_no_other_user_can_plant(
    shared: Path, attacker: pwd.struct_passwd, target: Path, mailserver: MailServer
) -> None:
    config = shared / "root.yml"
    config.touch(mode=0o600)
    config.write_text(yaml.safe_dump({"email": mailserver.config(mailserver.fresh_account())}))
    base = "/tmp/emailmw-0"
    aside = Path(f"{base}.aside-{uuid.uuid4().hex[:6]}")
    if os.path.lexists(base):  # (root's own, from before its daemons lived in /run)
        os.rename(base, aside)
    planted = _plant(attacker, base, config, target)
    try:
        started = _cli(0, config, "start")
        assert started.returncode == 0, started.stderr
        running = _cli(0, config, "status")
        assert "The daemon is running (pid" in running.stdout, running.stderr
        assert "THE ATTACKER" not in running.stdout
        assert _cli(0, config, "stop").returncode == 0
        assert target.read_text() == "the attacker's\n"
        assert target.stat().st_mode & 0o777 == 0o644
    finally:
        planted.kill()
        planted.wait()
        shutil.rmtree(base, ignore_errors=True)
        if os.path.lexists(aside):
            os.rename(aside, base)
