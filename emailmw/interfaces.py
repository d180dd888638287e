"""ROS interface files (``.msg``, ``.srv``, ``.action``) loaded at run time: a user's own
package works as emailmw's shipped ones do (``docs/ros-users.md``, "Interfaces")."""

from ._core.interfaces import (
    ActionType,
    ServiceType,
    get_interface,
    interface_names,
    load,
    package,
    show,
)

__all__ = [
    "ActionType",
    "ServiceType",
    "get_interface",
    "interface_names",
    "load",
    "package",
    "show",
]
