"""The message types of ``unique_identifier_msgs``, loaded from the interface files of
``emailmw/share/unique_identifier_msgs/msg`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("unique_identifier_msgs").msg
UUID = _types.UUID

__all__ = [
    "UUID",
]
