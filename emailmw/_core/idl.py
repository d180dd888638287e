"""ROS 2 interface definitions (``.msg``, ``.srv``, ``.action``) as users write them, parsed
into specs: pure functions, no I/O but :func:`read_package`'s reading of files.

The grammar is ROS 2's (``docs/ros-users.md``, "Interfaces"):

* a field is ``TYPE name`` or ``TYPE name DEFAULT``; a constant is ``TYPE NAME=VALUE``
  (a primitive type; names in upper case);
* ``TYPE`` is a primitive (``bool``, ``byte``, ``char``, ``float32``, ``float64``, ``int8``
  to ``int64``, ``uint8`` to ``uint64``, ``string``, ``wstring``), a bounded string
  (``string<=N``), or a message of this package (``Point``) or another
  (``geometry_msgs/Point``, ``geometry_msgs/msg/Point``); with ``[]`` an unbounded array,
  ``[N]`` a fixed-size one, ``[<=N]`` a bounded one;
* ``#`` starts a comment (outside a quoted string); blank lines are ignored;
* a ``.srv`` is a request and a response separated by ``---``; an ``.action`` a goal, a
  result and a feedback.

Every error names the file, the line and what is wrong: :class:`~emailmw.InterfaceError`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .errors import InterfaceError

__all__ = [
    "INTEGER_RANGES",
    "PRIMITIVES",
    "ActionSpec",
    "ConstantSpec",
    "FieldSpec",
    "MessageSpec",
    "PackageSpecs",
    "ServiceSpec",
    "TypeSpec",
    "parse_action",
    "parse_message",
    "parse_service",
    "read_package",
    "strip_comment",
]

#: the range of each integer type: [low, high]
INTEGER_RANGES: Final = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
    "byte": (0, 2**8 - 1),
    "char": (0, 2**8 - 1),
}
PRIMITIVES: Final = frozenset({"bool", "float32", "float64", "string", "wstring", *INTEGER_RANGES})
_NAME: Final = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
_CONSTANT: Final = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*")
_TYPE: Final = re.compile(
    r"(?P<base>[A-Za-z][A-Za-z0-9_]*(?:/(?:msg/)?[A-Za-z][A-Za-z0-9_]*)?)"
    r"(?:<=(?P<strbound>\d+))?"
    r"(?:\[(?P<array>(?:<=)?\d*)\])?"
)
_PACKAGE: Final = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """A field's type: ``base`` is a primitive or ``pkg/msg/Name``; ``array`` says whether
    it is an array, ``size`` its fixed size, ``bound`` its upper bound; ``string_bound``
    the bound of a bounded string (of the elements, for an array)."""

    base: str
    array: bool = False
    size: int | None = None
    bound: int | None = None
    string_bound: int | None = None

    @property
    def primitive(self) -> bool:
        return self.base in PRIMITIVES

    def ros(self) -> str:
        """The type as a ``.msg`` file writes it (``int64``, ``string<=5``,
        ``geometry_msgs/Point[]``)."""
        base = self.base.replace("/msg/", "/")
        if self.string_bound is not None:
            base += f"<={self.string_bound}"
        if self.size is not None:
            return f"{base}[{self.size}]"
        if self.bound is not None:
            return f"{base}[<={self.bound}]"
        return f"{base}[]" if self.array else base


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    type: TypeSpec
    default: Any = None  # None: the type's own default
    has_default: bool = False


@dataclass(frozen=True, slots=True)
class ConstantSpec:
    name: str
    type: TypeSpec
    value: Any


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """One message type: ``pkg/msg/Name`` (or a service's or action's part), its fields and
    constants, and the text it was parsed from."""

    name: str
    fields: tuple[FieldSpec, ...] = ()
    constants: tuple[ConstantSpec, ...] = ()
    text: str = ""
    source: str = ""  # the file it was read from

    @property
    def package(self) -> str:
        return self.name.split("/")[0]


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    request: MessageSpec
    response: MessageSpec
    text: str = ""


@dataclass(frozen=True, slots=True)
class ActionSpec:
    name: str
    goal: MessageSpec
    result: MessageSpec
    feedback: MessageSpec
    text: str = ""


@dataclass
class PackageSpecs:
    """What one package directory defines."""

    name: str
    messages: list[MessageSpec] = field(default_factory=list)
    services: list[ServiceSpec] = field(default_factory=list)
    actions: list[ActionSpec] = field(default_factory=list)


def strip_comment(line: str) -> str:
    """``line`` without its comment: a ``#`` outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == "\\":
                continue
            if char == quote and line[i - 1] != "\\":
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:i]
    return line


class _Where:
    def __init__(self, source: str, line: int) -> None:
        self.source, self.line = source, line

    def error(self, what: str) -> InterfaceError:
        return InterfaceError(f"{self.source}:{self.line}: {what}")


def _parse_type(text: str, package: str, where: _Where) -> TypeSpec:
    found = _TYPE.fullmatch(text)
    if found is None:
        raise where.error(f"{text!r} is not a type")
    base = found["base"]
    if "/" in base:
        pkg, _, name = base.replace("/msg/", "/").partition("/")
        if not _PACKAGE.fullmatch(pkg):
            raise where.error(f"{pkg!r} is not a package name")
        base = f"{pkg}/msg/{name}"
    elif base not in PRIMITIVES:
        base = f"{package}/msg/{base}"
    strbound = found["strbound"]
    if strbound is not None and base not in ("string", "wstring"):
        raise where.error(f"only strings take a bound (<=N): {text!r}")
    array = found["array"]
    size = bound = None
    if array is not None and array:
        if array.startswith("<="):
            if array == "<=":
                raise where.error(f"a bounded array needs its bound: {text!r}")
            bound = int(array[2:])
        else:
            size = int(array)
    return TypeSpec(
        base,
        array=array is not None,
        size=size,
        bound=bound,
        string_bound=None if strbound is None else int(strbound),
    )


def _literal(text: str, kind: TypeSpec, where: _Where) -> Any:
    """A default or constant value of type ``kind``, checked."""
    text = text.strip()
    if kind.array:
        try:
            values = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise where.error(f"{text!r} is not an array value ([1, 2, 3])") from None
        if not isinstance(values, list | tuple):
            raise where.error(f"{text!r} is not an array value ([1, 2, 3])")
        element = TypeSpec(kind.base, string_bound=kind.string_bound)
        items = [_check(v, element, where) for v in values]
        if kind.size is not None and len(items) != kind.size:
            raise where.error(f"{len(items)} values for an array of {kind.size}")
        if kind.bound is not None and len(items) > kind.bound:
            raise where.error(f"{len(items)} values for an array of at most {kind.bound}")
        return items
    if kind.base in ("string", "wstring"):
        if text[:1] in "\"'" and len(text) >= 2 and text[-1] == text[0]:
            try:
                value: Any = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise where.error(f"{text!r} is not a string value") from None
        else:
            value = text
        return _check(value, kind, where)
    if kind.base == "bool":
        lowered = text.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise where.error(f"{text!r} is not a bool value (true or false)")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise where.error(f"{text!r} is not a {kind.base} value") from None
    return _check(value, kind, where)


def _check(value: Any, kind: TypeSpec, where: _Where) -> Any:
    base = kind.base
    if base in ("string", "wstring"):
        if not isinstance(value, str):
            raise where.error(f"{value!r} is not a string")
        if kind.string_bound is not None and len(value) > kind.string_bound:
            raise where.error(f"{value!r} is longer than {kind.string_bound}")
        return value
    if base == "bool":
        if not isinstance(value, bool):
            raise where.error(f"{value!r} is not a bool")
        return value
    if base in ("float32", "float64"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise where.error(f"{value!r} is not a number")
        return float(value)
    if base in INTEGER_RANGES:
        low, high = INTEGER_RANGES[base]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise where.error(f"{value!r} is not a {base} (an integer from {low} to {high})")
        return value
    raise where.error(f"a {base} cannot have a default value")


def parse_message(text: str, name: str, source: str = "<text>") -> MessageSpec:
    """The spec of message ``name`` (``pkg/msg/Name``) from its ``.msg`` text."""
    package = name.split("/", maxsplit=1)[0]
    fields: list[FieldSpec] = []
    constants: list[ConstantSpec] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        where = _Where(source, number)
        line = strip_comment(raw).strip()
        if not line:
            continue
        type_text, _, rest = line.partition(" ")
        rest = rest.strip()
        if not rest:
            raise where.error(
                f"{line!r}: a field is TYPE NAME [DEFAULT], a constant TYPE NAME=VALUE"
            )
        kind = _parse_type(type_text, package, where)
        constant = re.match(r"([A-Za-z][A-Za-z0-9_]*)\s*=(.*)", rest)
        if constant is not None:
            cname = constant[1]
            if not _CONSTANT.fullmatch(cname):
                raise where.error(f"constant {cname!r}: a constant's name is in upper case")
            if not kind.primitive or kind.array:
                raise where.error(f"constant {cname!r}: a constant has a primitive type")
            value_text = constant[2].strip() if kind.base in ("string", "wstring") else constant[2]
            constants.append(ConstantSpec(cname, kind, _literal(value_text, kind, where)))
            if cname in seen:
                raise where.error(f"{cname!r} is defined twice")
            seen.add(cname)
            continue
        fname, _, default = rest.partition(" ")
        if not _NAME.fullmatch(fname) or "__" in fname:
            raise where.error(
                f"field {fname!r}: a field's name is lower case letters, digits and single "
                "underscores, starting with a letter"
            )
        if fname in seen:
            raise where.error(f"{fname!r} is defined twice")
        seen.add(fname)
        if default.strip():
            if not kind.primitive:
                raise where.error(f"field {fname!r}: only primitive fields take a default")
            value = _literal(default, kind, where)
            fields.append(FieldSpec(fname, kind, value, True))
        else:
            fields.append(FieldSpec(fname, kind))
    return MessageSpec(name, tuple(fields), tuple(constants), text, source)


def _parts(text: str, count: int, what: str, source: str) -> list[str]:
    parts: list[list[str]] = [[]]
    for line in text.splitlines():
        if strip_comment(line).strip() == "---":
            parts.append([])
        else:
            parts[-1].append(line)
    if len(parts) != count:
        raise InterfaceError(
            f"{source}: {what} has {count} parts separated by '---' lines, not {len(parts)}"
        )
    return ["\n".join(p) for p in parts]


def parse_service(text: str, name: str, source: str = "<text>") -> ServiceSpec:
    """The spec of service ``name`` (``pkg/srv/Name``) from its ``.srv`` text."""
    request, response = _parts(text, 2, "a service", source)
    return ServiceSpec(
        name,
        parse_message(request, f"{name}_Request", source),
        parse_message(response, f"{name}_Response", source),
        text,
    )


def parse_action(text: str, name: str, source: str = "<text>") -> ActionSpec:
    """The spec of action ``name`` (``pkg/action/Name``) from its ``.action`` text."""
    goal, result, feedback = _parts(text, 3, "an action", source)
    return ActionSpec(
        name,
        parse_message(goal, f"{name}_Goal", source),
        parse_message(result, f"{name}_Result", source),
        parse_message(feedback, f"{name}_Feedback", source),
        text,
    )


def read_package(directory: str | Path, name: str | None = None) -> PackageSpecs:
    """Every interface of a package directory (``msg/*.msg``, ``srv/*.srv``,
    ``action/*.action``; the package's name: ``name``, else its ``package.xml``'s, else
    the directory's name). Raises :class:`~emailmw.InterfaceError` naming the file."""
    root = Path(directory)
    if not root.is_dir():
        raise InterfaceError(f"{root}: not a package directory (with msg/, srv/ or action/)")
    package = name or _package_name(root)
    if not _PACKAGE.fullmatch(package):
        raise InterfaceError(f"{root}: {package!r} is not a package name (lower case, _)")
    specs = PackageSpecs(package)
    kinds = (("msg", ".msg"), ("srv", ".srv"), ("action", ".action"))
    if not any((root / kind).is_dir() for kind, _ in kinds):
        raise InterfaceError(f"{root}: no msg/, srv/ or action/ directory in it")
    for kind, suffix in kinds:
        folder = root / kind
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob(f"*{suffix}")):
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InterfaceError(f"{path}: cannot read it: {exc}") from exc
            type_name = f"{package}/{kind}/{path.stem}"
            if kind == "msg":
                specs.messages.append(parse_message(text, type_name, str(path)))
            elif kind == "srv":
                specs.services.append(parse_service(text, type_name, str(path)))
            else:
                specs.actions.append(parse_action(text, type_name, str(path)))
    return specs


def _package_name(root: Path) -> str:
    xml = root / "package.xml"
    if xml.is_file():
        found = re.search(r"<name>\s*([^<\s]+)\s*</name>", xml.read_text(errors="replace"))
        if found:
            return found[1]
    return root.name
