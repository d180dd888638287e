"""ROS 2's ``example_interfaces`` interfaces as emailmw ships them
(``emailmw/share/example_interfaces``), imported as in rclpy with the ``emailmw.`` prefix."""

from . import action, msg, srv

__all__ = ["msg", "srv", "action"]
