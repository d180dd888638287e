"""The ROS-style layer: names, typed messages, nodes, executors (intraprocess)."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

import emailmw
from emailmw import (
    Context,
    InvalidNameError,
    MultiThreadedExecutor,
    Node,
    SingleThreadedExecutor,
    TypeMismatchError,
    example_interfaces,
    std_msgs,
)
from emailmw._core.names import resolve_name
from emailmw._core.wire import build as build_email
from emailmw._core.wire import parse as parse_email
from emailmw.callback_groups import ReentrantCallbackGroup

from .helpers import Recorder, spin_until


@pytest.mark.parametrize(
    ("name", "resolved"),
    [
        ("chatter", "/ns/chatter"),
        ("/chatter", "/chatter"),
        ("~", "/ns/talker"),
        ("~/private", "/ns/talker/private"),
        ("a/b_2", "/ns/a/b_2"),
        ("{node}/x", "/ns/talker/x"),
    ],
)
def test_names_resolve_like_ros(name: str, resolved: str) -> None:
    assert resolve_name(name, "talker", "/ns") == resolved


@pytest.mark.parametrize("name", ["", "a//b", "a/", "1abc", "a b", "a~b", "ä", "a/-b"])
def test_invalid_names_are_rejected_clearly(name: str) -> None:
    with pytest.raises(InvalidNameError):
        resolve_name(name, "talker", "/ns")


def test_invalid_node_names_and_namespaces(ctx: Context) -> None:
    for bad in ("", "1node", "my-node", "a/b"):
        with pytest.raises(InvalidNameError):
            Node(bad, context=ctx)
    with pytest.raises(InvalidNameError):
        Node("ok", namespace="/a/", context=ctx)
    node = Node("talker", namespace="robot", context=ctx)
    assert node.get_fully_qualified_name() == "/robot/talker"


def test_typed_messages_round_trip_as_readable_yaml() -> None:
    header = std_msgs.msg.Header(
        stamp=emailmw.builtin_interfaces.msg.Time(sec=3, nanosec=4), frame_id="map"
    )
    text = emailmw.serialize(header)
    assert "frame_id: map" in text
    assert "sec: 3" in text
    assert emailmw.deserialize(std_msgs.msg.Header, text) == header
    assert emailmw.deserialize(std_msgs.msg.Float64, "data: 2") == std_msgs.msg.Float64(2.0)
    with pytest.raises(TypeMismatchError):
        emailmw.deserialize(std_msgs.msg.Int64, "data: not a number")
    with pytest.raises(TypeMismatchError):
        emailmw.deserialize(std_msgs.msg.String, "unknown_field: 1")
    assert "std_msgs/msg/String" in emailmw.interface_names()
    assert emailmw.get_interface("example_interfaces/srv/AddTwoInts") is (
        example_interfaces.srv.AddTwoInts
    )


def test_user_defined_type_with_the_decorator() -> None:
    @emailmw.message("my_pkg/msg/Pose2D")
    class Pose2D:
        x: float = 0.0
        y: float = 0.0
        labels: list[str] | None = None

    pose = Pose2D(1.5, -2.0, ["a", "b"])
    assert emailmw.deserialize(Pose2D, emailmw.serialize(pose)) == pose


def test_publish_subscribe_with_callbacks_in_spin(ctx: Context) -> None:
    talker = Node("talker", context=ctx)
    listener = Node("listener", context=ctx)
    heard: list[str] = []
    listener.create_subscription(std_msgs.msg.String, "chatter", lambda m: heard.append(m.data))
    pub = talker.create_publisher(std_msgs.msg.String, "chatter")
    executor = SingleThreadedExecutor()
    executor.add_node(listener)
    for i in range(3):
        pub.publish(std_msgs.msg.String(data=f"hello {i}"))
    assert spin_until(executor, lambda: len(heard) == 3)
    assert heard == ["hello 0", "hello 1", "hello 2"]
    with pytest.raises(TypeMismatchError):
        pub.publish(std_msgs.msg.Int64(data=1))  # type: ignore[arg-type]


def test_a_callback_may_take_the_message_info_as_in_rclpy(ctx: Context) -> None:
    node = Node("listener", context=ctx)
    heard: list[tuple[str, emailmw.MessageInfo]] = []

    def with_info(msg: Any, info: emailmw.MessageInfo) -> None:
        heard.append((msg.data, info))

    node.create_subscription(std_msgs.msg.String, "chatter", with_info)
    pub = Node("talker", context=ctx).create_publisher(std_msgs.msg.String, "chatter")
    pub.publish(std_msgs.msg.String(data="hi"))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    assert spin_until(executor, lambda: len(heard) == 1)
    assert heard[0][0] == "hi"
    assert heard[0][1].publisher_gid == pub._core.gid
    assert heard[0][1].redelivered is False


def test_subscription_of_another_type_gets_an_event_not_a_crash(ctx: Context) -> None:
    node = Node("n", context=ctx)
    events: list[TypeMismatchError] = []
    got: list[int] = []
    sub = node.create_subscription(
        std_msgs.msg.Int64,
        "/mixed",
        lambda m: got.append(m.data),
        event_callbacks=emailmw.SubscriptionEventCallbacks(type_mismatch=events.append),
    )
    node.create_publisher(std_msgs.msg.String, "/mixed").publish(std_msgs.msg.String("x"))
    node.create_publisher(std_msgs.msg.Int64, "/mixed").publish(std_msgs.msg.Int64(7))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    assert spin_until(executor, lambda: got == [7])
    assert len(events) == 1
    assert "std_msgs/msg/String" in str(events[0])
    assert sub.type_mismatches == 1


def test_service_call_async_and_spin_until_future_complete(ctx: Context) -> None:
    server = Node("add_two_ints_server", context=ctx)

    def add(request: Any, response: Any) -> Any:
        response.sum = request.a + request.b
        return response

    server.create_service(example_interfaces.srv.AddTwoInts, "add_two_ints", add)
    client_node = Node("client", context=ctx)
    client = client_node.create_client(example_interfaces.srv.AddTwoInts, "add_two_ints")
    executor = SingleThreadedExecutor()
    executor.add_node(server)
    future = client.call_async(example_interfaces.srv.AddTwoInts.Request(a=2, b=3))
    executor.spin_until_future_complete(future, timeout_sec=10)
    assert future.done()
    assert future.result().sum == 5


def test_a_client_alone_in_its_context_gets_its_response(ctx: Context) -> None:
    """A client's responses complete futures on the polling thread: nothing in the client's
    context waits on an entity, so sending the request must start receiving."""
    from emailmw._core.protocol import response_email
    from emailmw._core.wire import build
    from emailmw._transport.intraprocess import IntraprocessReceiver

    node = Node("caller", context=ctx)
    client = node.create_client(example_interfaces.srv.AddTwoInts, "add_two_ints")
    future = client.call_async(example_interfaces.srv.AddTwoInts.Request(a=2, b=3))
    receiver = ctx.receiver
    assert isinstance(receiver, IntraprocessReceiver)
    (request,) = receiver.history("/add_two_ints", 1)  # answered by a server elsewhere
    answer = emailmw.serialize(example_interfaces.srv.AddTwoInts.Response(sum=5))
    receiver.deliver_bytes(build(response_email(request, answer, from_="s@x.test", timestamp_ns=1)))
    emailmw.spin_until_future_complete(node, future, timeout_sec=5)
    assert future.done()
    assert future.result().sum == 5


def test_blocking_call_while_another_thread_spins(ctx: Context) -> None:
    server = Node("server", context=ctx)
    server.create_service(
        example_interfaces.srv.SetBool,
        "set",
        lambda req, resp: type(resp)(success=req.data, message="ok"),
    )
    executor = SingleThreadedExecutor()
    executor.add_node(server)
    spinner = threading.Thread(target=executor.spin)
    spinner.start()
    try:
        client = Node("c", context=ctx).create_client(example_interfaces.srv.SetBool, "/set")
        response = client.call(example_interfaces.srv.SetBool.Request(data=True), timeout_sec=10)
        assert (response.success, response.message) == (True, "ok")
    finally:
        executor.shutdown()
        spinner.join(10)
    assert not spinner.is_alive()


def test_timer_fires_repeatedly_and_can_be_cancelled(ctx: Context) -> None:
    node = Node("timed", context=ctx)
    ticks: list[float] = []
    timer = node.create_timer(0.02, lambda: ticks.append(time.monotonic()))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    assert spin_until(executor, lambda: len(ticks) >= 5)
    assert all(b > a for a, b in itertools.pairwise(ticks))
    timer.cancel()
    count = len(ticks)
    executor.spin_once(0.1)
    assert len(ticks) == count


def test_guard_condition_callback_runs_in_spin(ctx: Context) -> None:
    node = Node("guarded", context=ctx)
    fired: list[str] = []
    guard = node.create_guard_condition(lambda: fired.append("yes"))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Timer(0.05, guard.trigger).start()
    assert spin_until(executor, lambda: fired == ["yes"])


def test_multithreaded_executor_runs_callbacks_concurrently(ctx: Context) -> None:
    """In a reentrant callback group (a node's default group is mutually exclusive, as
    in rclpy)."""
    node = Node("busy", context=ctx)
    both_running = threading.Barrier(2, timeout=10)
    done: Recorder[str] = Recorder()

    def slow(msg: Any) -> None:
        both_running.wait()  # only passes if two callbacks run at the same time
        done(msg.data)

    node.create_subscription(
        std_msgs.msg.String, "work", slow, callback_group=ReentrantCallbackGroup()
    )
    pub = node.create_publisher(std_msgs.msg.String, "work")
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    pub.publish(std_msgs.msg.String("a"))
    pub.publish(std_msgs.msg.String("b"))
    spinner = threading.Thread(target=executor.spin)
    spinner.start()
    try:
        assert sorted(done.wait_count(2)) == ["a", "b"]
    finally:
        executor.shutdown()
        spinner.join(10)


def test_node_lifecycle_destroy(ctx: Context) -> None:
    node = Node("life", context=ctx)
    sub = node.create_subscription(std_msgs.msg.Empty, "e", lambda m: None)
    timer = node.create_timer(1.0, lambda: None)
    node.destroy_subscription(sub)
    node.destroy_timer(timer)
    assert node.subscriptions == []
    assert timer.is_canceled()
    node.create_publisher(std_msgs.msg.Empty, "e")
    node.destroy_node()
    assert node.publishers == []


def test_spin_once_waits_up_to_its_timeout_for_work_without_burning_cpu() -> None:
    """As in rclpy: ``while ok(): spin_once(node, timeout_sec=...)`` with nothing to do
    sleeps in the wait, it does not return at once (a fresh process: only its CPU counts)."""
    script = textwrap.dedent(
        """
        import time, emailmw
        emailmw.init({"intraprocess": True})
        node = emailmw.Node("idle")
        node.create_subscription(emailmw.std_msgs.msg.String, "chatter", lambda m: None)
        calls, wall0, cpu0 = 0, time.monotonic(), time.process_time()
        while time.monotonic() - wall0 < 1.5:
            emailmw.spin_once(node, timeout_sec=0.5)
            calls += 1
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        first = time.monotonic()
        emailmw.spin_once(node, timeout_sec=0.3)
        print(calls, cpu / wall, time.monotonic() - first)
        emailmw.shutdown()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    calls, cpu_share, one_call = out.stdout.split()
    assert int(calls) <= 4, out.stdout
    assert float(cpu_share) < 0.05, out.stdout
    assert float(one_call) >= 0.3, out.stdout


def test_spin_once_returns_as_soon_as_work_ran(ctx: Context) -> None:
    node = Node("worker", context=ctx)
    got = Recorder[str]()
    node.create_subscription(std_msgs.msg.String, "chatter", lambda msg: got(msg.data))
    pub = node.create_publisher(std_msgs.msg.String, "chatter")
    threading.Timer(0.2, lambda: pub.publish(std_msgs.msg.String(data="hi"))).start()
    start = time.monotonic()
    emailmw.spin_once(node, timeout_sec=10.0)
    assert got.items == ["hi"]
    assert time.monotonic() - start < 5.0


@emailmw.message("emailmw_test/msg/Inner")
class _Inner:
    label: str = ""
    weights: list[float] = dataclasses.field(default_factory=list)


@emailmw.message("emailmw_test/msg/EveryField")
class _EveryField:
    flag: bool = False
    count: int = 0
    ratio: float = 0.0
    text: str = ""
    blob: bytes = b""
    floats: list[float] = dataclasses.field(default_factory=list)
    ints: list[int] = dataclasses.field(default_factory=list)
    texts: list[str] = dataclasses.field(default_factory=list)
    blobs: list[bytes] = dataclasses.field(default_factory=list)
    stamp: emailmw.builtin_interfaces.msg.Time = dataclasses.field(
        default_factory=emailmw.builtin_interfaces.msg.Time
    )
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    inners: list[_Inner] = dataclasses.field(default_factory=list)


_EVERY = [
    _EveryField(),
    _EveryField(
        flag=True,
        count=-(2**63),
        ratio=-1.5e-300,
        text="température 🚀\nsecond line\ttab: 'quoted' \"double\" # not a comment",
        blob=bytes(range(256)),
        floats=[0.0, -0.0, 1e308, float("inf"), float("-inf"), 2.5],
        ints=[2**63 - 1, 0, -1],
        texts=["", "yes", "null", "1.0", "- item"],
        blobs=[b"", b"\x00\r\n\xff"],
        stamp=emailmw.builtin_interfaces.msg.Time(sec=1_700_000_000, nanosec=999_999_999),
        inner=_Inner("i", [1.0, 2.0]),
        inners=[_Inner("a"), _Inner("b", [3.25])],
    ),
]


@pytest.mark.parametrize("msg", _EVERY, ids=["defaults", "every value"])
def test_every_field_type_round_trips_through_a_node_and_the_wire(
    ctx: Context, msg: _EveryField
) -> None:
    """Each field type the message system supports, published and subscribed in one node,
    arrives equal; the same body through the email wire format too."""
    node = Node("every", context=ctx)
    got = Recorder[_EveryField]()
    node.create_subscription(_EveryField, "every", got)
    node.create_publisher(_EveryField, "every").publish(msg)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    assert spin_until(executor, lambda: bool(got.items))
    assert got.items == [msg]
    body = emailmw.serialize(msg)
    raw = build_email(emailmw.Email("/every", body, "a@example.test", ("b@example.test",)))
    assert emailmw.deserialize(_EveryField, parse_email(raw).body) == msg


def test_a_done_callback_that_is_a_coroutine_function_is_refused(ctx: Context) -> None:
    """A future's done callback is called as a plain function: a coroutine function's
    body would never run, so it is refused with what to do (node callbacks may be async:
    the executor drives them)."""
    node = Node("asyncish", context=ctx)

    async def on_done(future: Any) -> None:
        del future

    class AsyncCall:
        async def __call__(self, *args: Any) -> None:
            del args

    add = example_interfaces.srv.AddTwoInts
    future = node.create_client(add, "c").call_async(add.Request())
    for callback in (on_done, AsyncCall()):
        with pytest.raises(emailmw.InvalidCallbackError, match=r"async def.*make it a def"):
            future.add_done_callback(callback)
