"""The service types of ``example_interfaces``, loaded from the interface files of
``emailmw/share/example_interfaces/srv`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("example_interfaces").srv
AddTwoInts = _types.AddTwoInts
SetBool = _types.SetBool
Trigger = _types.Trigger

__all__ = [
    "AddTwoInts",
    "SetBool",
    "Trigger",
]
