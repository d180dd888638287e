"""rclpy's ``rclpy.duration``: :class:`Duration`."""

from ._ros.time import Duration

__all__ = [
    "Duration",
]
