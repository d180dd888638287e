"""The ros2 verbs beyond the basics (param, action, topic type/find/delay/info -v,
echo's options, service type/find), each run as a subprocess against the real server and
checked as a ROS 2 user reads its output."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import emailmw
from emailmw import example_interfaces, std_msgs
from emailmw.action import ActionServer
from emailmw.executors import MultiThreadedExecutor
from emailmw.parameter import Parameter
from emailmw.rcl_interfaces.msg import IntegerRange, ParameterDescriptor
from emailmw.testing.mailserver import MailServer

from ..helpers import round_trip
from .helpers import cli, write_config


@pytest.fixture
def system(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """A spun node ``/robot`` with parameters, a Fibonacci action server, a typed
    publisher and a service; a config for the CLI on the same account."""
    address = account()
    config = write_config(tmp_path / "email.yml", mailserver.config(address))
    ctx = emailmw.Context(config)
    node = emailmw.Node("robot", context=ctx, announce_period=60)
    node.declare_parameter(
        "speed",
        3,
        ParameterDescriptor(
            description="wheel speed",
            integer_range=[IntegerRange(from_value=0, to_value=10, step=1)],
        ),
    )
    node.declare_parameter("label", "rover")
    node.declare_parameter("gains", [1.5, 2.5])
    node.declare_parameter("fixed", True, ParameterDescriptor(read_only=True))
    pub = node.create_publisher(example_interfaces.msg.Int32, "/counts", 10)

    def add(request: Any, response: Any) -> Any:
        response.sum = request.a + request.b
        return response

    node.create_service(example_interfaces.srv.AddTwoInts, "/add_two_ints", add)

    def execute(goal: Any) -> Any:
        feedback = example_interfaces.action.Fibonacci.Feedback(sequence=[0, 1])
        for i in range(1, goal.request.order):
            feedback.sequence.append(feedback.sequence[i] + feedback.sequence[i - 1])
            goal.publish_feedback(feedback)
        goal.succeed()
        return example_interfaces.action.Fibonacci.Result(sequence=feedback.sequence)

    server = ActionServer(node, example_interfaces.action.Fibonacci, "fibonacci", execute)
    executor = MultiThreadedExecutor(num_threads=4, context=ctx)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    round_trip(ctx, 30)
    yield {"config": config, "pub": pub, "ctx": ctx, "node": node, "tmp": tmp_path}
    server.destroy()
    executor.shutdown()
    ctx.shutdown()
    spinner.join(10)


def ok(config: Path, *args: str) -> str:
    out = cli(config, *args)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" or "Traceback" not in out.stderr
    return out.stdout


def one_line_error(out: subprocess.CompletedProcess[str], *words: str) -> None:
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    for word in words:
        assert word in lines[0]


# -- param ------------------------------------------------------------------------------


def test_param_list_get_and_types(system: dict[str, Any]) -> None:
    listed = ok(system["config"], "param", "list", "/robot").split()
    assert {"speed", "label", "gains", "fixed", "use_sim_time"} <= set(listed)
    typed = ok(system["config"], "param", "list", "robot", "--param-type")
    assert "  speed (type: integer)" in typed.splitlines()
    assert "  gains (type: double array)" in typed.splitlines()
    assert ok(system["config"], "param", "get", "/robot", "speed") == "Integer value is: 3\n"
    assert ok(system["config"], "param", "get", "/robot", "label") == "String value is: rover\n"
    missing = cli(system["config"], "param", "get", "/robot", "nope")
    assert (missing.returncode, missing.stdout) == (1, "Parameter not set.\n")


def test_param_set_is_seen_by_the_node_and_its_limits_hold(system: dict[str, Any]) -> None:
    node = system["node"]
    assert ok(system["config"], "param", "set", "/robot", "speed", "7") == (
        "Set parameter successful\n"
    )
    assert node.get_parameter("speed").value == 7
    out = cli(system["config"], "param", "set", "/robot", "speed", "11")
    assert out.returncode == 1
    assert out.stdout.startswith("Set parameter failed:")
    assert node.get_parameter("speed").value == 7
    out = cli(system["config"], "param", "set", "/robot", "fixed", "false")
    assert out.returncode == 1
    assert "read-only" in out.stdout or "read only" in out.stdout
    bad = cli(system["config"], "param", "set", "/robot", "speed", "{a: [")
    one_line_error(bad, "VALUE")

    # a pre-set callback that sets another parameter too: one line, no traceback (was:
    # "too many values to unpack", the set done all the same)
    def also_label(parameters: list[Any]) -> list[Any]:
        return [*parameters, Parameter("label", value="set with speed")]

    node.add_pre_set_parameters_callback(also_label)
    try:
        assert ok(system["config"], "param", "set", "/robot", "speed", "2") == (
            "Set parameter successful\n"
        )
    finally:
        node.remove_pre_set_parameters_callback(also_label)
    assert node.get_parameter("label").value == "set with speed"


def test_param_describe(system: dict[str, Any]) -> None:
    out = ok(system["config"], "param", "describe", "/robot", "speed", "fixed")
    assert "Parameter name: speed" in out
    assert "  Type: integer" in out
    assert "  Description: wheel speed" in out
    assert "    Min value: 0" in out
    assert "    Max value: 10" in out
    assert "Parameter name: fixed" in out
    assert "    Read only: true" in out


def test_param_dump_load_round_trip(system: dict[str, Any]) -> None:
    tmp = system["tmp"]
    dumped = ok(system["config"], "param", "dump", "/robot", "--output-dir", str(tmp))
    path = tmp / "robot.yaml"
    assert dumped.strip() == f"Saving to:  {path}"
    import yaml

    params = yaml.safe_load(path.read_text())["/robot"]["ros__parameters"]
    assert params["speed"] == 3
    assert params["gains"] == [1.5, 2.5]
    params["speed"] = 5
    params["label"] = "loaded"
    del params["fixed"]  # read-only: loading it would fail, as in ROS 2
    path.write_text(yaml.safe_dump({"/robot": {"ros__parameters": params}}))
    out = ok(system["config"], "param", "load", "/robot", str(path))
    assert "Set parameter speed successful" in out
    assert system["node"].get_parameter("speed").value == 5
    assert system["node"].get_parameter("label").value == "loaded"


def test_param_delete(system: dict[str, Any]) -> None:
    node = system["node"]
    node.declare_parameter("scratch", 1, ParameterDescriptor(dynamic_typing=True))
    assert ok(system["config"], "param", "delete", "/robot", "scratch") == (
        "Deleted parameter successfully\n"
    )
    assert not node.has_parameter("scratch")
    # a pre-set callback that sets another parameter with it: one line, as for set (was:
    # "too many values to unpack")
    node.declare_parameter("scratch", 1, ParameterDescriptor(dynamic_typing=True))

    def also_label(parameters: list[Any]) -> list[Any]:
        return [*parameters, Parameter("label", value="set with a delete")]

    node.add_pre_set_parameters_callback(also_label)
    try:
        assert ok(system["config"], "param", "delete", "/robot", "scratch") == (
            "Deleted parameter successfully\n"
        )
    finally:
        node.remove_pre_set_parameters_callback(also_label)
    assert not node.has_parameter("scratch")
    assert node.get_parameter("label").value == "set with a delete"


def test_param_of_a_missing_node_is_one_line(system: dict[str, Any]) -> None:
    out = cli(system["config"], "param", "list", "/nobody")
    one_line_error(out, "/nobody", "node list")


# -- action -----------------------------------------------------------------------------


def test_action_list_info_and_node_info(system: dict[str, Any]) -> None:
    assert ok(system["config"], "action", "list", "-t") == (
        "/fibonacci [example_interfaces/action/Fibonacci]\n"
    )
    info = ok(system["config"], "action", "info", "/fibonacci")
    assert "Action servers: 1\n    /robot" in info
    node_info = ok(system["config"], "node", "info", "/robot")
    assert "  Action Servers:\n    /fibonacci: example_interfaces/action/Fibonacci" in node_info
    assert "/fibonacci/_action/" not in node_info  # the hidden services are not listed
    assert "  Parameters:" in node_info
    assert "    speed" in node_info.splitlines()


def test_action_send_goal_with_feedback(system: dict[str, Any]) -> None:
    out = ok(
        system["config"],
        "action",
        "send_goal",
        "/fibonacci",
        "example_interfaces/action/Fibonacci",
        "{order: 5}",
        "-f",
    )
    assert "Goal accepted with ID:" in out
    assert "Feedback:\n    sequence:" in out
    assert "Result:\n    sequence:\n    - 0\n    - 1\n    - 1\n    - 2\n    - 3\n    - 5" in out
    assert "Goal finished with status: SUCCEEDED" in out


def test_action_send_goal_mistakes_are_one_line(system: dict[str, Any]) -> None:
    wrong = cli(system["config"], "action", "send_goal", "/fibonacci", "std_msgs/msg/String")
    one_line_error(wrong, "not an action type")
    field = cli(
        system["config"],
        "action",
        "send_goal",
        "/fibonacci",
        "example_interfaces/action/Fibonacci",
        "{steps: 5}",
    )
    one_line_error(field, "GOAL")


# -- topic and service ------------------------------------------------------------------


def test_hidden_names_are_listed_only_when_asked(system: dict[str, Any]) -> None:
    config = system["config"]
    topics = ok(config, "topic", "list").split()
    assert topics == ["/counts"]  # not /fibonacci/_action/status, not /_emailmw/graph
    every = ok(config, "topic", "list", "--include-hidden-topics").split()
    assert "/fibonacci/_action/status" in every
    services = ok(config, "service", "list").split()
    assert "/add_two_ints" in services
    assert not [s for s in services if "/_action/" in s]
    hidden = ok(config, "service", "list", "--include-hidden-services").split()
    assert "/fibonacci/_action/send_goal" in hidden


def test_topic_and_service_type_and_find(system: dict[str, Any]) -> None:
    config = system["config"]
    assert ok(config, "topic", "type", "/counts") == "example_interfaces/msg/Int32\n"
    assert ok(config, "topic", "find", "example_interfaces/msg/Int32") == "/counts\n"
    assert ok(config, "service", "type", "/add_two_ints") == ("example_interfaces/srv/AddTwoInts\n")
    assert ok(config, "service", "find", "example_interfaces/srv/AddTwoInts") == ("/add_two_ints\n")
    one_line_error(cli(config, "topic", "type", "/nothing"), "topic list")
    one_line_error(cli(config, "service", "type", "/nothing"), "service list")


def test_topic_info_verbose_shows_each_endpoint_qos(system: dict[str, Any]) -> None:
    out = ok(system["config"], "topic", "info", "/counts", "--verbose")
    assert "Publisher count: 1" in out
    assert "Node name: robot" in out
    assert "Node namespace: /" in out
    assert "Endpoint type: PUBLISHER" in out
    assert "  Reliability: RELIABLE" in out
    assert "  History (Depth): KEEP_LAST (10)" in out
    assert "GID: (not announced)" not in out


def _run_while_publishing(
    system: dict[str, Any], args: list[str], values: Callable[[], Any]
) -> str:
    process = subprocess.Popen(
        [sys.executable, "-m", "emailmw", "--config", str(system["config"]), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stop = threading.Event()

    def publish() -> None:
        while not stop.wait(0.2):
            system["pub"].publish(values())

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        out, err = process.communicate(timeout=120)
    finally:
        stop.set()
        thread.join()
    assert process.returncode == 0, err
    return out


def test_echo_filter_and_csv(system: dict[str, Any]) -> None:
    counter = iter(range(1_000_000))
    out = _run_while_publishing(
        system,
        ["topic", "echo", "/counts", "--once", "--csv", "--filter", "m.data % 2 == 1"],
        lambda: example_interfaces.msg.Int32(data=next(counter)),
    )
    (line,) = out.splitlines()
    assert int(line) % 2 == 1


def test_echo_no_str_and_no_arr(system: dict[str, Any]) -> None:
    strings = system["node"].create_publisher(std_msgs.msg.String, "/words", 10)
    arrays = system["node"].create_publisher(std_msgs.msg.Float64MultiArray, "/arrays", 10)
    out = _run_while_publishing(
        {**system, "pub": strings},
        ["topic", "echo", "/words", "--once", "--no-str"],
        lambda: std_msgs.msg.String(data="hello"),
    )
    assert "data: '<string length: 5>'" in out
    out = _run_while_publishing(
        {**system, "pub": arrays},
        ["topic", "echo", "/arrays", "--once", "--no-arr"],
        lambda: std_msgs.msg.Float64MultiArray(data=[1.0, 2.0, 3.0]),
    )
    assert "data: '<sequence length: 3>'" in out


def test_topic_delay(system: dict[str, Any]) -> None:
    out = _run_while_publishing(
        system,
        ["topic", "delay", "/counts", "--count", "3"],
        lambda: example_interfaces.msg.Int32(data=1),
    )
    last = out.strip().splitlines()[-2]
    assert last.startswith("average delay: ")
    assert 0 <= float(last.removeprefix("average delay: ")) < 60


def test_topic_pub_with_qos_options(system: dict[str, Any]) -> None:
    listener = emailmw.Subscription("/counts", context=system["ctx"])
    deadline = time.monotonic() + 60
    out = ok(
        system["config"],
        "topic",
        "pub",
        "/counts",
        "example_interfaces/msg/Int32",
        "{data: 42}",
        "--once",
        "--qos-profile",
        "sensor_data",
        "--qos-depth",
        "3",
    )
    assert "publishing #1: data: 42" in out
    got = emailmw.wait_for_message(listener, max(1.0, deadline - time.monotonic()))
    assert got is not None
    assert "42" in got
    bad = cli(system["config"], "topic", "pub", "/counts", "example_interfaces/msg/Int32",
              "{data: 1}", "--qos-depth", "0")  # fmt: skip
    one_line_error(bad, "--qos-depth")


def test_the_cli_node_leaves_the_graph_when_done(system: dict[str, Any]) -> None:
    """The CLI's parameter node is not left in the graph once the verb is done."""
    ok(system["config"], "param", "get", "/robot", "speed")
    nodes = ok(system["config"], "node", "list").split()
    assert nodes == ["/robot"]


def test_every_param_value_form_round_trips(system: dict[str, Any]) -> None:
    node = system["node"]
    node.declare_parameter("any", 0, ParameterDescriptor(dynamic_typing=True))
    for text, expected in (
        ("true", True),
        ("2.5", 2.5),
        ("'text'", "text"),
        ("[1, 2]", [1, 2]),
        ("[a, b]", ["a", "b"]),
    ):
        assert ok(system["config"], "param", "set", "/robot", "any", text).startswith(
            "Set parameter successful"
        )
        value = node.get_parameter("any").value
        assert (list(value) if isinstance(value, list | tuple) else value) == expected
    assert Parameter.Type.from_parameter_value(True) is Parameter.Type.BOOL


# -- shell completion -------------------------------------------------------------------


def complete(line: str, config: Path | None = None, shell: str = "bash") -> list[str]:
    """What argcomplete offers for ``line`` (as the shell's hook asks for it)."""
    out = config.parent / "completions" if config is not None else Path("/dev/null")
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": shell,
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    if config is not None:
        env["EMAILMW_CONFIG_FILE"] = str(config)
    result = subprocess.run(
        [sys.executable, "-m", "emailmw"], env=env, capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [c.strip() for c in out.read_text().splitlines() if c.strip()]


def test_completion_of_names_from_the_graph_and_types(system: dict[str, Any]) -> None:
    config = system["config"]
    assert complete("emailmw topic echo /c", config) == ["/counts"]
    assert complete("emailmw topic info ", config) == ["/counts"]
    assert "/add_two_ints" in complete("emailmw service call /", config)
    assert complete("emailmw action send_goal /f", config) == ["/fibonacci"]
    assert complete("emailmw node info /r", config) == ["/robot"]
    assert complete("emailmw param list /r", config) == ["/robot"]
    # a topic or service the graph knows: its own type only, as ros2cli offers it (#60:
    # every srv type was offered); one it does not know: every type of the kind
    assert complete("emailmw topic pub /counts example_interfaces/msg/Int3", config) == [
        "example_interfaces/msg/Int32"
    ]
    assert complete("emailmw topic pub /elsewhere example_interfaces/msg/Int3", config) == [
        "example_interfaces/msg/Int32",
        "example_interfaces/msg/Int32MultiArray",
    ]
    assert complete("emailmw service call /add_two_ints ", config) == [
        "example_interfaces/srv/AddTwoInts"
    ]
    assert complete("emailmw service call /add_two_ints example_interfaces/srv/Add", config) == [
        "example_interfaces/srv/AddTwoInts"
    ]
    assert complete("emailmw topic ec", config) == ["echo"]
    assert "--qos-reliability" in complete("emailmw topic echo /counts --qos-r", config)
    zsh = complete("emailmw node info /r", config, shell="zsh")
    assert [c.split(":")[0].strip() for c in zsh] == ["/robot"]


def test_completion_never_waits_more_than_its_budget(tmp_path: Path) -> None:
    """A server that accepts and never answers: no names, within the budget."""
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    config = write_config(
        tmp_path / "email.yml",
        {
            "transport": "native",
            "user": {
                "url-smtp": f"smtps://127.0.0.1:{port}",
                "url-imap": f"imaps://127.0.0.1:{port}",
                "username": "a@b.test",
                "password": "x",
            },
            "recipients": {"to": "a@b.test"},
        },
    )
    started = time.monotonic()
    try:
        assert complete("emailmw topic echo /", config) == []
    finally:
        silent.close()
    # the interpreter's start and the parser take their share; the graph at most 1 s
    assert time.monotonic() - started < 1.0 + 5.0


def test_service_echo_prints_the_events_of_an_introspected_service(
    system: dict[str, Any],
) -> None:
    """ros2's ``service echo``: once the service publishes its events (CONTENTS), a call's
    request received and response sent are printed as YAML, with their contents."""
    from emailmw.service_introspection import ServiceIntrospectionState

    node = system["node"]
    (server,) = [s for s in node.services if s.service_name == "/add_two_ints"]
    server.configure_introspection(node.get_clock(), 10, ServiceIntrospectionState.CONTENTS)
    config = system["config"]
    called = cli(config, "service", "call", "/add_two_ints",
                 "example_interfaces/srv/AddTwoInts", "{a: 2, b: 3}")  # fmt: skip
    assert called.returncode == 0, called.stderr
    out = cli(config, "service", "echo", "/add_two_ints", "--qos-durability", "transient_local",
              "--qos-depth", "2", "--once")  # fmt: skip
    assert out.returncode == 0, out.stderr
    event = yaml.safe_load(out.stdout.split("---")[0])
    assert event["info"]["event_type"] in (1, 2)  # request received or response sent
    assert event["request"] == [{"a": 2, "b": 3}] or event["response"] == [{"sum": 5}]
    server.configure_introspection(node.get_clock(), 10, ServiceIntrospectionState.OFF)
