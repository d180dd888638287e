"""rclpy's ``rclpy.task``: :class:`Future` and :class:`Task`."""

from ._core.futures import Future, Task

__all__ = [
    "Future",
    "Task",
]
