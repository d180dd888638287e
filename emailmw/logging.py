"""rclpy's ``rclpy.logging``: named loggers and their levels."""

from ._core.ros_logging import (
    LoggingSeverity,
    RcutilsLogger,
    get_logger,
    get_logger_level,
    set_logger_level,
)


def get_logger_effective_level(name: str) -> LoggingSeverity:
    """The level logger ``name`` logs at (its own, a parent's, or the default)."""
    return get_logger(name).get_effective_level()


__all__ = [
    "LoggingSeverity",
    "RcutilsLogger",
    "get_logger",
    "get_logger_effective_level",
    "get_logger_level",
    "set_logger_level",
]
