"""rclpy's ``rclpy.task``: :class:`Future` and :class:`Task`."""

from ._future import Future, Task

__all__ = [
    "Future",
    "Task",
]
