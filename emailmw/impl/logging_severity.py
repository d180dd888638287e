"""rclpy's ``rclpy.impl.logging_severity``: :class:`LoggingSeverity` (rcutils' levels)."""

from .._core.ros_logging import LoggingSeverity

__all__ = ["LoggingSeverity"]
