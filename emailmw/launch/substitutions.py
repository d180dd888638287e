"""ROS 2's ``launch.substitutions``."""

from .._launch.description import (
    Command,
    EnvironmentVariable,
    FindExecutable,
    LaunchConfiguration,
    LocalSubstitution,
    PathJoinSubstitution,
    PythonExpression,
    TextSubstitution,
    ThisLaunchFile,
    ThisLaunchFileDir,
)

__all__ = [
    "Command",
    "EnvironmentVariable",
    "FindExecutable",
    "LaunchConfiguration",
    "LocalSubstitution",
    "PathJoinSubstitution",
    "PythonExpression",
    "TextSubstitution",
    "ThisLaunchFile",
    "ThisLaunchFileDir",
]
