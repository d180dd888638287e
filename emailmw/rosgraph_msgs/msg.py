"""The message types of ``rosgraph_msgs``, loaded from the interface files of
``emailmw/share/rosgraph_msgs/msg`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("rosgraph_msgs").msg
Clock = _types.Clock

__all__ = [
    "Clock",
]
