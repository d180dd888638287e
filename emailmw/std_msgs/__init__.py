"""ROS 2's ``std_msgs`` interfaces as emailmw ships them
(``emailmw/share/std_msgs``), imported as in rclpy with the ``emailmw.`` prefix."""

from . import msg

__all__ = ["msg"]
