"""Content-filtered topics: the DDS filter grammar as a pure function on messages, and a
subscription that hands its callback only what its filter holds for (rclpy's
``ContentFilterOptions``), the rest settled unseen."""

from __future__ import annotations

import time
from typing import Any

import pytest

import emailmw
from emailmw._core.content_filter import compile_filter
from emailmw.geometry_msgs.msg import Point, PoseStamped
from emailmw.std_msgs.msg import Int32MultiArray, String
from emailmw.subscription_content_filter_options import ContentFilterOptions


def _pose(x: float, frame: str) -> Any:
    pose = PoseStamped()
    pose.pose.position = Point(x=x, y=0.0, z=0.0)
    pose.header.frame_id = frame
    return pose


@pytest.mark.parametrize(
    ("expression", "parameters", "passing"),
    [
        ("pose.position.x > 1.5", [], [2.0, 3.0]),
        ("pose.position.x >= %0 AND pose.position.x < %1", ["1", "3"], [1.0, 2.0]),
        ("pose.position.x BETWEEN 1 AND 2", [], [1.0, 2.0]),
        ("pose.position.x NOT BETWEEN 1 AND 2", [], [0.0, 3.0]),
        ("header.frame_id = 'map'", [], [0.0, 2.0]),
        ("header.frame_id = %0", ["'odom'"], [1.0, 3.0]),
        ("header.frame_id LIKE 'o%'", [], [1.0, 3.0]),
        ("header.frame_id LIKE 'ma_'", [], [0.0, 2.0]),
        ("NOT (header.frame_id = 'map' OR pose.position.x = 3)", [], [1.0]),
        ("header.frame_id <> 'map' and pose.position.x != 1", [], [3.0]),
        ("nothing.here = 1", [], []),
    ],
)
def test_the_dds_filter_grammar(
    expression: str, parameters: list[str], passing: list[float]
) -> None:
    poses = [_pose(0.0, "map"), _pose(1.0, "odom"), _pose(2.0, "map"), _pose(3.0, "odom")]
    compiled = compile_filter(expression, parameters)
    assert [p.pose.position.x for p in poses if compiled.matches(p)] == passing


def test_arrays_strings_with_quotes_and_mistakes() -> None:
    assert compile_filter("data[1] = 5").matches(Int32MultiArray(data=[1, 5]))
    assert not compile_filter("data[7] = 5").matches(Int32MultiArray(data=[1, 5]))
    assert compile_filter("data = 'it''s'").matches(String(data="it's"))
    assert not compile_filter("data > 3").matches(String(data="x"))  # (no comparison: false)
    for expression, parameters, words in (
        ("data = %1", ["'a'"], "%1 names a parameter not given (1 given)"),
        ("data =", [], "expected a value, found the end"),
        ("data = 'a' AND", [], "expected name, found the end"),
        ("data LIKE 3", [], "LIKE takes a 'string'"),
        ("data = %0", ["not quoted"], "is not a number, a 'quoted string' or TRUE/FALSE"),
        ("(data = 'a'", [], "expected ), found the end"),
        ("", [], "needs an expression"),
    ):
        with pytest.raises(emailmw.EmailMWError) as info:
            compile_filter(expression, parameters)
        assert words in str(info.value), expression


def test_a_subscription_gets_only_what_its_filter_holds_for() -> None:
    context = emailmw.init({"intraprocess": True})
    try:
        node = emailmw.create_node("filtered")
        got: list[str] = []
        options = ContentFilterOptions("data LIKE %0", ["'keep%'"])
        sub = node.create_subscription(String, "/f", lambda m: got.append(m.data), 10,
                                       content_filter_options=options)  # fmt: skip
        assert sub.is_cft_enabled
        assert sub.get_content_filter() == options
        publisher = node.create_publisher(String, "/f", 10)
        for text in ("keep 1", "drop", "keep 2"):
            publisher.publish(String(data=text))
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            emailmw.spin_once(node, timeout_sec=0.1)
        emailmw.spin_once(node, timeout_sec=0.2)
        assert got == ["keep 1", "keep 2"]
        sub.set_content_filter("")
        assert not sub.is_cft_enabled
        publisher.publish(String(data="drop too"))
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            emailmw.spin_once(node, timeout_sec=0.1)
        assert got[-1] == "drop too"
        assert context.ok()
    finally:
        emailmw.try_shutdown()
