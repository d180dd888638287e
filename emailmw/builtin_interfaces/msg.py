"""The message types of ``builtin_interfaces``, loaded from the interface files of
``emailmw/share/builtin_interfaces/msg`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("builtin_interfaces").msg
Duration = _types.Duration
Time = _types.Time

__all__ = [
    "Duration",
    "Time",
]
