"""The message types of ``action_msgs``, loaded from the interface files of
``emailmw/share/action_msgs/msg`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("action_msgs").msg
GoalInfo = _types.GoalInfo
GoalStatus = _types.GoalStatus
GoalStatusArray = _types.GoalStatusArray

__all__ = [
    "GoalInfo",
    "GoalStatus",
    "GoalStatusArray",
]
