"""rclpy's ``rclpy.utilities``."""

from ._core.ros_args import remove_ros_args
from ._delivery.context import get_default_context, ok, shutdown, try_shutdown

__all__ = [
    "get_default_context",
    "ok",
    "remove_ros_args",
    "shutdown",
    "try_shutdown",
]
