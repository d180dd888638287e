"""rclpy's parameters (``emailmw.parameter``) and ROS's command-line arguments: pure, no
I/O but reading a params file.

* :class:`Parameter` (its ``Type``, ``value``, the ``rcl_interfaces`` messages it maps to);
* :func:`parse_ros_args`: the ``--ros-args`` sections of a command line (``-p name:=value``,
  ``--params-file FILE``, ``--log-level [name:=]level``, ``-r from:=to`` with
  ``__node``/``__ns``), as :class:`RosArgs`;
* :func:`read_params_file`: a params YAML file in ROS's format (node name, or ``/**``,
  then ``ros__parameters``, nested names joined with ``.``).

Errors are one line naming the argument or the file: :class:`~emailmw.ConfigError`.
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import yaml

from ._exceptions import ConfigError, yaml_error
from .rcl_interfaces.msg import Parameter as ParameterMsg
from .rcl_interfaces.msg import ParameterType, ParameterValue

__all__ = [
    "Parameter",
    "RosArgs",
    "parameter_dict_from_yaml_file",
    "parameter_value_to_python",
    "parse_ros_args",
    "read_params_file",
    "remove_ros_args",
]

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
            raise TypeError(f"{value!r} is not a value a parameter can hold")

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
            raise TypeError(f"type_ must be a Parameter.Type, got {type_!r}")
        if not type_.check(value) and not (type_ == Parameter.Type.NOT_SET and value is None):
            if (
                type_ == Parameter.Type.DOUBLE
                and isinstance(value, int)
                and not isinstance(value, bool)
            ):
                value = float(value)  # type: ignore[assignment]
            else:
                raise ValueError(f"parameter {name!r}: {value!r} is not a {type_.name}")
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


# ----------------------------------------------------------------------------- ros args


@dataclass
class RosArgs:
    """What the ``--ros-args`` sections of a command line say."""

    #: ``-p name:=value`` (a ``node:name:=value`` for one node), in order
    params: list[tuple[str | None, str, Any]] = field(default_factory=list)
    #: ``--params-file FILE``, in order
    params_files: list[str] = field(default_factory=list)
    #: ``--log-level [name:=]level``: logger name ("" for all) -> level
    log_levels: dict[str, str] = field(default_factory=dict)
    #: ``-r [node:]from:=to`` for names (``__node``/``__ns`` are taken out)
    remaps: list[tuple[str | None, str, str]] = field(default_factory=list)
    node_name: str | None = None
    namespace: str | None = None

    def overrides_for(self, node_name: str, fqn: str) -> dict[str, Any]:
        """The parameter values these arguments give node ``node_name`` (fully qualified
        ``fqn``): params files in order, then ``-p`` (later ones win)."""
        values: dict[str, Any] = {}
        for path in self.params_files:
            values.update(read_params_file(path, node_name, fqn))
        for node, name, value in self.params:
            if node is None or node in (node_name, fqn):
                values[name] = value
        return values

    def remap(self, name: str, node_name: str) -> str:
        """``name`` (a fully qualified topic or service name) after the ``-r`` rules."""
        for node, source, target in self.remaps:
            if node is not None and node != node_name:
                continue
            if name in (source, "/" + source.lstrip("/")):
                return target if target.startswith("/") else "/" + target
        return name

    def merged(self, other: RosArgs) -> RosArgs:
        """These arguments, then ``other``'s (a node's own after the global ones)."""
        return RosArgs(
            [*self.params, *other.params],
            [*self.params_files, *other.params_files],
            {**self.log_levels, **other.log_levels},
            [*other.remaps, *self.remaps],
            other.node_name or self.node_name,
            other.namespace or self.namespace,
        )


def _value(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # ROS takes what is not YAML as a string


def _assignment(text: str, what: str) -> tuple[str | None, str, str]:
    """``[node:]name:=value`` as (node, name, value)."""
    name, sep, value = text.partition(":=")
    if not sep or not name:
        raise ConfigError(f"{what} {text!r}: expected NAME:=VALUE", source="--ros-args")
    node, colon, rest = name.partition(":")
    return (node, rest, value) if colon else (None, name, value)


def parse_ros_args(args: Sequence[str] | None) -> RosArgs:
    """The ``--ros-args`` sections of ``args`` (each ends at ``--`` or at the next
    ``--ros-args``); :class:`~emailmw.ConfigError` names an argument it cannot use."""
    found = RosArgs()
    items = list(args or ())
    inside = False
    i = 0
    while i < len(items):
        arg = items[i]
        i += 1
        if arg == "--ros-args":
            inside = True
            continue
        if not inside:
            continue
        if arg == "--":
            inside = False
            continue

        def value(option: str = arg) -> str:
            nonlocal i
            if i >= len(items):
                raise ConfigError(f"{option} needs a value", source="--ros-args")
            i += 1
            return items[i - 1]

        if arg in ("-p", "--param"):
            node, name, text = _assignment(value(), arg)
            found.params.append((node, name, _value(text, name)))
        elif arg == "--params-file":
            path = value()
            if not Path(path).is_file():
                raise ConfigError(f"--params-file {path}: no such file", source="--ros-args")
            found.params_files.append(path)
        elif arg == "--log-level":
            text = value()
            name, sep, level = text.partition(":=")
            found.log_levels["" if not sep else name] = level if sep else text
        elif arg in ("-r", "--remap"):
            node, source, target = _assignment(value(), arg)
            if source == "__node":
                found.node_name = target
            elif source == "__ns":
                found.namespace = target
            else:
                found.remaps.append((node, source, target))
        elif arg in ("-e", "--enclave", "--log-config-file"):
            value()  # accepted; emailmw has no enclaves or logging configuration files
        elif arg in ("--enable-rosout-logs", "--disable-rosout-logs", "--enable-stdout-logs",
                     "--disable-stdout-logs", "--enable-external-lib-logs",
                     "--disable-external-lib-logs"):  # fmt: skip
            pass
        else:
            raise ConfigError(
                f"{arg!r} is not a ROS argument emailmw knows (-p, --params-file, "
                "--log-level, -r); end the --ros-args section with --",
                source="--ros-args",
            )
    return found


def remove_ros_args(args: Sequence[str] | None) -> list[str]:
    """``args`` without its ``--ros-args`` sections (rclpy's
    ``rclpy.utilities.remove_ros_args``)."""
    out = []
    inside = False
    for arg in args or ():
        if arg == "--ros-args":
            inside = True
        elif inside and arg == "--":
            inside = False
        elif not inside:
            out.append(arg)
    return out


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def parameter_dict_from_yaml_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """A params file as node pattern -> {parameter name: value}."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc.strerror}", source=str(path)) from exc
    except yaml.YAMLError as exc:
        raise yaml_error(exc, str(path)) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("a params file maps node names to ros__parameters", source=str(path))
    out = {}
    for node, section in data.items():
        if not isinstance(section, dict) or "ros__parameters" not in section:
            raise ConfigError(
                f"{node}: expected a 'ros__parameters' mapping under the node name",
                source=str(path),
            )
        params = section["ros__parameters"] or {}
        if not isinstance(params, dict):
            raise ConfigError(f"{node}: ros__parameters is a mapping", source=str(path))
        out[str(node)] = _flatten(params)
    return out


def _matches(pattern: str, node_name: str, fqn: str) -> bool:
    if pattern in (node_name, fqn, "/**"):
        return True
    if "*" in pattern:
        glob = pattern.replace("/**", "/*")
        return fnmatch.fnmatchcase(fqn, glob) or fnmatch.fnmatchcase(fqn, pattern)
    return False


def read_params_file(path: str | Path, node_name: str, fqn: str) -> dict[str, Any]:
    """The parameters a params file gives node ``node_name`` (``fqn``): its wildcard
    sections first, then the node's own."""
    sections = parameter_dict_from_yaml_file(path)
    values: dict[str, Any] = {}
    for pattern, params in sorted(sections.items(), key=lambda kv: "*" not in kv[0]):
        if _matches(pattern, node_name, fqn):
            values.update(params)
    return values
