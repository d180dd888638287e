"""Bags over the real server: recorded live with ``emailmw bag record``, read back by the
``rosbags`` and ``mcap`` readers as ROS tools read them, exported after the fact from the
account's Maildir (the same messages and timestamps as recorded), played back with their
timing, and described as ``ros2 bag info`` describes them."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import emailmw
from emailmw import example_interfaces, geometry_msgs, std_msgs
from emailmw.testing.mailserver import MailServer

from ..helpers import Recorder, round_trip
from .helpers import cli, write_config

pytest.importorskip("rosbags")
pytest.importorskip("mcap")

COUNT = 12


def _twist(i: int) -> Any:
    twist = geometry_msgs.msg.Twist()
    twist.linear.x = 0.5 * i
    twist.angular.z = -0.25 * i
    return twist


@pytest.fixture
def recorded(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """``COUNT`` messages on each of three typed topics and one untyped one, published while
    ``emailmw bag record`` runs on the same account, and the bag it wrote (named as
    ros2 names one when no ``-o`` is given: ``rosbag2_YYYY_MM_DD-HH_MM_SS``)."""
    address = account()
    config = write_config(tmp_path / "email.yml", mailserver.config(address))
    with emailmw.Context(config) as ctx:
        node = emailmw.Node("robot", context=ctx, announce_period=60)
        chatter = node.create_publisher(std_msgs.msg.String, "/chatter", 100)
        cmd = node.create_publisher(geometry_msgs.msg.Twist, "/cmd_vel", 100)
        counts = node.create_publisher(example_interfaces.msg.Int32, "/counts", 100)
        raw = emailmw.Publisher("/raw", context=ctx)
        round_trip(ctx, 30)
        recorder = subprocess.Popen(
            [sys.executable, "-m", "emailmw", "--config", str(config), "bag", "record",
             "/chatter", "/cmd_vel", "/counts", "/raw", "--count", str(4 * COUNT)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        )  # fmt: skip
        said = Recorder[str]()
        reader = threading.Thread(target=lambda: [said(line) for line in recorder.stderr or ()])
        reader.start()
        # what is published once the recorder said it subscribed is recorded
        assert said.wait_for(
            lambda lines: sum(line.startswith("Subscribed to topic") for line in lines) == 4, 60
        ), said.items
        for i in range(COUNT):
            chatter.publish(std_msgs.msg.String(data=f"hello {i} ü"))
            cmd.publish(_twist(i))
            counts.publish(example_interfaces.msg.Int32(data=i))
            raw.publish(f"plain text {i}")
        recorder.wait(120)
        reader.join(10)
        err = "".join(said.items)
        assert recorder.returncode == 0, err
        (bag,) = tmp_path.glob("rosbag2_*")
        assert re.fullmatch(r"rosbag2_\d{4}_\d\d_\d\d-\d\d_\d\d_\d\d", bag.name)
        yield {"bag": bag, "config": config, "ctx": ctx, "address": address, "tmp": tmp_path}


def _rosbags_messages(bag: Path) -> list[tuple[str, str, int, Any]]:
    """(topic, type, timestamp, message) as a ROS tool reads them: rosbags' own ROS 2
    typestore (not emailmw's types) for the standard types, the bag's embedded definitions
    for the others (as Foxglove does)."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    found = []
    with Reader(bag) as reader:
        for connection in reader.connections:
            if connection.msgtype not in store.types:
                store.register(get_types_from_msg(connection.msgdef.data, connection.msgtype))
        assert "std_msgs/msg/String" in store.types
        for connection, timestamp, raw in reader.messages():
            if connection.msgtype.startswith("emailmw_msgs/"):
                continue
            message = store.deserialize_cdr(raw, connection.msgtype)
            found.append((connection.topic, connection.msgtype, timestamp, message))
    return found


def test_a_live_recording_opens_in_rosbags_with_ros_types(recorded: dict[str, Any]) -> None:
    """Every message, as a ROS tool reads it, in the order it was received (rosbag2's log
    time: mail may arrive in another order than it was sent)."""
    messages = _rosbags_messages(recorded["bag"])
    assert [t for _, _, t, _ in messages] == sorted(t for _, _, t, _ in messages)
    by_topic: dict[str, list[Any]] = {}
    for topic, kind, _, message in messages:
        by_topic.setdefault(topic, []).append((kind, message))
    assert sorted(by_topic) == ["/chatter", "/cmd_vel", "/counts", "/raw"]
    number = lambda text: int(text.split()[-2 if text.endswith("ü") else -1])  # noqa: E731
    chatter = sorted((m.data for _, m in by_topic["/chatter"]), key=number)
    assert chatter == [f"hello {i} ü" for i in range(COUNT)]
    assert {k for k, _ in by_topic["/cmd_vel"]} == {"geometry_msgs/msg/Twist"}
    assert sorted((m.linear.x, m.angular.z) for _, m in by_topic["/cmd_vel"]) == [
        (0.5 * i, -0.25 * i) for i in range(COUNT)
    ]
    assert sorted(m.data for _, m in by_topic["/counts"]) == list(range(COUNT))
    # an untyped message is kept as std_msgs/msg/String
    raw = sorted((m.data for _, m in by_topic["/raw"]), key=number)
    assert raw == [f"plain text {i}" for i in range(COUNT)]


def test_the_bag_opens_in_the_mcap_reader_with_ros2_schemas(recorded: dict[str, Any]) -> None:
    from mcap.reader import make_reader

    (path,) = recorded["bag"].glob("*.mcap")
    with path.open("rb") as stream:
        reader = make_reader(stream)
        summary = reader.get_summary()
        assert summary is not None
        schemas = {s.name: s for s in summary.schemas.values()}
        channels = {c.topic: c for c in summary.channels.values()}
        counts: dict[str, int] = {}
        for _, channel, message in reader.iter_messages():
            counts[channel.topic] = counts.get(channel.topic, 0) + 1
            assert message.log_time > 0
    assert schemas["std_msgs/msg/String"].encoding == "ros2msg"
    assert b"string data" in schemas["std_msgs/msg/String"].data
    twist = schemas["geometry_msgs/msg/Twist"].data.decode()
    assert "Vector3 linear" in twist
    assert "MSG: geometry_msgs/Vector3" in twist
    assert {c.message_encoding for c in channels.values()} == {"cdr"}
    assert counts["/chatter"] == counts["/cmd_vel"] == counts["/counts"] == COUNT
    assert counts["/_emailmw/message_info"] == 4 * COUNT


def test_emailmw_metadata_rides_along(recorded: dict[str, Any]) -> None:
    from emailmw._bag.bag import read_bag

    messages = [m for m in read_bag(recorded["bag"]) if m.topic == "/counts"]
    assert sorted(m.data["data"] for m in messages) == list(range(COUNT))
    gids = {m.info["publisher_gid"] for m in messages}
    assert len(gids) == 1
    assert gids != {0}
    by_sequence = sorted(messages, key=lambda m: m.info["sequence_number"])
    assert [m.data["data"] for m in by_sequence] == list(range(COUNT))  # sent in this order
    assert len({m.info["sequence_number"] for m in messages}) == COUNT
    for message in messages:  # logged at its receive time (rosbag2's), sent before
        source, received = message.info["source_stamp"], message.info["received_stamp"]
        assert message.timestamp_ns == received["sec"] * 10**9 + received["nanosec"]
        assert source["sec"] * 10**9 + source["nanosec"] < message.timestamp_ns
        assert message.info["message_id"].startswith("<")
        assert message.info["message_type"] == "example_interfaces/msg/Int32"


def test_exporting_the_mailbox_gives_the_recorded_bag(
    recorded: dict[str, Any], mailserver: MailServer
) -> None:
    """The archive is the bag: the same messages, with the same metadata, as the recorder
    wrote live; each at its delivery into the mailbox (the recorder's at its receipt,
    later)."""
    from emailmw._bag.bag import read_bag

    exported = recorded["tmp"] / "exported"
    out = cli(recorded["config"], "bag", "export",
              str(mailserver.maildir(recorded["address"])), "-o", str(exported))  # fmt: skip
    assert out.returncode == 0, out.stderr
    topics = ("/chatter", "/cmd_vel", "/counts", "/raw")

    def essence(bag: Path) -> list[tuple[Any, ...]]:
        return sorted(
            (m.topic, repr(m.data), m.message_type, m.info["publisher_gid"],
             m.info["sequence_number"], m.info["message_id"])
            for m in read_bag(bag, topics)
        )  # fmt: skip

    live = essence(recorded["bag"])
    assert len(live) == 4 * COUNT
    assert essence(exported) == live
    delivered = {m.info["message_id"]: m.timestamp_ns for m in read_bag(exported, topics)}
    for message in read_bag(recorded["bag"], topics):
        assert delivered[message.info["message_id"]] <= message.timestamp_ns
    assert sorted(t[:2] for t in _rosbags_messages(exported) if t[0] in topics) == sorted(
        t[:2] for t in _rosbags_messages(recorded["bag"])
    )


def test_info_says_what_ros2_bag_info_says(recorded: dict[str, Any]) -> None:
    out = cli(recorded["config"], "bag", "info", str(recorded["bag"]))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("Files:             ")
    assert lines[0].endswith(".mcap")
    assert "Storage id:        mcap" in lines
    assert f"Messages:          {8 * COUNT}" in lines
    assert any(
        "Topic: /counts" in line
        and "Type: example_interfaces/msg/Int32" in line
        and f"Count: {COUNT} |" in line
        and "Serialization Format: cdr" in line
        for line in lines
    )


def test_play_publishes_with_the_recorded_timing(recorded: dict[str, Any]) -> None:
    listener = emailmw.Subscription("/counts", context=recorded["ctx"])
    out = cli(recorded["config"], "bag", "play", str(recorded["bag"]), "--topics", "/counts",
              "--rate", "4")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"published {COUNT} messages" in out.stderr
    got = []
    deadline = time.monotonic() + 60
    while len(got) < COUNT and time.monotonic() < deadline:
        found = emailmw.wait_for_message_with_info(listener, max(0.1, deadline - time.monotonic()))
        if found is not None:
            got.append(found)
    values = [int(body.split(":")[1]) for body, _ in got]
    assert sorted(values) == list(range(COUNT))
    assert {info.message_type for _, info in got} == {"example_interfaces/msg/Int32"}


def test_bag_mistakes_are_one_line(recorded: dict[str, Any], tmp_path: Path) -> None:
    config = recorded["config"]
    for args, words in (
        (["bag", "record", "-o", str(tmp_path / "x")], "record them all with -a"),
        (["bag", "record", "/a", "-o", str(recorded["bag"])], "exists already"),
        (["bag", "play", str(tmp_path)], "not a bag"),
        (["bag", "export", str(tmp_path / "nothing"), "-o", str(tmp_path / "y")], "no such"),
    ):
        out = cli(config, *args)
        assert out.returncode != 0
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert words in out.stderr
