"""ROS 2's ``launch_ros`` for emailmw: ``from launch_ros.actions import Node`` becomes
``from emailmw.launch_ros.actions import Node`` (docs/ros-users.md)."""

from . import actions, parameter_descriptions, substitutions

__all__ = ["actions", "parameter_descriptions", "substitutions"]
