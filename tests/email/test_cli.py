"""Every ROS-style CLI verb, run as a subprocess against the real server."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import emailmw
from emailmw import example_interfaces, std_msgs
from emailmw.testing.mailserver import MailServer

from ..helpers import round_trip
from .helpers import write_config


@pytest.fixture
def system(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """Nodes on one account: a talker, an add_two_ints server spun on a thread, and a
    config file for the CLI on the same account."""
    address = account()
    config = write_config(tmp_path / "email.yml", mailserver.config(address))
    ctx = emailmw.Context(config)
    talker = emailmw.Node("talker", context=ctx, announce_period=60)
    pub = talker.create_publisher(std_msgs.msg.String, "/chatter")

    def add(request: Any, response: Any) -> Any:
        response.sum = request.a + request.b
        return response

    server = emailmw.Node("add_two_ints_server", context=ctx, announce_period=60)
    server.create_service(example_interfaces.srv.AddTwoInts, "/add_two_ints", add)
    listener = emailmw.Subscription("/chatter", context=ctx)
    executor = emailmw.SingleThreadedExecutor()
    executor.add_node(server)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    # the announcements are in the mailbox once a later message has come back
    round_trip(ctx, 30)
    yield {"config": config, "pub": pub, "ctx": ctx, "listener": listener}
    executor.shutdown()
    ctx.shutdown()
    spinner.join(10)


def cli(config: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emailmw", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_node_list_and_info(system: dict[str, Any]) -> None:
    out = cli(system["config"], "node", "list")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["/add_two_ints_server", "/talker"]
    info = cli(system["config"], "node", "info", "/talker")
    assert "Publishers:" in info.stdout
    assert "/chatter: std_msgs/msg/String" in info.stdout
    missing = cli(system["config"], "node", "info", "/nobody")
    assert missing.returncode == 1
    assert missing.stderr.startswith("emailmw: error:")


def test_topic_list_info_and_service_list(system: dict[str, Any]) -> None:
    out = cli(system["config"], "topic", "list", "-t")
    assert out.stdout.strip() == "/chatter [std_msgs/msg/String]"
    info = cli(system["config"], "topic", "info", "/chatter")
    assert "Type: std_msgs/msg/String" in info.stdout
    assert "Publisher count: 1" in info.stdout
    services = cli(system["config"], "service", "list", "-t")
    assert services.stdout.strip() == "/add_two_ints [example_interfaces/srv/AddTwoInts]"


def test_service_call(system: dict[str, Any]) -> None:
    out = cli(
        system["config"],
        "service",
        "call",
        "/add_two_ints",
        "example_interfaces/srv/AddTwoInts",
        "{a: 2, b: 3}",
        "--timeout",
        "60",
    )
    assert out.returncode == 0, out.stderr
    assert "sum: 5" in out.stdout


def test_topic_pub(system: dict[str, Any]) -> None:
    out = cli(
        system["config"],
        "topic",
        "pub",
        "/chatter",
        "std_msgs/msg/String",
        "data: from the cli",
        "--once",
    )
    assert out.returncode == 0, out.stderr
    got = emailmw.wait_for_message(system["listener"], 30)
    assert got is not None
    assert "data: from the cli" in got


def _while_running(process: subprocess.Popen[str], action: Callable[[], None]) -> str:
    stop = threading.Event()

    def keep_publishing() -> None:
        while not stop.wait(0.2):
            action()

    thread = threading.Thread(target=keep_publishing, daemon=True)
    thread.start()
    try:
        out, err = process.communicate(timeout=120)
    finally:
        stop.set()
        thread.join()
    assert process.returncode == 0, err
    return out


@pytest.mark.parametrize(
    ("verb", "extra", "expected"),
    [
        ("echo", ["--once"], "data: tick"),
        ("echo", ["--once", "--field", "data"], "tick\n---"),
        ("hz", ["--count", "3"], "average rate:"),
        ("bw", ["--count", "3"], "B/s from 3"),
    ],
)
def test_topic_echo_hz_bw(
    system: dict[str, Any], verb: str, extra: list[str], expected: str
) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emailmw",
            "--config",
            str(system["config"]),
            "topic",
            verb,
            "/chatter",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out = _while_running(process, lambda: system["pub"].publish(std_msgs.msg.String("tick")))
    assert expected in out


def test_interface_show_and_list_and_errors(tmp_path: Path) -> None:
    show = cli(tmp_path / "unused.yml", "interface", "show", "std_msgs/msg/String")
    assert show.stdout.strip() == "str data"
    listing = cli(tmp_path / "unused.yml", "interface", "list")
    assert "example_interfaces/srv/AddTwoInts" in listing.stdout.split()
    bad = cli(tmp_path / "unused.yml", "interface", "show", "no/msg/Such")
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr
    usage = cli(tmp_path / "unused.yml", "topic", "frobnicate")
    assert usage.returncode == 2
