"""emailmw's message types as rosbags sees them: a rosbags typestore with every emailmw type
registered from its ROS definition (so that bags carry ROS 2's message definitions and CDR
that ``ros2 bag``, Foxglove and the ``rosbags``/``mcap`` readers accept), and the
conversions between emailmw's plain message data (what the YAML body holds) and rosbags'
message objects."""

from __future__ import annotations

import dataclasses
import threading
import typing
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from rosbags.interfaces import Nodetype
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from .errors import ConfigError
from .idl import MessageSpec, strip_comment
from .interfaces import get_interface

__all__ = ["BagTypes"]

#: numpy's dtype of each primitive array element (rosbags holds numeric arrays so)
_DTYPES: Final = {
    "bool": np.bool_,
    "byte": np.uint8,
    "char": np.uint8,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "uint32": np.uint32,
    "int64": np.int64,
    "uint64": np.uint64,
    "float32": np.float32,
    "float64": np.float64,
}
_ROS_OF_PYTHON: Final = {str: "string", int: "int64", float: "float64", bool: "bool"}


def _definition(cls: Any) -> tuple[str, list[str]]:
    """The ``.msg`` text of a message class and the message types it names."""
    spec: MessageSpec | None = getattr(cls, "__emailmw_spec__", None)
    if spec is not None:
        lines = [strip_comment(line).strip() for line in spec.text.splitlines()]
        text = "\n".join(line for line in lines if line)
        nested = [f.type.base for f in spec.fields if not f.type.primitive]
        return text, nested
    lines, nested = [], []
    for f in dataclasses.fields(cls):
        kind = typing.get_type_hints(cls)[f.name]
        array = typing.get_origin(kind) is list
        if array:
            (kind,) = typing.get_args(kind)
        name = _ROS_OF_PYTHON.get(kind)
        if name is None:
            name = str(kind.__emailmw_type__)
            nested.append(name)
        lines.append(f"{name}{'[]' if array else ''} {f.name}")
    return "\n".join(lines), nested


#: the field ROS (and rosbags) give a message without fields, such as std_msgs/msg/Empty
_EMPTY_FILLER = "structure_needs_at_least_one_member"


def _ros_name(name: str) -> str:
    """A type's name in a ROS 2 message definition: ``pkg/msg/X`` as ``pkg/X``; a part of
    a service or an action whole (``pkg/action/X_Feedback``)."""
    parts = name.split("/")
    return f"{parts[0]}/{parts[2]}" if len(parts) == 3 and parts[1] == "msg" else name


def _base_kind(arg: tuple[str, int]) -> str:
    base, limit = arg
    return f"string<={limit}" if base == "string" and limit else base


class BagTypes:
    """A typestore holding the emailmw types a bag needs, registered on first use, with
    their ROS definitions; converts plain message data to and from CDR. Thread-safe."""

    def __init__(self) -> None:
        self.store: Typestore = get_typestore(Stores.EMPTY)
        self._lock = threading.Lock()
        self._known: set[str] = set()
        self._builders: dict[str, Callable[[Any], Any]] = {}

    def register(self, type_name: str) -> None:
        """Register ``type_name`` (``pkg/msg/Name``) and the types it contains."""
        if type_name in self._known:  # (a set's membership test is atomic)
            return
        with self._lock:
            pending = [type_name]
            found: dict[str, Any] = {}
            while pending:
                name = pending.pop()
                if name in self._known or name in found:
                    continue
                text, nested = _definition(get_interface(name))
                if any(line.split()[0].startswith("wstring") for line in text.splitlines()):
                    raise ConfigError(
                        f"{type_name} holds a wstring field, which rosbags (and so emailmw's "
                        "bags) cannot serialize: such messages are left out of bags",
                        source="bag",
                    )
                # rosbags names a type by its ROS name; a part of a service or action
                # (pkg/srv/X_Request) is registered as what it is
                found.update(get_types_from_msg(text, name))
                pending += nested
            if found:
                self.store.register(found)
                self._known.update(found)

    def msgdef(self, type_name: str) -> str:
        """The ROS 2 message definition rosbag2 stores with a connection of ``type_name``:
        its fields, then each nested type's in a ``MSG: name`` section, as rosbags writes
        them. Rosbags' own generator takes ``pkg/msg`` types only (a message that nests an
        action's or a service's part, an action's ``FeedbackMessage``, failed its
        assertion): here a ``pkg/msg/X`` is named ``pkg/X`` and any other by its whole
        name, as ROS 2 names them."""
        self.register(type_name)
        with self._lock:
            nested: dict[str, str] = {}
            main = self._deftext(type_name, nested)
        rule = "=" * 80
        return "".join([main, *(f"{rule}\nMSG: {_ros_name(k)}\n{v}" for k, v in nested.items())])

    def _deftext(self, name: str, nested: dict[str, str]) -> str:
        constants, fields = self.store.fielddefs[name]
        lines = [f"{kind} {cname}={value}" for cname, kind, value in constants]
        for field_name, desc in fields:
            if field_name != _EMPTY_FILLER:
                lines.append(f"{self._field_kind(desc, nested)} {field_name}")
        lines.append("")
        return "\n".join(lines)

    def _field_kind(self, desc: Any, nested: dict[str, str]) -> str:
        node, arg = desc
        if node == Nodetype.BASE:
            return _base_kind(arg)
        if node == Nodetype.NAME:
            self._nest(arg, nested)
            return _ros_name(arg)
        (subnode, subarg), count = arg
        size = "" if count == 0 else str(count) if node == Nodetype.ARRAY else f"<={count}"
        if subnode == Nodetype.BASE:
            return f"{_base_kind(subarg)}[{size}]"
        self._nest(subarg, nested)
        return f"{_ros_name(subarg)}[{size}]"

    def _nest(self, name: str, nested: dict[str, str]) -> None:
        if name not in nested:
            nested[name] = ""  # (its place, in the order they are met: rosbags' order)
            nested[name] = self._deftext(name, nested)

    def to_cdr(self, type_name: str, data: Any) -> bytes:
        """CDR bytes of ``data`` (a message's plain data) as ``type_name``."""
        self.register(type_name)
        return bytes(self.store.serialize_cdr(self._object(type_name, data), type_name))

    def from_cdr(self, type_name: str, raw: bytes | memoryview) -> Any:
        """The plain data of CDR bytes of ``type_name``."""
        self.register(type_name)
        return self._plain(self.store.deserialize_cdr(bytes(raw), type_name))

    def _object(self, type_name: str, data: Any) -> Any:
        """A rosbags message object of ``type_name`` from plain data (every field)."""
        build = self._builders.get(type_name)
        if build is None:
            build = self._builders[type_name] = self._builder(type_name)
        return build(data)

    def _builder(self, type_name: str) -> Callable[[Any], Any]:
        """The function from plain data to a rosbags object of ``type_name``, made once
        from the type's field definitions (what the recorder runs for every message)."""
        cls = self.store.types[type_name]
        parts = [(name, self._converter(kind)) for name, kind in self.store.fielddefs[type_name][1]]
        if [name for name, _ in parts] == [_EMPTY_FILLER]:
            return lambda _: cls(0)

        def build(data: Any) -> Any:
            return cls(*[data[n] if f is None else f(data[n]) for n, f in parts])

        return build

    def _converter(self, definition: Any) -> Callable[[Any], Any] | None:
        """How to convert a field's plain value (None: it is taken as it is)."""
        node, inner = definition
        if node.name == "NAME":  # a nested message
            return lambda value: self._object(inner, value)
        if node.name in ("ARRAY", "SEQUENCE"):
            element = inner[0]
            if element[0].name == "BASE":
                dtype = _DTYPES.get(element[1][0])
                if dtype is not None:
                    return lambda value: np.array(value, dtype=dtype)
                return list
            name = element[1]
            return lambda value: [self._object(name, item) for item in value]
        return None

    def _plain(self, message: Any) -> Any:
        if isinstance(message, np.ndarray):
            return [item.item() for item in message]
        if isinstance(message, list):
            return [self._plain(item) for item in message]
        if dataclasses.is_dataclass(message) and not isinstance(message, type):
            return {
                f.name: self._plain(getattr(message, f.name))
                for f in dataclasses.fields(message)
                if f.name not in ("__msgtype__", _EMPTY_FILLER) and not f.name.isupper()
            }
        if isinstance(message, np.generic):
            return message.item()
        return message
