"""rclpy's ``rclpy.time``: :class:`Time`."""

from ._ros.time import Time

__all__ = [
    "Time",
]
