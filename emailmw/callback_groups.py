"""rclpy's ``rclpy.callback_groups``."""

from ._ros.callback_groups import (
    CallbackGroup,
    MutuallyExclusiveCallbackGroup,
    ReentrantCallbackGroup,
)

__all__ = [
    "CallbackGroup",
    "MutuallyExclusiveCallbackGroup",
    "ReentrantCallbackGroup",
]
