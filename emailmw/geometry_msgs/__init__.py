"""ROS 2's ``geometry_msgs`` interfaces as emailmw ships them
(``emailmw/share/geometry_msgs``), imported as in rclpy with the ``emailmw.`` prefix."""

from . import msg

__all__ = ["msg"]
