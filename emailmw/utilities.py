"""rclpy's ``rclpy.utilities``."""

from ._context import get_default_context, ok, shutdown, try_shutdown
from ._parameters import remove_ros_args

__all__ = [
    "get_default_context",
    "ok",
    "remove_ros_args",
    "shutdown",
    "try_shutdown",
]
