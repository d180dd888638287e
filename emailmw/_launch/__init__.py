"""The launch layer: ROS 2's launch descriptions (Python, XML, YAML) evaluated into the
processes ``emailmw launch`` starts (docs/ros-users.md)."""

from .description import LaunchError, LaunchProcess, evaluate, load_python_launch_file
from .frontend import frontend_description

__all__ = [
    "LaunchError",
    "LaunchProcess",
    "evaluate",
    "frontend_description",
    "load_python_launch_file",
]
