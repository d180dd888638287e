"""rclpy's ``rclpy.signals``."""

from ._delivery.context import SignalHandlerOptions

__all__ = [
    "SignalHandlerOptions",
]
