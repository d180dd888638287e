"""ROS 2's ``launch`` for emailmw: ``from launch import LaunchDescription`` becomes
``from emailmw.launch import LaunchDescription``; ``emailmw launch FILE.launch.py`` runs the
file, and a script can run a description itself with ``LaunchService`` (docs/ros-users.md
lists what is supported)."""

from .._launch.description import (
    Action,
    Condition,
    LaunchContext,
    LaunchDescription,
    LaunchDescriptionSource,
    Substitution,
)
from .._launch.events import Event, EventHandler
from .._launch.service import LaunchIntrospector, LaunchService
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
    "Event",
    "EventHandler",
    "LaunchContext",
    "LaunchDescription",
    "LaunchDescriptionSource",
    "LaunchIntrospector",
    "LaunchService",
    "Substitution",
    "actions",
    "conditions",
    "event_handlers",
    "events",
    "launch_description_sources",
    "substitutions",
]
