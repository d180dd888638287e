"""rclpy's ``wait_for_message``: the next message of a topic, without spinning the node."""

from __future__ import annotations

import time
from typing import Any, TypeVar

from .._core.errors import ClosedError
from .._core.qos import QoSProfile
from .._core.waitables import deadline_after, wait_until_deadline
from .node import Node

__all__ = ["wait_for_message"]

T = TypeVar("T")


def wait_for_message(
    msg_type: type[T],
    node: Node,
    topic: str,
    *,
    qos_profile: QoSProfile | int = 1,
    time_to_wait: float = -1,
) -> tuple[bool, T | None]:
    """Wait for the next message of ``topic`` (``msg_type``) on ``node``, at most
    ``time_to_wait`` seconds (negative: without end), as rclpy's does: ``(True, msg)``, or
    ``(False, None)`` on timeout or when the context shuts down. A subscription of its own
    is made for the wait and destroyed after; the node's other callbacks do not run.
    The message is settled (acknowledged where that applies) once it is returned."""
    got: list[T] = []
    subscription = node.create_subscription(msg_type, topic, got.append, qos_profile)
    try:
        deadline = deadline_after(time_to_wait)
        core = subscription._core
        while not got:
            try:
                if not wait_until_deadline(core, core.has_message, deadline):
                    return False, None
            except ClosedError:
                return False, None
            for work in subscription.take(time.monotonic()):
                result: Any = work()
                del result
        return True, got[0]
    finally:
        node.destroy_subscription(subscription)
