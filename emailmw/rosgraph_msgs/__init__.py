"""ROS 2's ``rosgraph_msgs`` interfaces as emailmw ships them
(``emailmw/share/rosgraph_msgs``), imported as in rclpy with the ``emailmw.`` prefix."""

from . import msg

__all__ = ["msg"]
