"""rclpy's parameters (``emailmw.parameter``): pure, no I/O.

* :class:`Parameter` (its ``Type``, ``value``, the ``rcl_interfaces`` messages it maps to);
* :func:`parameter_value_to_python`. The command line's and params files' side:
  ``_ros_args``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from .._core.errors import ArgumentTypeError, InvalidArgumentError
from .._core.ros_args import params_file_sections
from ..rcl_interfaces.msg import Parameter as ParameterMsg
from ..rcl_interfaces.msg import ParameterType, ParameterValue

__all__ = ["Parameter", "parameter_dict_from_yaml_file", "parameter_value_to_python"]

T = TypeVar("T")


class Parameter(Generic[T]):
    """A named parameter value of one of ROS's parameter types (rclpy's ``Parameter``)."""

    class Type(enum.IntEnum):
        NOT_SET = ParameterType.PARAMETER_NOT_SET
        BOOL = ParameterType.PARAMETER_BOOL
        INTEGER = ParameterType.PARAMETER_INTEGER
        DOUBLE = ParameterType.PARAMETER_DOUBLE
        STRING = ParameterType.PARAMETER_STRING
        BYTE_ARRAY = ParameterType.PARAMETER_BYTE_ARRAY
        BOOL_ARRAY = ParameterType.PARAMETER_BOOL_ARRAY
        INTEGER_ARRAY = ParameterType.PARAMETER_INTEGER_ARRAY
        DOUBLE_ARRAY = ParameterType.PARAMETER_DOUBLE_ARRAY
        STRING_ARRAY = ParameterType.PARAMETER_STRING_ARRAY

        @classmethod
        def from_parameter_value(cls, parameter_value: Any) -> Parameter.Type:
            """The type of a Python value; ``TypeError`` for one no parameter holds."""
            value = parameter_value
            if value is None:
                return cls.NOT_SET
            if isinstance(value, bool):
                return cls.BOOL
            if isinstance(value, int):
                return cls.INTEGER
            if isinstance(value, float):
                return cls.DOUBLE
            if isinstance(value, str):
                return cls.STRING
            if isinstance(value, bytes):
                return cls.BYTE_ARRAY
            if isinstance(value, list | tuple):
                kinds: tuple[tuple[Parameter.Type, Callable[[Any], bool]], ...] = (
                    (cls.BYTE_ARRAY, lambda v: isinstance(v, bytes)),
                    (cls.BOOL_ARRAY, lambda v: isinstance(v, bool)),
                    (cls.INTEGER_ARRAY, lambda v: isinstance(v, int) and not isinstance(v, bool)),
                    (cls.DOUBLE_ARRAY, lambda v: isinstance(v, float)),
                    (cls.STRING_ARRAY, lambda v: isinstance(v, str)),
                )
                for kind, check in kinds:
                    if all(check(v) for v in value):
                        return kind
            raise ArgumentTypeError(f"{value!r} is not a value a parameter can hold")

        def check(self, parameter_value: Any) -> bool:
            """Whether ``parameter_value`` is of this type."""
            try:
                found = Parameter.Type.from_parameter_value(parameter_value)
            except TypeError:
                return False
            if found == self:
                return True
            empty = isinstance(parameter_value, list | tuple) and not parameter_value
            return empty and self.name.endswith("_ARRAY")

    def __init__(self, name: str, type_: Parameter.Type | None = None, value: T = None) -> None:  # type: ignore[assignment]
        if type_ is None:
            type_ = Parameter.Type.from_parameter_value(value)
        if not isinstance(type_, Parameter.Type):
            raise ArgumentTypeError(f"type_ must be a Parameter.Type, got {type_!r}")
        if not type_.check(value) and not (type_ == Parameter.Type.NOT_SET and value is None):
            if (
                type_ == Parameter.Type.DOUBLE
                and isinstance(value, int)
                and not isinstance(value, bool)
            ):
                value = float(value)  # type: ignore[assignment]
            else:
                raise InvalidArgumentError(f"parameter {name!r}: {value!r} is not a {type_.name}")
        if isinstance(value, tuple):
            value = list(value)  # type: ignore[assignment]
        self._name = name
        self._type = type_
        self._value = value

    @property
    def name(self) -> str:
        return self._name

    @property
    def type_(self) -> Parameter.Type:
        return self._type

    @property
    def value(self) -> T:
        return self._value

    def __repr__(self) -> str:
        return f"Parameter({self._name!r}, {self._type.name}, {self._value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Parameter) and (other.name, other.type_, other.value) == (
            self.name,
            self.type_,
            self.value,
        )

    def __hash__(self) -> int:
        return hash((self._name, self._type))

    def get_parameter_value(self) -> Any:
        """The ``rcl_interfaces/msg/ParameterValue`` of this parameter."""
        kind = self._type
        value: Any = self._value
        out = ParameterValue(type=int(kind))
        field_name = _VALUE_FIELDS.get(kind)
        if field_name is not None:
            if kind == Parameter.Type.BYTE_ARRAY:
                value = [b[0] if isinstance(b, bytes) else int(b) for b in value]
            elif kind == Parameter.Type.DOUBLE_ARRAY:
                value = [float(v) for v in value]
            setattr(out, field_name, list(value) if isinstance(value, list | tuple) else value)
        return out

    def to_parameter_msg(self) -> Any:
        """The ``rcl_interfaces/msg/Parameter`` of this parameter."""
        return ParameterMsg(name=self._name, value=self.get_parameter_value())

    @classmethod
    def from_parameter_msg(cls, param_msg: Any) -> Parameter[Any]:
        value = parameter_value_to_python(param_msg.value)
        return cls(param_msg.name, Parameter.Type(param_msg.value.type), value)


# the field of an rcl_interfaces/msg/ParameterValue that holds a value of each type
_VALUE_FIELDS: Final[dict[Parameter.Type, str]] = {
    Parameter.Type.BOOL: "bool_value",
    Parameter.Type.INTEGER: "integer_value",
    Parameter.Type.DOUBLE: "double_value",
    Parameter.Type.STRING: "string_value",
    Parameter.Type.BYTE_ARRAY: "byte_array_value",
    Parameter.Type.BOOL_ARRAY: "bool_array_value",
    Parameter.Type.INTEGER_ARRAY: "integer_array_value",
    Parameter.Type.DOUBLE_ARRAY: "double_array_value",
    Parameter.Type.STRING_ARRAY: "string_array_value",
}


def parameter_value_to_python(parameter_value: Any) -> Any:
    """The Python value of an ``rcl_interfaces/msg/ParameterValue`` (None: not set)."""
    kind = Parameter.Type(parameter_value.type)
    if kind == Parameter.Type.NOT_SET:
        return None
    field_name = _VALUE_FIELDS[kind]
    value = getattr(parameter_value, field_name)
    if kind == Parameter.Type.BYTE_ARRAY:
        return [bytes([v]) for v in value]
    return list(value) if isinstance(value, list) else value


def parameter_dict_from_yaml_file(
    parameter_file: str,
    use_wildcard: bool = False,
    target_nodes: list[str] | None = None,
    namespace: str = "",
) -> dict[str, Any]:
    """rclpy's: the parameters of a params file as ``rcl_interfaces/msg/Parameter``
    messages keyed by their names (nested mappings flattened with ``.``, ``namespace``
    put before each name). The sections of ``target_nodes``, else of every node; with
    ``use_wildcard`` the ``/**`` section first (a node's own values win). RuntimeError,
    as rclpy, when a target node has no section or nothing is selected; a file that is not
    a params file is a :class:`~emailmw.ConfigError` naming it."""
    sections = params_file_sections(parameter_file)
    keys = ["/**"] if use_wildcard and "/**" in sections else []
    if target_nodes:
        for node in target_nodes:
            if node not in sections:
                raise RuntimeError(
                    f"Param file does not contain parameters for {node}, only for nodes: "
                    f"{list(sections)}"
                )
            keys.append(node)
    else:
        keys += [key for key in sections if key != "/**"]
    if not keys:
        raise RuntimeError("Param file does not contain selected parameters")
    values: dict[str, Any] = {}
    for key in keys:
        values.update(sections[key])
    return {
        f"{namespace}{name}": Parameter(f"{namespace}{name}", value=value).to_parameter_msg()
        for name, value in values.items()
    }
