"""rclpy's ``rclpy.signals``."""

from ._context import SignalHandlerOptions

__all__ = [
    "SignalHandlerOptions",
]
