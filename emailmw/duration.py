"""rclpy's ``rclpy.duration``: :class:`Duration`."""

from ._ros_time import Duration

__all__ = [
    "Duration",
]
