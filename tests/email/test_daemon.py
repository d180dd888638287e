"""The graph daemon (``emailmw daemon``, ros2's): the command line hands it the verbs that
read the graph or ask a node, and it answers from its open connection and the graph in
memory, the same as without it; the first use starts it; a killed daemon, or a changed
configuration, never stops a command from answering."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import emailmw
from emailmw import example_interfaces, std_msgs
from emailmw._cli.quick import daemon_socket
from emailmw._core.config import load_options
from emailmw.executors import SingleThreadedExecutor
from emailmw.testing.mailserver import MailServer

from ..helpers import connections_held_elsewhere, round_trip
from .helpers import write_config
from .test_cli_ros2 import complete

VERBS = [
    ("topic", "list"),
    ("topic", "info", "-v", "/chatter"),
    ("node", "list"),
    ("param", "get", "/talker", "speed"),
    ("service", "call", "/add_two_ints", "example_interfaces/srv/AddTwoInts", "{a: 2, b: 3}"),
]


def _cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EMAILMW_NO_DAEMON"}
    return subprocess.run([sys.executable, "-m", "emailmw", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=env)  # fmt: skip


def _served(config: Path) -> int | None:
    """How many verbs the daemon ran (None: none runs)."""
    out = _cli(config, "daemon", "status")
    if "is running" not in out.stdout:
        return None
    return int(out.stdout.split(", ")[1].split()[0])


def _wait_running(config: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _served(config) is None:
        assert time.monotonic() < deadline, "no daemon started"
        time.sleep(0.2)


@pytest.fixture
def talker(mailserver: MailServer, account: Callable[[], str], tmp_path: Path) -> Iterator[Path]:
    """A spun node ``/talker`` (a parameter, a publisher, a service); the CLI's config of
    the same account. The daemon is stopped afterwards."""
    config = write_config(tmp_path / "email.yml", mailserver.config(account()))
    ctx = emailmw.Context(config)
    node = emailmw.Node("talker", context=ctx, announce_period=60)
    node.declare_parameter("speed", 3)
    node.create_publisher(std_msgs.msg.String, "/chatter", 10)

    def add(request: Any, response: Any) -> Any:
        response.sum = request.a + request.b
        return response

    node.create_service(example_interfaces.srv.AddTwoInts, "/add_two_ints", add)
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    round_trip(ctx, 30)
    yield config
    _cli(config, "daemon", "stop")
    executor.shutdown()
    ctx.shutdown()
    spinner.join(10)


def test_the_daemon_answers_as_the_mailbox_does(talker: Path) -> None:
    """Each verb prints the same with the daemon as without it, and the daemon ran each
    (its count); start, status and stop say what ros2 daemon says."""
    direct = {verb: _cli(talker, "--no-daemon", *verb) for verb in VERBS}
    for verb, out in direct.items():
        assert out.returncode == 0, (verb, out.stderr)
    assert "/chatter" in direct[VERBS[0]].stdout
    assert _cli(talker, "daemon", "start").stdout == "The daemon has been started\n"
    assert _cli(talker, "daemon", "start").stdout == "The daemon is already running\n"
    for verb in VERBS:
        out = _cli(talker, *verb)
        assert (out.returncode, out.stdout) == (0, direct[verb].stdout), verb
    assert _served(talker) == len(VERBS)
    mistake = _cli(talker, "topic", "info", "/nothing")
    assert mistake.returncode == 1
    assert mistake.stderr.startswith("emailmw: error: ")
    assert _cli(talker, "daemon", "stop").stdout == "The daemon has been stopped\n"
    assert _cli(talker, "daemon", "status").stdout == "The daemon is not running\n"


def test_the_first_use_starts_it_and_a_killed_or_outdated_one_is_replaced(talker: Path) -> None:
    """No daemon: the command answers the usual way and starts one. Killed (SIGKILL: its
    socket left behind): the command still answers and a new one starts. The
    configuration changed: the old one ends and the command still answers."""
    first = _cli(talker, "topic", "list")
    assert first.returncode == 0
    assert "/chatter" in first.stdout
    _wait_running(talker)
    pid = int(_cli(talker, "daemon", "status").stdout.split("pid ")[1].split(",")[0])
    os.kill(pid, signal.SIGKILL)
    assert daemon_socket(talker.resolve()).exists()  # (left behind)
    again = _cli(talker, "topic", "list")
    assert (again.returncode, again.stdout) == (0, first.stdout)
    _wait_running(talker)
    talker.write_text(talker.read_text() + "\n# edited\n")
    edited = _cli(talker, "topic", "list")
    assert (edited.returncode, edited.stdout) == (0, first.stdout)


def test_completion_asks_the_daemon_for_names_and_a_node_s_parameters(talker: Path) -> None:
    """With the daemon, the shell's completion takes topic and node names from its memory
    and a node's parameter names from the node (asked by the daemon); without it, no
    parameter names (a login and a call would not fit in the second it has)."""
    assert complete("emailmw param get /talker s", talker) == []
    assert _cli(talker, "daemon", "start").returncode == 0
    assert complete("emailmw topic echo /ch", talker) == ["/chatter"]
    assert complete("emailmw param get /t", talker) == ["/talker"]
    assert complete("emailmw param get /talker s", talker) == ["speed"]


def test_a_daemon_started_on_a_full_account_answers_once_a_connection_is_free(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> None:
    """#58 item 2: while another process holds every connection the account allows, the
    daemon starts all the same and a command through it is one line naming
    max-connections; once that process ends (SIGKILL), the daemon answers (was: 'the
    daemon did not answer within 60 s', the daemon ended at its first graph read)."""
    address = account()
    settings = mailserver.config(address, limits={"max-connections": 2}, timeout=2)
    config = write_config(tmp_path / "email.yml", settings)
    user = load_options({"email": settings}).user
    assert user is not None
    try:
        with connections_held_elsewhere(address, user.imap.url, 2, 2) as holder:
            assert _cli(config, "daemon", "start").stdout == "The daemon has been started\n"
            full = _cli(config, "topic", "list")
            assert full.returncode == 1
            assert full.stderr.count("\n") == 1
            assert "max-connections (2)" in full.stderr
            holder.kill()  # its connections given back by the kernel
            deadline = time.monotonic() + 60
            while (listed := _cli(config, "topic", "list")).returncode != 0:
                assert time.monotonic() < deadline, listed.stderr
                time.sleep(0.5)
            assert (_served(config) or 0) >= 2  # (the daemon ran them)
    finally:
        _cli(config, "daemon", "stop")


@pytest.mark.mailserver
def test_a_daemon_ends_once_its_account_is_unreachable_for_a_while(tmp_path: Path) -> None:
    """(#60: daemons served a stale graph up to 2 h after their server was gone) The
    account's IMAP server stops under a running daemon (a server of its own): it ends
    after --unreachable-timeout, saying why, and nothing answers for it any more."""
    import shutil
    import tempfile

    state = Path(tempfile.mkdtemp(prefix="emailmw-gone-", dir="/tmp"))
    server = MailServer(state_dir=state, domain="gone.test", pool_size=5)
    server.start(fresh=True)
    try:
        config = write_config(tmp_path / "email.yml", server.config(server.fresh_account()))
        env = {k: v for k, v in os.environ.items() if k != "EMAILMW_NO_DAEMON"}
        daemon = subprocess.Popen(
            [sys.executable, "-m", "emailmw", "--config", str(config), "daemon", "serve",
             "--unreachable-timeout", "3"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            _wait_running(config)
            server.stop_dovecot()
            _, said = daemon.communicate(timeout=90)
            assert daemon.returncode == 0
            assert "emailmw daemon: the account has been unreachable for" in said
            assert said.rstrip().endswith(": ending")
            assert _served(config) is None
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait(10)
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)
