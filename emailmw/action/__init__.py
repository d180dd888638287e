"""rclpy's ``rclpy.action``: action servers and clients over email (``docs/ros-users.md``,
"Actions")."""

from .._ros.action import get_action_names_and_types
from .client import ActionClient
from .server import ActionServer, CancelResponse, GoalResponse

__all__ = [
    "ActionClient",
    "ActionServer",
    "CancelResponse",
    "GoalResponse",
    "get_action_names_and_types",
]
