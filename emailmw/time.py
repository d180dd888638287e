"""rclpy's ``rclpy.time``: :class:`Time`."""

from ._ros_time import Time

__all__ = [
    "Time",
]
