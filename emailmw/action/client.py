"""rclpy's ``rclpy.action.client``."""

from .._action import ActionClient, ClientGoalHandle

__all__ = ["ActionClient", "ClientGoalHandle"]
