"""rclpy's ``rclpy.service_introspection``: :class:`ServiceIntrospectionState`, what a
service's or client's ``configure_introspection`` publishes."""

from ._ros.introspection import ServiceIntrospectionState

__all__ = ["ServiceIntrospectionState"]
