"""ROS 2's ``builtin_interfaces`` interfaces as emailmw ships them
(``emailmw/share/builtin_interfaces``), imported as in rclpy with the ``emailmw.`` prefix."""

from . import msg

__all__ = ["msg"]
