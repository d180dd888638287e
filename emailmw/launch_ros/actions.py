"""ROS 2's ``launch_ros.actions``."""

from .._launch.description import Node, PushROSNamespace, PushRosNamespace, SetParameter

__all__ = ["Node", "PushROSNamespace", "PushRosNamespace", "SetParameter"]
