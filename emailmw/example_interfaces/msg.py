"""The message types of ``example_interfaces``, loaded from the interface files of
``emailmw/share/example_interfaces/msg`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("example_interfaces").msg
Bool = _types.Bool
Byte = _types.Byte
ByteMultiArray = _types.ByteMultiArray
Char = _types.Char
Empty = _types.Empty
Float32 = _types.Float32
Float32MultiArray = _types.Float32MultiArray
Float64 = _types.Float64
Float64MultiArray = _types.Float64MultiArray
Int16 = _types.Int16
Int16MultiArray = _types.Int16MultiArray
Int32 = _types.Int32
Int32MultiArray = _types.Int32MultiArray
Int64 = _types.Int64
Int64MultiArray = _types.Int64MultiArray
Int8 = _types.Int8
Int8MultiArray = _types.Int8MultiArray
MultiArrayDimension = _types.MultiArrayDimension
MultiArrayLayout = _types.MultiArrayLayout
String = _types.String
UInt16 = _types.UInt16
UInt16MultiArray = _types.UInt16MultiArray
UInt32 = _types.UInt32
UInt32MultiArray = _types.UInt32MultiArray
UInt64 = _types.UInt64
UInt64MultiArray = _types.UInt64MultiArray
UInt8 = _types.UInt8
UInt8MultiArray = _types.UInt8MultiArray
WString = _types.WString

__all__ = [
    "Bool",
    "Byte",
    "ByteMultiArray",
    "Char",
    "Empty",
    "Float32",
    "Float32MultiArray",
    "Float64",
    "Float64MultiArray",
    "Int16",
    "Int16MultiArray",
    "Int32",
    "Int32MultiArray",
    "Int64",
    "Int64MultiArray",
    "Int8",
    "Int8MultiArray",
    "MultiArrayDimension",
    "MultiArrayLayout",
    "String",
    "UInt16",
    "UInt16MultiArray",
    "UInt32",
    "UInt32MultiArray",
    "UInt64",
    "UInt64MultiArray",
    "UInt8",
    "UInt8MultiArray",
    "WString",
]
