"""The launch layer: ROS 2's launch descriptions (Python, XML, YAML) evaluated into the
processes ``emailmw launch`` starts, and the launch service that runs them and their event
handlers (docs/ros-users.md)."""

from .description import (
    LaunchContext,
    LaunchError,
    LaunchProcess,
    evaluate,
    launch_context,
    load_python_launch_file,
)
from .frontend import frontend_description
from .service import LaunchService, run_launch

__all__ = [
    "LaunchContext",
    "LaunchError",
    "LaunchProcess",
    "LaunchService",
    "evaluate",
    "frontend_description",
    "launch_context",
    "load_python_launch_file",
    "run_launch",
]
