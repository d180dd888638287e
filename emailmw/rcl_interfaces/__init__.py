"""ROS 2's ``rcl_interfaces`` interfaces as emailmw ships them
(``emailmw/share/rcl_interfaces``), imported as in rclpy with the ``emailmw.`` prefix."""

from . import msg, srv

__all__ = ["msg", "srv"]
