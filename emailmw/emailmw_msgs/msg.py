"""The message types of ``emailmw_msgs``, loaded from the interface files of
``emailmw/share/emailmw_msgs/msg`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("emailmw_msgs").msg
MessageInfo = _types.MessageInfo

__all__ = [
    "MessageInfo",
]
