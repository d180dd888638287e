"""The message types of ``rcl_interfaces``, loaded from the interface files of
``emailmw/share/rcl_interfaces/msg`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("rcl_interfaces").msg
FloatingPointRange = _types.FloatingPointRange
IntegerRange = _types.IntegerRange
ListParametersResult = _types.ListParametersResult
Log = _types.Log
LoggerLevel = _types.LoggerLevel
Parameter = _types.Parameter
ParameterDescriptor = _types.ParameterDescriptor
ParameterEvent = _types.ParameterEvent
ParameterType = _types.ParameterType
ParameterValue = _types.ParameterValue
SetLoggerLevelsResult = _types.SetLoggerLevelsResult
SetParametersResult = _types.SetParametersResult

__all__ = [
    "FloatingPointRange",
    "IntegerRange",
    "ListParametersResult",
    "Log",
    "LoggerLevel",
    "Parameter",
    "ParameterDescriptor",
    "ParameterEvent",
    "ParameterType",
    "ParameterValue",
    "SetLoggerLevelsResult",
    "SetParametersResult",
]
