"""ROS 2's ``service_msgs`` interfaces as emailmw ships them (``emailmw/share/service_msgs``),
imported as in rclpy with the ``emailmw.`` prefix."""

from . import msg

__all__ = ["msg"]
