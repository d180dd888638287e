"""rclpy's ``rclpy.action.client``."""

from .._ros.action import ActionClient, ClientGoalHandle

__all__ = ["ActionClient", "ClientGoalHandle"]
