"""Typed messages, services and actions: dataclasses with a ROS type name, carried as YAML
bodies.

Types come from ROS interface files (``.msg``, ``.srv``, ``.action``; ``_idl``): the
packages emailmw ships (``emailmw/share``: ``std_msgs``, ``geometry_msgs``,
``builtin_interfaces``, ``example_interfaces``, ``rcl_interfaces``, ``action_msgs``,
``unique_identifier_msgs``), loaded on first use, and a user's own (:func:`load`). A type
can also be a Python dataclass registered with :func:`message` / :func:`service`.

A message class is a dataclass with the ROS field names, in order, and their defaults (a
field's ``.msg`` default, else zero, ``""``, ``False``, ``[]``, a fixed-size array of
zeros or a default nested message); constants are class attributes. Values are checked
when a message is serialized or deserialized (integer ranges, bounded strings and
arrays): :class:`~emailmw.TypeMismatchError` names the field. ``byte`` and ``char`` are
ints (0..255), arrays are lists (rclpy gives ``array.array`` and numpy arrays).

On the wire the body is YAML (readable in any mail client, as rmw_email's YAML
conversion) and the type name travels in a ``Message-Type`` header. Thread-safe.
"""

from __future__ import annotations

import dataclasses
import threading
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final, TypeVar

import yaml

from .errors import (
    ArgumentTypeError,
    InterfaceError,
    InvalidArgumentError,
    NotFoundError,
    TypeMismatchError,
)
from .idl import (
    INTEGER_RANGES,
    ActionSpec,
    FieldSpec,
    MessageSpec,
    PackageSpecs,
    ServiceSpec,
    TypeSpec,
    read_package,
    strip_comment,
)
from .wire import HEADER_MESSAGE_TYPE

__all__ = [
    "HEADER_MESSAGE_TYPE",
    "SHIPPED_PACKAGES",
    "ActionType",
    "ServiceType",
    "deserialize",
    "get_interface",
    "interface_names",
    "load",
    "message",
    "package",
    "serialize",
    "service",
    "show",
    "type_name",
]

T = TypeVar("T")
_SHARE: Final = Path(__file__).parent.parent / "share"
#: the interface packages emailmw ships, loaded on first use
SHIPPED_PACKAGES: Final = tuple(sorted(p.name for p in _SHARE.iterdir() if p.is_dir()))
_REGISTRY: dict[str, Any] = {}
_PACKAGES: dict[str, SimpleNamespace] = {}
_LOCK = threading.RLock()
_ZERO: Final = {"bool": False, "float32": 0.0, "float64": 0.0, "string": "", "wstring": ""}
#: the ROS type a Python-defined field's annotation stands for
_ROS_OF_PYTHON: Final = {str: "string", int: "int64", float: "float64", bool: "bool"}


def message(name: str) -> Callable[[type[T]], type[T]]:
    """Register a message type under ``name`` (``pkg/msg/Name``); makes it a dataclass."""
    parts = name.split("/")
    if len(parts) != 3 or parts[1] != "msg" or not all(parts):
        raise InvalidArgumentError(f"a message type name looks like pkg/msg/Name, got {name!r}")

    def register(cls: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(cls):
            cls = dataclasses.dataclass(cls)
        cls.__emailmw_type__ = name  # type: ignore[attr-defined]
        with _LOCK:
            _REGISTRY[name] = cls
        return cls

    return register


@dataclasses.dataclass(frozen=True)
class ServiceType:
    """A service type: ``Request`` and ``Response`` message classes under ``pkg/srv/Name``
    (rclpy's ``AddTwoInts.Request()``)."""

    name: str
    Request: type[Any]
    Response: type[Any]


@dataclasses.dataclass(frozen=True)
class ActionType:
    """An action type under ``pkg/action/Name`` (rclpy's ``Fibonacci.Goal()``): its
    ``Goal``, ``Result`` and ``Feedback`` classes, and what the action protocol sends
    (``Impl``: ``SendGoalService``, ``GetResultService``, ``FeedbackMessage``,
    ``CancelGoalService``, ``GoalStatusMessage``, as rclpy names them)."""

    name: str
    Goal: type[Any]
    Result: type[Any]
    Feedback: type[Any]
    Impl: SimpleNamespace


def service(name: str, request: type[Any], response: type[Any]) -> ServiceType:
    """Register a service type; its request and response must be dataclasses."""
    parts = name.split("/")
    if len(parts) != 3 or parts[1] != "srv" or not all(parts):
        raise InvalidArgumentError(f"a service type name looks like pkg/srv/Name, got {name!r}")
    parts_: list[Any] = []
    with _LOCK:
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
        raise ArgumentTypeError(f"{cls_or_obj!r} is not a registered emailmw message type")
    return str(name)


# ----------------------------------------------------------------------------- generation


def _spec_of(cls: Any) -> MessageSpec | None:
    spec = getattr(cls, "__emailmw_spec__", None)
    return spec if isinstance(spec, MessageSpec) else None


def _element_default(kind: TypeSpec, resolve: Callable[[str], Any]) -> Any:
    if kind.base in INTEGER_RANGES:
        return 0
    if kind.base in _ZERO:
        return _ZERO[kind.base]
    return resolve(kind.base)()


def _python_type(kind: TypeSpec, resolve: Callable[[str], Any]) -> Any:
    if kind.base in INTEGER_RANGES:
        element: Any = int
    elif kind.base in ("float32", "float64"):
        element = float
    elif kind.base == "bool":
        element = bool
    elif kind.base in ("string", "wstring"):
        element = str
    else:
        element = resolve(kind.base)
    return list[element] if kind.array else element


def _field(spec: Any, resolve: Callable[[str], Any]) -> tuple[str, Any, Any]:
    kind: TypeSpec = spec.type
    pytype = _python_type(kind, resolve)
    if spec.has_default:
        value = spec.default
        if isinstance(value, list):
            return spec.name, pytype, dataclasses.field(default_factory=lambda: list(value))
        return spec.name, pytype, dataclasses.field(default=value)
    if kind.array:
        if kind.size is None:
            return spec.name, pytype, dataclasses.field(default_factory=list)
        size = kind.size
        return (
            spec.name,
            pytype,
            dataclasses.field(
                default_factory=lambda: [_element_default(kind, resolve) for _ in range(size)]
            ),
        )
    if kind.primitive:
        return spec.name, pytype, dataclasses.field(default=_element_default(kind, resolve))
    return spec.name, pytype, dataclasses.field(default_factory=resolve(kind.base))


def _make_class(spec: MessageSpec, resolve: Callable[[str], Any]) -> type[Any]:
    package, kind, short = spec.name.split("/")
    namespace: dict[str, Any] = {c.name: c.value for c in spec.constants}
    namespace["__emailmw_type__"] = spec.name
    namespace["__emailmw_spec__"] = spec
    namespace["__module__"] = f"emailmw.{package}.{kind}"
    cls = dataclasses.make_dataclass(
        short, [_field(f, resolve) for f in spec.fields], namespace=namespace
    )
    return cls


def _register_package(specs: PackageSpecs) -> SimpleNamespace:
    """Build and register the types of ``specs`` (its messages first, in the order they
    need each other); their namespace (``msg``, ``srv``, ``action``)."""
    own = {m.name: m for m in specs.messages}
    building: list[MessageSpec] = []

    def resolve(name: str) -> Any:
        with _LOCK:
            found = _REGISTRY.get(name)
            if found is not None:
                return found
            if name in own:
                if own[name] in building:
                    raise InterfaceError(f"{own[name].source or name}: {name} contains itself")
                building.append(own[name])
                try:
                    cls = _make_class(own[name], resolve)
                finally:
                    building.pop()
                _REGISTRY[name] = cls
                return cls
            pkg = name.split("/", maxsplit=1)[0]
            if pkg in SHIPPED_PACKAGES and pkg not in _PACKAGES and pkg != specs.name:
                package(pkg)
                return resolve(name)
        where = building[-1].source if building and building[-1].source else specs.name
        raise InterfaceError(
            f"{where}: unknown type {name} (no such message in {specs.name}; one of another "
            "package: load that package first, emailmw.interfaces.load(DIR))"
        )

    msg = SimpleNamespace()
    srv = SimpleNamespace()
    act = SimpleNamespace()
    with _LOCK:
        for spec in specs.messages:
            setattr(msg, spec.name.rpartition("/")[2], resolve(spec.name))
        for service_spec in specs.services:
            setattr(srv, service_spec.name.rpartition("/")[2], _service_type(service_spec, resolve))
        for action_spec in specs.actions:
            setattr(act, action_spec.name.rpartition("/")[2], _action_type(action_spec, resolve))
        found = SimpleNamespace(msg=msg, srv=srv, action=act)
        _PACKAGES[specs.name] = found
    return found


def _part(spec: MessageSpec, resolve: Callable[[str], Any]) -> type[Any]:
    with _LOCK:
        cls = _make_class(spec, resolve)
        _REGISTRY[spec.name] = cls
    return cls


def _service_type(spec: ServiceSpec, resolve: Callable[[str], Any]) -> ServiceType:
    srv = ServiceType(spec.name, _part(spec.request, resolve), _part(spec.response, resolve))
    _REGISTRY[spec.name] = srv
    _TEXTS[spec.name] = spec.text
    return srv


def _action_type(spec: ActionSpec, resolve: Callable[[str], Any]) -> ActionType:
    goal, result, feedback = (_part(s, resolve) for s in (spec.goal, spec.result, spec.feedback))
    name = spec.name
    uuid = FieldSpec("goal_id", TypeSpec("unique_identifier_msgs/msg/UUID"))

    def part(part_name: str, *fields: FieldSpec) -> type[Any]:
        text = "\n".join(f"{f.type.ros()} {f.name}" for f in fields)
        return _part(MessageSpec(f"{name}_{part_name}", fields, (), text), resolve)

    send_goal = ServiceType(
        f"{name}_SendGoal",
        part("SendGoal_Request", uuid, FieldSpec("goal", TypeSpec(f"{name}_Goal"))),
        part(
            "SendGoal_Response",
            FieldSpec("accepted", TypeSpec("bool")),
            FieldSpec("stamp", TypeSpec("builtin_interfaces/msg/Time")),
        ),
    )
    get_result = ServiceType(
        f"{name}_GetResult",
        part("GetResult_Request", uuid),
        part(
            "GetResult_Response",
            FieldSpec("status", TypeSpec("int8")),
            FieldSpec("result", TypeSpec(f"{name}_Result")),
        ),
    )
    feedback_message = part(
        "FeedbackMessage", uuid, FieldSpec("feedback", TypeSpec(f"{name}_Feedback"))
    )
    for srv in (send_goal, get_result):
        _REGISTRY[srv.name] = srv
    impl = SimpleNamespace(
        SendGoalService=send_goal,
        GetResultService=get_result,
        FeedbackMessage=feedback_message,
        CancelGoalService=get_interface("action_msgs/srv/CancelGoal"),
        GoalStatusMessage=get_interface("action_msgs/msg/GoalStatusArray"),
    )
    action = ActionType(name, goal, result, feedback, impl)
    _REGISTRY[name] = action
    _TEXTS[name] = spec.text
    return action


_TEXTS: dict[str, str] = {}  # service and action name -> its file's text
# libyaml's safe loader and dumper where PyYAML has them (ten times faster), else PyYAML's
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def package(name: str) -> SimpleNamespace:
    """The types of a loaded package, or of a shipped one (loaded now): a namespace with
    ``msg``, ``srv`` and ``action``. Raises ``KeyError`` for an unknown package."""
    with _LOCK:
        found = _PACKAGES.get(name)
        if found is not None:
            return found
        if name not in SHIPPED_PACKAGES:
            raise NotFoundError(f"no interface package {name!r} (loaded: {sorted(_PACKAGES)})")
        return _register_package(read_package(_SHARE / name, name))


def load(path: str | Path) -> SimpleNamespace:
    """Load a package of ROS interface files (a directory with ``msg/``, ``srv/``,
    ``action/``; its name from ``package.xml``, else the directory's): its types are
    registered (usable by name, ``emailmw interface show``, the wire) and returned as a
    namespace with ``msg``, ``srv`` and ``action``, as ``from pkg.msg import X`` gives
    them. Nested types of other packages must be loaded first (emailmw's shipped ones
    load by themselves). Raises :class:`~emailmw.InterfaceError` naming the file and line
    for a definition it cannot read."""
    specs = read_package(path)
    with _LOCK:
        if specs.name in SHIPPED_PACKAGES:
            raise InterfaceError(f"{path}: {specs.name} is a package emailmw ships")
        return _register_package(specs)


def get_interface(name: str) -> Any:
    """The message class, :class:`ServiceType` or :class:`ActionType` called ``name``
    (``std_msgs/msg/String``); a shipped package loads on first use. Raises ``KeyError``."""
    with _LOCK:
        found = _REGISTRY.get(name)
        if found is not None:
            return found
        pkg = name.split("/", maxsplit=1)[0]
        if pkg in SHIPPED_PACKAGES and pkg not in _PACKAGES:
            package(pkg)
            found = _REGISTRY.get(name)
    if found is None:
        raise NotFoundError(f"unknown interface {name!r}")
    return found


def event_type(srv: ServiceType) -> type[Any]:
    """The message type of ``srv``'s introspection events, ``pkg/srv/Name_Event`` (ROS 2's,
    Iron on: ``service_msgs/ServiceEventInfo info``, and the request and the response, at
    most one each), made when first asked for."""
    name = f"{srv.name}_Event"
    with _LOCK:
        found = _REGISTRY.get(name)
        if found is not None:
            return found  # type: ignore[no-any-return]
    fields = (
        FieldSpec("info", TypeSpec("service_msgs/msg/ServiceEventInfo")),
        FieldSpec("request", TypeSpec(f"{srv.name}_Request", array=True, bound=1)),
        FieldSpec("response", TypeSpec(f"{srv.name}_Response", array=True, bound=1)),
    )
    text = "\n".join(f"{f.type.ros()} {f.name}" for f in fields)
    get_interface("service_msgs/msg/ServiceEventInfo")  # (its package loaded)
    return _part(MessageSpec(name, fields, (), text), get_interface)


_INTERNAL_SUFFIXES: Final = (
    "_Request", "_Response", "_Goal", "_Result", "_Feedback", "_SendGoal", "_GetResult",
    "_FeedbackMessage", "_Event",
)  # fmt: skip


def interface_names() -> list[str]:
    """Every message, service and action type (shipped packages included), sorted."""
    for pkg in SHIPPED_PACKAGES:
        package(pkg)
    with _LOCK:
        names = list(_REGISTRY)
    return sorted(
        n
        for n in names
        if n.split("/")[1] == "msg"
        or not any(n.rpartition("/")[2].endswith(s) for s in _INTERNAL_SUFFIXES)
    )


# ----------------------------------------------------------------------------- show


def _definition_lines(cls: Any) -> list[str]:
    """A message's fields and constants as ``.msg`` lines, without comments."""
    spec = _spec_of(cls)
    if spec is None:
        hints = typing.get_type_hints(cls)
        return [f"{_ros_of(hints[f.name])} {f.name}" for f in dataclasses.fields(cls)]
    lines = []
    for raw in spec.text.splitlines():
        line = strip_comment(raw).strip()
        if line:
            lines.append(line)
    return lines


def _ros_of(annotation: Any) -> str:
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return _ros_of(item) + "[]"
    if annotation in _ROS_OF_PYTHON:
        return _ROS_OF_PYTHON[annotation]
    name = getattr(annotation, "__emailmw_type__", None)
    return str(name).replace("/msg/", "/") if name else getattr(annotation, "__name__", "?")


def _expanded(cls: Any, indent: str, top: bool) -> list[str]:
    """``cls``'s definition, ros2 interface show's way: the file's text at the top (its
    comments too), each nested message's fields expanded one tab further."""
    spec = _spec_of(cls)
    source = spec.text.splitlines() if (spec is not None and top) else _definition_lines(cls)
    out = []
    nested = {} if spec is None else {f.name: f.type for f in spec.fields}
    hints = {} if spec is not None else typing.get_type_hints(cls)
    for line in source:
        out.append(indent + line)
        words = line.split("#", 1)[0].split()
        if len(words) < 2 or "=" in words[1]:
            continue
        kind = nested.get(words[1])
        if kind is not None and not kind.primitive:
            out += _expanded(get_interface(kind.base), indent + "\t", False)
        elif spec is None and words[1] in hints:
            inner = hints[words[1]]
            if typing.get_origin(inner) is list:
                (inner,) = typing.get_args(inner)
            if dataclasses.is_dataclass(inner):
                out += _expanded(inner, indent + "\t", False)
    return out


def show(name: str) -> str:
    """The definition of interface ``name`` as ``ros2 interface show`` prints it: the
    file's text, nested types expanded with a tab (``---`` between a service's or an
    action's parts). Raises ``KeyError`` for an unknown one."""
    kind = get_interface(name)
    if isinstance(kind, ServiceType):
        parts = [kind.Request, kind.Response]
    elif isinstance(kind, ActionType):
        parts = [kind.Goal, kind.Result, kind.Feedback]
    else:
        return "\n".join(_expanded(kind, "", True))
    return "\n---\n".join("\n".join(_expanded(p, "", True)) for p in parts)


# ----------------------------------------------------------------------------- (de)serialize


def _check_value(value: Any, kind: TypeSpec, where: str) -> Any:
    """``value`` as a field of ``kind`` holds it (ints as floats for a float field), or
    :class:`TypeMismatchError` naming ``where``."""
    base = kind.base
    if base in INTEGER_RANGES:
        low, high = INTEGER_RANGES[base]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise TypeMismatchError(f"{where}: {value!r} is not a {base} ({low} to {high})")
        return value if type(value) is int else int(value)  # (an IntEnum's member: its int)
    if base in ("float32", "float64"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeMismatchError(f"{where}: {value!r} is not a {base}")
        return float(value)
    if base == "bool":
        if not isinstance(value, bool):
            raise TypeMismatchError(f"{where}: {value!r} is not a bool")
        return value
    if not isinstance(value, str):
        raise TypeMismatchError(f"{where}: {value!r} is not a string")
    if kind.string_bound is not None and len(value) > kind.string_bound:
        raise TypeMismatchError(f"{where}: {value!r} is longer than {kind.string_bound}")
    return value if type(value) is str else str.__str__(value)  # (a StrEnum's: its text)


def _check_array(value: Any, kind: TypeSpec, where: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise TypeMismatchError(f"{where}: expected a list, got {value!r}")
    if kind.size is not None and len(value) != kind.size:
        raise TypeMismatchError(f"{where}: {len(value)} items where {kind.size} go")
    if kind.bound is not None and len(value) > kind.bound:
        raise TypeMismatchError(f"{where}: {len(value)} items, at most {kind.bound}")
    return list(value)


def _plain(value: Any, where: str) -> Any:
    """``value`` as plain data (dicts, lists, scalars), checked against its spec."""
    spec = _spec_of(type(value)) if dataclasses.is_dataclass(value) else None
    if spec is not None:
        out: dict[str, Any] = {}
        for f in spec.fields:
            item = getattr(value, f.name)
            here = f"{where}.{f.name}"
            if f.type.array:
                items = _check_array(item, f.type, here)
                out[f.name] = [_plain_item(v, f.type, f"{here}[{i}]") for i, v in enumerate(items)]
            else:
                out[f.name] = _plain_item(item, f.type, here)
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), where) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v, where) for v in value]
    return value


def _plain_item(value: Any, kind: TypeSpec, where: str) -> Any:
    if kind.primitive:
        return _check_value(value, kind, where)
    expected = get_interface(kind.base)
    if not isinstance(value, expected):
        raise TypeMismatchError(f"{where}: expected a {kind.base}, got {value!r}")
    return _plain(value, where)


def serialize(msg: Any) -> str:
    """YAML text of a message instance; :class:`TypeMismatchError` (naming the field)
    when a value does not fit its type."""
    name = type_name(msg)
    return str(yaml.dump(_plain(msg, name), Dumper=_Dumper, sort_keys=False, allow_unicode=True))


def _build_item(kind: TypeSpec, data: Any, where: str) -> Any:
    if kind.primitive:
        return _check_value(data, kind, where)
    return _build(get_interface(kind.base), data, where)


def _build(cls: Any, data: Any, where: str) -> Any:
    spec = _spec_of(cls)
    if spec is not None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise TypeMismatchError(f"{where}: expected a mapping for {spec.name}")
        known = {f.name: f for f in spec.fields}
        unknown = set(data) - set(known)
        if unknown:
            raise TypeMismatchError(f"{where}: unknown field(s) {sorted(unknown)}")
        values = {}
        for key, item in data.items():
            f = known[key]
            here = f"{where}.{key}"
            if f.type.array:
                items = _check_array(item if item is not None else [], f.type, here)
                values[key] = [_build_item(f.type, v, f"{here}[{i}]") for i, v in enumerate(items)]
            else:
                values[key] = _build_item(f.type, item, here)
        return cls(**values)
    if isinstance(cls, type) and dataclasses.is_dataclass(cls):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise TypeMismatchError(f"{where}: expected a mapping for {cls.__name__}")
        hints = typing.get_type_hints(cls)
        known_names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known_names
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
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise TypeMismatchError(f"body is not YAML: {exc}") from exc
    result: T = _build(cls, data, type_name(cls))
    return result


def from_data(cls: type[T], data: Any) -> T:
    """An instance of ``cls`` from plain data (what YAML gives); checked as
    :func:`deserialize` checks."""
    result: T = _build(cls, data, type_name(cls))
    return result


def to_data(msg: Any) -> Any:
    """Plain data of a message (what :func:`serialize` writes as YAML), checked."""
    return _plain(msg, type_name(msg))


def shipped_types(names: Iterable[str]) -> dict[str, Any]:
    """``{short name: type}`` of the given full names (for the message modules)."""
    return {n.rpartition("/")[2]: get_interface(n) for n in names}
