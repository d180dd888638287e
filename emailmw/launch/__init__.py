"""ROS 2's ``launch`` for emailmw: ``from launch import LaunchDescription`` becomes
``from emailmw.launch import LaunchDescription``; ``emailmw launch FILE.launch.py`` runs the
file (docs/ros-users.md lists what is supported)."""

from .._launch.description import (
    Action,
    Condition,
    LaunchContext,
    LaunchDescription,
    LaunchDescriptionSource,
    Substitution,
)
from . import (
    actions,
    conditions,
    event_handlers,
    events,
    launch_description_sources,
    substitutions,
)

__all__ = [
    "Action",
    "Condition",
    "LaunchContext",
    "LaunchDescription",
    "LaunchDescriptionSource",
    "Substitution",
    "actions",
    "conditions",
    "event_handlers",
    "events",
    "launch_description_sources",
    "substitutions",
]
