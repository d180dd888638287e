"""rclpy's ``rclpy.action.server``."""

from .._ros.action import (
    ActionServer,
    CancelResponse,
    GoalResponse,
    ServerGoalHandle,
    default_cancel_callback,
    default_goal_callback,
    default_handle_accepted_callback,
)

__all__ = [
    "ActionServer",
    "CancelResponse",
    "GoalResponse",
    "ServerGoalHandle",
    "default_cancel_callback",
    "default_goal_callback",
    "default_handle_accepted_callback",
]
