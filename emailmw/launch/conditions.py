"""ROS 2's ``launch.conditions``."""

from .._launch.description import (
    IfCondition,
    LaunchConfigurationEquals,
    LaunchConfigurationNotEquals,
    UnlessCondition,
)

__all__ = [
    "IfCondition",
    "LaunchConfigurationEquals",
    "LaunchConfigurationNotEquals",
    "UnlessCondition",
]
