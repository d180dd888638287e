"""ROS 2's ``launch.substitutions``."""

from .._launch.description import (
    EnvironmentVariable,
    LaunchConfiguration,
    PathJoinSubstitution,
    PythonExpression,
    TextSubstitution,
    ThisLaunchFile,
    ThisLaunchFileDir,
)

__all__ = [
    "EnvironmentVariable",
    "LaunchConfiguration",
    "PathJoinSubstitution",
    "PythonExpression",
    "TextSubstitution",
    "ThisLaunchFile",
    "ThisLaunchFileDir",
]
