"""The service types of ``rcl_interfaces``, loaded from the interface files of
``emailmw/share/rcl_interfaces/srv`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("rcl_interfaces").srv
DescribeParameters = _types.DescribeParameters
GetLoggerLevels = _types.GetLoggerLevels
GetParameterTypes = _types.GetParameterTypes
GetParameters = _types.GetParameters
ListParameters = _types.ListParameters
SetLoggerLevels = _types.SetLoggerLevels
SetParameters = _types.SetParameters
SetParametersAtomically = _types.SetParametersAtomically

__all__ = [
    "DescribeParameters",
    "GetLoggerLevels",
    "GetParameterTypes",
    "GetParameters",
    "ListParameters",
    "SetLoggerLevels",
    "SetParameters",
    "SetParametersAtomically",
]
