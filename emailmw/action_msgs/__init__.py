"""ROS 2's ``action_msgs`` interfaces as emailmw ships them
(``emailmw/share/action_msgs``), imported as in rclpy with the ``emailmw.`` prefix."""

from . import msg, srv

__all__ = ["msg", "srv"]
