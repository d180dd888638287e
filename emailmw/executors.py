"""rclpy's ``rclpy.executors``: executors that spin nodes and run their callbacks."""

from ._core.errors import ExternalShutdownException
from ._ros.executor import (
    Executor,
    MultiThreadedExecutor,
    ShutdownException,
    SingleThreadedExecutor,
    TimeoutException,
)

__all__ = [
    "Executor",
    "ExternalShutdownException",
    "MultiThreadedExecutor",
    "ShutdownException",
    "SingleThreadedExecutor",
    "TimeoutException",
]
