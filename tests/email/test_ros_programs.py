"""ROS 2 tutorial programs, as rclpy users write them (``rclpy_programs/``), ported by the
rule of docs/ros-users.md alone (``rclpy`` -> ``emailmw``, message packages prefixed) and
run as separate processes over the local mail server, all on one account (one mailbox is
one ROS domain). Each asserts what the program prints, and that it ends cleanly: no
traceback from emailmw, its exit status 0.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from emailmw.action_msgs.msg import GoalStatus
from emailmw.testing.mailserver import MailServer
from tests.helpers import Recorder

from .helpers import write_config

PROGRAMS = Path(__file__).with_name("rclpy_programs")
PACKAGES = ("std_msgs", "example_interfaces", "geometry_msgs", "builtin_interfaces",
            "rcl_interfaces", "action_msgs", "unique_identifier_msgs")  # fmt: skip


def port(source: str) -> str:
    """The mechanical change of docs/ros-users.md: the token ``rclpy`` becomes
    ``emailmw``, and message packages gain the ``emailmw.`` prefix."""
    text = re.sub(r"\brclpy\b", "emailmw", source)
    packages = "|".join(PACKAGES)
    return re.sub(rf"^(\s*)(from|import) ({packages})\b", r"\1\2 emailmw.\3", text, flags=re.M)


class Program:
    """A ported program running as a process; its output lines (stdout and stderr) are
    recorded as they come."""

    def __init__(self, name: str, config: Path, workdir: Path, *args: str) -> None:
        ported = workdir / f"{name}.py"
        ported.write_text(port((PROGRAMS / f"{name}.py").read_text()))
        env = {**os.environ, "EMAILMW_CONFIG_FILE": str(config), "PYTHONUNBUFFERED": "1"}
        self.name = name
        self.lines = Recorder[str]()
        self.stderr: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, str(ported), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=workdir,
        )
        self._readers = [
            threading.Thread(target=self._read, args=(stream, keep), daemon=True)
            for stream, keep in ((self.process.stdout, None), (self.process.stderr, self.stderr))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, keep: list[str] | None) -> None:
        for line in stream:
            if keep is not None:
                keep.append(line)
            self.lines(line.rstrip("\n"))

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 60) -> list[str]:
        """The first ``count`` lines matching ``pattern``, waiting for them."""
        found = re.compile(pattern)

        def enough(items: list[str]) -> bool:
            return len([i for i in items if found.search(i)]) >= count

        assert self.lines.wait_for(enough, timeout), (
            f"{self.name}: {count} lines like {pattern!r} within {timeout} s; it said:\n"
            + "\n".join(i for i in self.lines.items if "Hello world" not in i)
        )
        return [i for i in self.lines.items if found.search(i)][:count]

    def stop(self, signum: int = signal.SIGINT, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.wait(timeout)

    def wait(self, timeout: float = 60) -> int:
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(10)
        return code

    def assert_clean(self, code: int) -> None:
        text = "".join(self.stderr)
        assert "Traceback" not in text, f"{self.name}:\n{text}"
        assert code == 0, f"{self.name} ended with {code}:\n{text}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def run(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> Iterator[Callable[..., Program]]:
    """Start ported programs on one fresh account; every one is killed at the end."""
    config = write_config(tmp_path / "email.yml", mailserver.config(account()))
    started: list[Program] = []

    def start(name: str, *args: str) -> Program:
        program = Program(name, config, tmp_path, *args)
        started.append(program)
        return program

    yield start
    for program in started:
        program.kill()


def test_the_rule_is_mechanical() -> None:
    source = "import rclpy\nfrom rclpy.node import Node\nfrom std_msgs.msg import String\n"
    assert port(source) == (
        "import emailmw\nfrom emailmw.node import Node\nfrom emailmw.std_msgs.msg import String\n"
    )


def test_publisher_and_subscriber(run: Callable[..., Program]) -> None:
    listener = run("subscriber_member_function")
    talker = run("publisher_member_function")
    talker.wait_for(r'\[INFO\] \[\d+\.\d{9}\] \[minimal_publisher\]: Publishing: "Hello World: 2"')
    heard = listener.wait_for(r'\[minimal_subscriber\]: I heard: "Hello World: \d+"', count=3)
    assert all("Hello World" in line for line in heard)
    for program in (talker, listener):
        program.assert_clean(program.stop(signal.SIGINT))


def test_service_server_and_async_client(run: Callable[..., Program]) -> None:
    client = run("client_member_function", "2", "3")
    client.wait_for(r"service not available, waiting again\.\.\.")
    server = run("service_member_function")
    client.wait_for(r"Result of add_two_ints: for 2 \+ 3 = 5")
    client.assert_clean(client.wait())
    server.wait_for(r"Incoming request")
    server.assert_clean(server.stop(signal.SIGTERM))  # spin returns; main goes on and ends


def test_an_async_client_spinning_once_without_a_timeout_gets_its_response(
    run: Callable[..., Program],
) -> None:
    """The official ``client_async`` loop: ``spin_once(node)`` with no timeout returns once
    the response came (it waited forever: a response was no work for the executor)."""
    server = run("service_member_function")
    client = run("client_async")
    client.wait_for(r"Result of add_two_ints: for 41 \+ 1 = 42")
    client.assert_clean(client.wait())
    server.assert_clean(server.stop(signal.SIGTERM))


def test_a_parameter_node_set_from_another_process(run: Callable[..., Program]) -> None:
    node = run("python_parameters_node", "--ros-args", "-p", "my_parameter:=earth")
    node.wait_for(r"\[minimal_param_node\]: Hello earth!")
    node.wait_for(r"\[minimal_param_node\]: Hello world!")  # the timer set it back
    setter = run("set_parameter", "/minimal_param_node", "my_parameter", "mars")
    setter.wait_for(r"Set parameter successful: true")
    setter.assert_clean(setter.wait())
    node.wait_for(r"\[minimal_param_node\]: Hello mars!")
    node.assert_clean(node.stop(signal.SIGTERM))


def test_a_rate_loop_with_spin_in_a_thread_is_joined_after_shutdown(
    run: Callable[..., Program],
) -> None:
    loop = run("rate_loop")
    loop.wait_for(r"Help me body, you are my only hope 9")
    loop.wait_for(r"^joined$")
    loop.assert_clean(loop.wait())


def test_an_action_with_feedback_a_result_and_a_cancel(run: Callable[..., Program]) -> None:
    server = run("fibonacci_action_server", "0.2")
    done = run("fibonacci_action_client", "5", "0")
    done.wait_for(r"Received feedback: \[0, 1, 1\]")
    done.wait_for(
        rf"Result: \[0, 1, 1, 2, 3, 5\] status: {GoalStatus.STATUS_SUCCEEDED}", timeout=60
    )
    done.assert_clean(done.wait())
    cancelled = run("fibonacci_action_client", "50", "2")
    cancelled.wait_for(r"Goal successfully canceled")
    cancelled.wait_for(rf"status: {GoalStatus.STATUS_CANCELED}")
    cancelled.assert_clean(cancelled.wait())
    server.wait_for(r"Goal canceled")
    server.assert_clean(server.stop(signal.SIGINT))


def test_an_action_client_survives_its_server_killed_mid_goal(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> None:
    """The server SIGKILLed mid-goal: once its node's announcements expired (three
    ``announce-period``, 5 s here) the client calls the goal lost, ``STATUS_UNKNOWN``."""
    quick = {"announce-period": 5}
    config = write_config(tmp_path / "quick.yml", mailserver.config(account(), **quick))
    server = Program("fibonacci_action_server", config, tmp_path, "1.0")
    client = Program("fibonacci_action_client", config, tmp_path, "50", "0")
    try:
        _killed_mid_goal(server, client)
    finally:
        server.kill()
        client.kill()


def _killed_mid_goal(server: Program, client: Program) -> None:
    client.wait_for(r"Received feedback")
    server.process.send_signal(signal.SIGKILL)
    client.wait_for(r"action server /fibonacci lost: no status of goal", timeout=60)
    client.wait_for(rf"Result: \[\] status: {GoalStatus.STATUS_UNKNOWN}")
    client.assert_clean(client.wait())


def test_an_action_client_gets_the_result_of_a_server_paused_mid_goal(
    run: Callable[..., Program],
) -> None:
    """#57: the server paused (SIGSTOP) past the client's server_timeout: the client says
    so once and waits, and the result that comes once the server goes on is the goal's.
    Was: STATUS_UNKNOWN after 5 s without status, the real result lost."""
    server = run("fibonacci_action_server", "1.0")
    client = run("fibonacci_action_client", "8", "0")
    client.wait_for(r"Received feedback")
    server.process.send_signal(signal.SIGSTOP)
    try:
        client.wait_for(r"but it is still in the graph", timeout=60)
    finally:
        server.process.send_signal(signal.SIGCONT)
    client.wait_for(
        rf"Result: \[0, 1, 1, 2, 3, 5, 8, 13, 21\] status: {GoalStatus.STATUS_SUCCEEDED}",
        timeout=90,
    )
    client.assert_clean(client.wait())


def test_a_program_whose_password_is_wrong_says_it_in_one_line(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> None:
    """A wrong password (or a server it cannot reach) is a mistake in the program's setup:
    one line and status 1, as the command line says it (was: a traceback out of init())."""
    config = mailserver.config(account())
    config["user"]["password"] = "not-the-password"
    write_config(tmp_path / "email.yml", config)
    program = tmp_path / "talker.py"
    program.write_text("import emailmw\nemailmw.init()\nprint('up')\n")
    env = {**os.environ, "EMAILMW_CONFIG_FILE": str(tmp_path / "email.yml")}
    out = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                         env=env, timeout=120, check=False)  # fmt: skip
    assert (out.returncode, out.stdout) == (1, ""), out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith("emailmw: error: "), out.stderr
    assert "refused" in out.stderr, out.stderr
    assert "not-the-password" not in out.stderr
