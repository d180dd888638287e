"""Every ROS-style CLI verb, run as a subprocess against the real server."""

from __future__ import annotations

import os
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

from ..helpers import Recorder, round_trip
from .helpers import cli, write_config


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
    # (each node's parameter services are listed too, as ros2 lists them)
    assert "/add_two_ints [example_interfaces/srv/AddTwoInts]" in services.stdout.splitlines()
    assert "/talker/set_parameters [rcl_interfaces/srv/SetParameters]" in services.stdout


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
    out, err = _communicate_while(process, action)
    assert process.returncode == 0, err
    return out


def _communicate_while(
    process: subprocess.Popen[str], action: Callable[[], None]
) -> tuple[str, str]:
    """``process``' output, doing ``action`` every 0.2 s until it exits."""
    stop = threading.Event()

    def keep_publishing() -> None:
        while not stop.wait(0.2):
            action()

    thread = threading.Thread(target=keep_publishing, daemon=True)
    thread.start()
    try:
        return process.communicate(timeout=120)
    finally:
        stop.set()
        thread.join()


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
    assert show.stdout.strip() == "string data"  # ROS's type names, as ros2 prints them
    listing = cli(tmp_path / "unused.yml", "interface", "list")
    assert "example_interfaces/srv/AddTwoInts" in listing.stdout.split()
    bad = cli(tmp_path / "unused.yml", "interface", "show", "no/msg/Such")
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr
    usage = cli(tmp_path / "unused.yml", "topic", "frobnicate")
    assert usage.returncode == 2


def test_relative_names_resolve_as_a_node_in_the_root_namespace(system: dict[str, Any]) -> None:
    """``chatter`` is ``/chatter`` for every verb, as for ``topic pub`` (and ros2)."""
    info = cli(system["config"], "topic", "info", "chatter")
    assert info.returncode == 0, info.stderr
    assert "std_msgs/msg/String" in info.stdout
    call = cli(system["config"], "service", "call", "add_two_ints", _ADD, "{a: 2, b: 3}")
    assert call.returncode == 0, call.stderr
    assert "sum: 5" in call.stdout
    echo = _popen(system["config"], "topic", "echo", "chatter", "--once")
    out = _while_running(echo, lambda: system["pub"].publish(std_msgs.msg.String("rel")))
    assert "data: rel" in out


_ADD = "example_interfaces/srv/AddTwoInts"


def _popen(config: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "emailmw", *args, "--config", str(config)],  # after the verb
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_echo_of_a_topic_nobody_publishes_warns_and_waits(system: dict[str, Any]) -> None:
    process = _popen(system["config"], "topic", "echo", "/nobody/here")
    lines = Recorder[str]()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines(line.strip())

    threading.Thread(target=read, daemon=True).start()
    try:
        got = lines.wait_count(1, timeout=60)
        assert got[0] == "WARNING: topic [/nobody/here] does not appear to be published yet"
        assert process.poll() is None  # still waiting for messages, as ros2 topic echo does
    finally:
        process.kill()
        process.wait(10)


def _one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("emailmw: error: ") or "error: argument" in lines[-1], lines
    for fragment in fragments:
        assert fragment in lines[-1], lines


def test_user_mistakes_are_one_line_errors(system: dict[str, Any]) -> None:
    config = system["config"]
    _one_line_error(
        cli(config, "topic", "pub", "/x", _ADD, "{a: 1}", "--once"), "is a service type"
    )
    _one_line_error(cli(config, "topic", "pub", "/x", "std_msgs/msg/String", "-r", "0"), "positive")
    echo = _popen(config, "topic", "echo", "/chatter", "--once", "--field", "nosuch")
    _, stderr = _communicate_while(echo, lambda: system["pub"].publish(std_msgs.msg.String("x")))
    assert echo.returncode == 1
    assert stderr.strip().splitlines() == [
        "emailmw: error: --field: the message has no field 'nosuch' (its fields: data)"
    ]
    absent = cli(config, "service", "call", "/nobody", _ADD, "{a: 1, b: 2}", "--timeout", "2")
    _one_line_error(absent, "'/nobody'", "emailmw service list")


def test_yaml_mistakes_say_where_in_one_line(tmp_path: Path) -> None:
    """In a config file and in a message's values: ``file:line:col: what is wrong``."""
    config = tmp_path / "email.yml"
    config.write_text("email:\n  host: [a\n")
    bad_config = cli(config, "node", "list")
    assert bad_config.returncode == 1
    assert bad_config.stderr.splitlines() == [
        f"emailmw: error: {config}:3:1: expected ',' or ']', but got '<stream end>' "
        "(while parsing a flow sequence)"
    ]
    bad_values = cli(config, "topic", "pub", "/x", "std_msgs/msg/String", "{data: [")
    assert bad_values.returncode == 1
    assert bad_values.stderr.splitlines() == [
        "emailmw: error: VALUES:1:9: expected the node content, but found '<stream end>' "
        "(while parsing a flow node)"
    ]


def test_echo_into_a_pipe_that_closes_ends_quietly(system: dict[str, Any]) -> None:
    command = (
        f"set -o pipefail; {sys.executable} -m emailmw --config {system['config']} "
        "topic echo /chatter | head -2"
    )
    process = subprocess.Popen(
        ["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out = _while_running(process, lambda: system["pub"].publish(std_msgs.msg.String("p")))
    assert out.splitlines() == ["data: p", "---"]


def test_a_verb_without_a_mail_account_says_how_to_configure_one(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("EMAILMW_CONFIG_FILE", "EMAIL_CONFIG_FILE")
    }
    env["HOME"] = str(tmp_path)
    for args in (
        ["topic", "pub", "/chatter", "std_msgs/msg/String", "data: lost", "--once"],
        ["service", "call", "/add_two_ints", _ADD, "{a: 1, b: 2}"],
        ["topic", "echo", "/chatter"],
        ["node", "list"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "emailmw", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
            env=env,
        )
        _one_line_error(result, "no mail account configured", "--config")
        assert result.stderr.count("error") == 1, result.stderr  # said once


def test_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "emailmw", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == f"emailmw {emailmw.__version__}"


def test_topic_pub_signs_with_the_keystore_of_the_environment(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> None:
    store = emailmw.Keystore.create(tmp_path / "keystore")
    store.create_key("operator")
    inbox = account()
    secured = {"security": {"keystore": str(store.path)}}  # verify: enforce
    with emailmw.Context({"email": mailserver.config(inbox, **secured)}) as ctx:
        listener = emailmw.Subscription("/chatter", context=ctx)
        config = write_config(tmp_path / "email.yml", mailserver.config(account(), to=inbox))
        out = subprocess.run(
            [sys.executable, "-m", "emailmw", "--config", str(config), "topic", "pub",
             "/chatter", "std_msgs/msg/String", "data: signed", "--once"],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "EMAILMW_SECURITY_KEYSTORE": str(store.path),
                 "EMAILMW_SECURITY_IDENTITY": "operator"},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        got = emailmw.wait_for_message_with_info(listener, 30)
        assert got is not None
        assert "data: signed" in got[0]
        assert got[1].identity == "operator"


def test_the_cli_looks_on_beside_an_application_on_the_same_config(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> None:
    """An application holding a spool and a state file: the CLI on its config runs (it
    takes neither) and the application goes on receiving."""
    config = write_config(
        tmp_path / "email.yml",
        mailserver.config(
            account(),
            spool=str(tmp_path / "spool"),
            **{"state-file": str(tmp_path / "state.json"), "on-receive": "seen"},
        ),
    )
    with emailmw.Context(config) as ctx:
        node = emailmw.Node("app", context=ctx, announce_period=60)
        pub = node.create_publisher(std_msgs.msg.String, "/chatter", 10)
        round_trip(ctx, 30)
        listed = cli(config, "node", "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == ["/app"]
        echo = _popen(config, "topic", "echo", "/chatter", "--once")
        out, err = _communicate_while(echo, lambda: pub.publish(std_msgs.msg.String("seen")))
        assert echo.returncode == 0, err
        assert "data: seen" in out
        sub = emailmw.Subscription("/chatter", context=ctx)
        pub.publish(std_msgs.msg.String("for the app"))
        # (the "seen" copies published while echo ran may still come first: they were in
        # flight when it exited; was: the first message taken for the app's, by chance)
        got = emailmw.wait_for_message(sub, 30)
        while got is not None and "seen" in got:
            got = emailmw.wait_for_message(sub, 30)
        assert got is not None
        assert "for the app" in got
