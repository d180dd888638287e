"""ROS 2's ``launch.actions``."""

from .._launch.description import (
    DeclareLaunchArgument,
    EmitEvent,
    ExecuteProcess,
    GroupAction,
    IncludeLaunchDescription,
    LogInfo,
    OpaqueFunction,
    RegisterEventHandler,
    SetEnvironmentVariable,
    SetLaunchConfiguration,
    Shutdown,
    TimerAction,
    UnregisterEventHandler,
)

__all__ = [
    "DeclareLaunchArgument",
    "EmitEvent",
    "ExecuteProcess",
    "GroupAction",
    "IncludeLaunchDescription",
    "LogInfo",
    "OpaqueFunction",
    "RegisterEventHandler",
    "SetEnvironmentVariable",
    "SetLaunchConfiguration",
    "Shutdown",
    "TimerAction",
    "UnregisterEventHandler",
]
