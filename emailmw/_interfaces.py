"""Typed messages and services: dataclasses with a ROS type name, carried as YAML bodies.

A message type is a dataclass registered under ``pkg/msg/Name`` with :func:`message`; a
service type bundles a request and a response type under ``pkg/srv/Name`` with
:func:`service`. On the wire the body is YAML (readable in any mail client, as rmw_email's
YAML conversion) and the type name travels in a ``Message-Type`` header.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVar

import yaml

from ._exceptions import TypeMismatchError
from ._wire import HEADER_MESSAGE_TYPE

__all__ = [
    "HEADER_MESSAGE_TYPE",
    "ServiceType",
    "deserialize",
    "get_interface",
    "interface_names",
    "message",
    "serialize",
    "service",
    "type_name",
]

T = TypeVar("T")
_REGISTRY: dict[str, Any] = {}


def message(name: str) -> Callable[[type[T]], type[T]]:
    """Register a message type under ``name`` (``pkg/msg/Name``); makes it a dataclass."""
    parts = name.split("/")
    if len(parts) != 3 or parts[1] != "msg" or not all(parts):
        raise ValueError(f"a message type name looks like pkg/msg/Name, got {name!r}")

    def register(cls: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(cls):
            cls = dataclasses.dataclass(cls)
        cls.__emailmw_type__ = name  # type: ignore[attr-defined]
        _REGISTRY[name] = cls
        return cls

    return register


@dataclasses.dataclass(frozen=True)
class ServiceType:
    """A service type: ``Request`` and ``Response`` message classes under ``pkg/srv/Name``."""

    name: str
    Request: type[Any]
    Response: type[Any]


def service(name: str, request: type[Any], response: type[Any]) -> ServiceType:
    """Register a service type; its request and response must be dataclasses."""
    parts = name.split("/")
    if len(parts) != 3 or parts[1] != "srv" or not all(parts):
        raise ValueError(f"a service type name looks like pkg/srv/Name, got {name!r}")
    parts_: list[Any] = []
    for part, given in (("Request", request), ("Response", response)):
        cls: Any = given if dataclasses.is_dataclass(given) else dataclasses.dataclass(given)
        cls.__emailmw_type__ = f"{name}_{part}"
        _REGISTRY[f"{name}_{part}"] = cls
        parts_.append(cls)
    srv = ServiceType(name, parts_[0], parts_[1])
    _REGISTRY[name] = srv
    return srv


def type_name(cls_or_obj: Any) -> str:
    name = getattr(cls_or_obj, "__emailmw_type__", None)
    if name is None:
        raise TypeError(f"{cls_or_obj!r} is not a registered emailmw message type")
    return str(name)


def get_interface(name: str) -> Any:
    """The registered message class or :class:`ServiceType` called ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown interface {name!r}") from None


def interface_names() -> list[str]:
    return sorted(n for n in _REGISTRY if "/srv/" not in n or "_" not in n.rpartition("/")[2])


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def serialize(msg: Any) -> str:
    """YAML text of a message instance."""
    type_name(msg)
    return str(yaml.safe_dump(_plain(msg), sort_keys=False, allow_unicode=True))


def _build(cls: Any, data: Any, where: str) -> Any:
    if isinstance(cls, type) and dataclasses.is_dataclass(cls):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise TypeMismatchError(f"{where}: expected a mapping for {cls.__name__}")
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise TypeMismatchError(f"{where}: unknown field(s) {sorted(unknown)}")
        return cls(**{k: _build(hints[k], v, f"{where}.{k}") for k, v in data.items()})
    origin = typing.get_origin(cls)
    if origin is list:
        (item,) = typing.get_args(cls) or (Any,)
        if not isinstance(data, list):
            raise TypeMismatchError(f"{where}: expected a list")
        return [_build(item, v, f"{where}[{i}]") for i, v in enumerate(data)]
    if cls is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if cls in (int, float, str, bool) and not (
        isinstance(data, cls) and not (cls is int and isinstance(data, bool))
    ):
        raise TypeMismatchError(f"{where}: expected {cls.__name__}, got {data!r}")
    return data


def deserialize(cls: type[T], text: str) -> T:
    """An instance of ``cls`` from YAML text; :class:`TypeMismatchError` if it does not fit."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TypeMismatchError(f"body is not YAML: {exc}") from exc
    result: T = _build(cls, data, type_name(cls))
    return result


# ----------------------------------------------------------------------------- built-ins


@message("builtin_interfaces/msg/Time")
class Time:
    sec: int = 0
    nanosec: int = 0


@message("std_msgs/msg/String")
class String:
    data: str = ""


@message("std_msgs/msg/Bool")
class Bool:
    data: bool = False


@message("std_msgs/msg/Int64")
class Int64:
    data: int = 0


@message("std_msgs/msg/Float64")
class Float64:
    data: float = 0.0


@message("std_msgs/msg/Empty")
class Empty:
    pass


@message("std_msgs/msg/Header")
class Header:
    stamp: Time = dataclasses.field(default_factory=Time)
    frame_id: str = ""


@dataclasses.dataclass
class _AddTwoIntsRequest:
    a: int = 0
    b: int = 0


@dataclasses.dataclass
class _AddTwoIntsResponse:
    sum: int = 0


@dataclasses.dataclass
class _TriggerRequest:
    pass


@dataclasses.dataclass
class _TriggerResponse:
    success: bool = False
    message: str = ""


@dataclasses.dataclass
class _SetBoolRequest:
    data: bool = False


@dataclasses.dataclass
class _SetBoolResponse:
    success: bool = False
    message: str = ""


AddTwoInts = service("example_interfaces/srv/AddTwoInts", _AddTwoIntsRequest, _AddTwoIntsResponse)
Trigger = service("example_interfaces/srv/Trigger", _TriggerRequest, _TriggerResponse)
SetBool = service("example_interfaces/srv/SetBool", _SetBoolRequest, _SetBoolResponse)

builtin_interfaces = SimpleNamespace(msg=SimpleNamespace(Time=Time))
std_msgs = SimpleNamespace(
    msg=SimpleNamespace(
        String=String, Bool=Bool, Int64=Int64, Float64=Float64, Empty=Empty, Header=Header
    )
)
example_interfaces = SimpleNamespace(
    srv=SimpleNamespace(AddTwoInts=AddTwoInts, Trigger=Trigger, SetBool=SetBool)
)
