"""ROS 2's ``unique_identifier_msgs`` interfaces as emailmw ships them
(``emailmw/share/unique_identifier_msgs``), imported as in rclpy with the ``emailmw.`` prefix."""

from . import msg

__all__ = ["msg"]
