"""The service types of ``action_msgs``, loaded from the interface files of
``emailmw/share/action_msgs/srv`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("action_msgs").srv
CancelGoal = _types.CancelGoal

__all__ = [
    "CancelGoal",
]
