"""ROS 2's XML and YAML launch files, read into the same description as a Python launch
file (:mod:`.description`), so that both evaluate, include each other and refuse alike.

What is read: ``arg`` (``name``, ``default``), ``let`` (``name``, ``value``), ``node``
(``pkg``, ``exec``, ``name``, ``namespace``/``ns``, ``args``, ``exec_name``; inside it
``param`` with ``name`` and ``value``, nested ``param`` groups, or ``from`` a params file,
``remap`` with ``from`` and ``to``, ``env`` with ``name`` and ``value``), ``executable``
(``cmd``, ``name``, ``env``), ``include`` (``file``, and ``arg`` with ``name`` and
``value``), ``group`` (``scoped``, its children) and ``push-ros-namespace``
(``namespace``); every attribute may hold ``$(var NAME)``, ``$(env NAME [DEFAULT])``,
``$(find-pkg-share PACKAGE)`` and ``$(dirname)``; an ``if``/``unless`` attribute is a
condition. Anything else is one line naming it.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from .description import (
    Action,
    Condition,
    DeclareLaunchArgument,
    ExecuteProcess,
    GroupAction,
    IfCondition,
    IncludeLaunchDescription,
    LaunchContext,
    LaunchDescription,
    LaunchError,
    Node,
    PushRosNamespace,
    PythonExpression,
    SetLaunchConfiguration,
    Shutdown,
    Substitution,
    TimerAction,
    UnlessCondition,
    Words,
    package_share,
    read_frontends_with,
)

__all__ = ["frontend_description"]


class Text(Substitution):
    """An attribute of an XML or YAML launch file, its ``$(...)`` performed when visited."""

    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where

    def perform(self, context: LaunchContext) -> str:
        def one(inner: str) -> str:
            words = inner.split()
            if len(words) == 2 and words[0] == "var":
                found = context.launch_configurations.get(words[1])
                if found is None:
                    raise LaunchError(f"{self.where}: no launch argument {words[1]!r} "
                                      "(declare it: arg)")  # fmt: skip
                return found
            if words and words[0] == "env" and len(words) in (2, 3):
                name = words[1]
                value = context.environment.get(name)
                if value is None:
                    value = os.environ.get(name, words[2] if len(words) == 3 else None)
                if value is None:
                    raise LaunchError(f"{self.where}: environment variable {name} is not set")
                return value
            if len(words) == 2 and words[0] == "find-pkg-share":
                return str(package_share(words[1]))
            if words == ["dirname"] and context.file is not None:
                return str(context.file.parent)
            if words and words[0] == "eval":
                expression = inner.strip()[len("eval") :].strip()
                if len(expression) >= 2 and expression[0] == expression[-1] in "'\"":
                    expression = expression[1:-1]
                return PythonExpression(expression).perform(context)
            raise LaunchError(f"{self.where}: $({inner}) is not supported (var, env, "
                              "find-pkg-share and dirname are)")  # fmt: skip

        return _expand(self.text, one, self.where)


def _expand(text: str, substitute: Callable[[str], str], where: str) -> str:
    """``text`` with each ``$(...)`` replaced by ``substitute(inside)``, the inside's own
    ``$(...)`` first (``$(eval '$(var x) == 2')``); what a substitution returns is not
    read again."""
    out: list[str] = []
    i = 0
    while i < len(text):
        start = text.find("$(", i)
        if start < 0:
            out.append(text[i:])
            break
        out.append(text[i:start])
        depth, j = 1, start + 2
        while j < len(text) and depth:
            if text.startswith("$(", j):
                depth, j = depth + 1, j + 2
                continue
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        if depth:
            raise LaunchError(f"{where}: {text[start:]!r} has no closing parenthesis")
        inside = _expand(text[start + 2 : j - 1], substitute, where)
        out.append(substitute(inside))
        i = j
    return "".join(out)


def _entries(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The file's entries as (tag, attributes; children under ``children``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LaunchError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if path.name.endswith(".xml") or text.lstrip().startswith("<"):
        try:
            root = ET.fromstring(text)  # noqa: S314 - the user's own launch file
        except ET.ParseError as exc:
            raise LaunchError(f"{path}: not XML: {exc}") from None
        if root.tag != "launch":
            raise LaunchError(f"{path}: expected a <launch> element, got <{root.tag}>")
        return [_element(e) for e in root]
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LaunchError(f"{path}: not YAML: {exc}") from None
    entries = data.get("launch") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise LaunchError(f"{path}: expected 'launch:' and a list of entries (arg, node ...)")
    return [_yaml_entry(path, entry) for entry in entries]


def _element(element: ET.Element) -> tuple[str, dict[str, Any]]:
    attributes: dict[str, Any] = dict(element.attrib)
    children = [_element(c) for c in element]
    for tag, child in children:
        attributes.setdefault(tag, []).append(child)
    attributes["children"] = children
    return element.tag, attributes


def _yaml_entry(path: Path, entry: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(entry, dict) or len(entry) != 1:
        raise LaunchError(f"{path}: each entry is one tag (arg, node, executable ...): {entry!r}")
    ((tag, attributes),) = entry.items()
    if isinstance(attributes, list):  # (a group's or timer's children as a plain list)
        attributes = {"children": attributes}
    if not isinstance(attributes, dict):
        raise LaunchError(f"{path}: {tag}: expected its attributes, got {attributes!r}")
    out = dict(attributes)
    if isinstance(out.get("children"), list):
        out["children"] = [_yaml_entry(path, child) for child in out["children"]]
    return str(tag).replace("_", "-"), out


def frontend_description(path: Path) -> LaunchDescription:
    """The description an XML or YAML launch file holds (see the module)."""
    return LaunchDescription([_action(path, tag, a) for tag, a in _entries(path)])


#: what a node and an executable take about their process
_PROCESS = ("on_exit", "respawn", "respawn_delay", "sigterm_timeout", "sigkill_timeout",
            "emulate_tty", "launch-prefix")  # fmt: skip
_KNOWN = {
    "arg": {"name", "default", "description"},
    "let": {"name", "value"},
    "node": {"pkg", "exec", "name", "namespace", "ns", "args", "exec_name", "output",
             "param", "remap", "env", "ros_args", *_PROCESS},
    "executable": {"cmd", "name", "cwd", "output", "shell", "env", *_PROCESS},
    "include": {"file", "arg"},
    "group": {"scoped", "children", "forwarding"},
    "timer": {"period", "children"},
    "push-ros-namespace": {"namespace"},
}  # fmt: skip


def _action(path: Path, tag: str, attributes: dict[str, Any]) -> Action:
    tag = tag.replace("_", "-")
    where = f"{path.name}: {tag}"
    if tag not in _KNOWN:
        raise LaunchError(f"{path.name}: {tag!r} is not supported ({', '.join(_KNOWN)} are)")
    children = attributes.get("children") or []
    allowed_children = {"param", "remap", "env", "arg"} if tag not in ("group", "timer") else (
        set(_KNOWN))  # fmt: skip
    for child_tag, _ in children:
        if child_tag.replace("_", "-") not in allowed_children:
            raise LaunchError(f"{path.name}: <{tag}> has <{child_tag}>, which is not supported")
    unknown = (set(attributes) - _KNOWN[tag] - {"children", "if", "unless"}
               - {child_tag for child_tag, _ in children})  # fmt: skip
    if unknown:
        raise LaunchError(f"{where}: {sorted(unknown)[0]!r} is not supported here")

    def text(key: str, default: str | None = None) -> Text | None:
        value = attributes.get(key, default)
        return None if value is None else Text(str(value), where)

    condition: Condition | None = None
    if "if" in attributes:
        condition = IfCondition(text("if"))
    elif "unless" in attributes:
        condition = UnlessCondition(text("unless"))
    if tag == "arg":
        if not attributes.get("name"):
            raise LaunchError(f"{where}: needs a name")
        return DeclareLaunchArgument(str(attributes["name"]), default_value=text("default"),
                                     condition=condition)  # fmt: skip
    if tag == "let":
        return SetLaunchConfiguration(text("name"), text("value"), condition=condition)
    if tag == "push-ros-namespace":
        return PushRosNamespace(text("namespace"), condition=condition)
    if tag == "group":
        scoped = str(attributes.get("scoped", "true")).lower() != "false"
        return GroupAction([_action(path, t, a) for t, a in children], scoped=scoped,
                           condition=condition)  # fmt: skip
    if tag == "timer":
        return TimerAction(period=text("period", "0"),
                           actions=[_action(path, t, a) for t, a in children],
                           condition=condition)  # fmt: skip
    if tag == "include":
        if not attributes.get("file"):
            raise LaunchError(f"{where}: needs file")
        arguments = [(Text(str(a.get("name", "")), where), Text(str(a.get("value", "")), where))
                     for a in attributes.get("arg") or []]  # fmt: skip
        return IncludeLaunchDescription(text("file"), launch_arguments=arguments,
                                        condition=condition)  # fmt: skip
    env = {Text(str(e.get("name", "")), where): Text(str(e.get("value", "")), where)
           for e in attributes.get("env") or []}  # fmt: skip
    process = _process_options(attributes, where, text)
    if tag == "executable":
        if not attributes.get("cmd"):
            raise LaunchError(f"{where}: needs cmd")
        return ExecuteProcess(cmd=[Words(text("cmd"))], name=text("name"), cwd=text("cwd"),
                              additional_env=env, condition=condition, **process)  # fmt: skip
    if not attributes.get("pkg") or not attributes.get("exec"):
        raise LaunchError(f"{where}: needs pkg and exec")
    parameters: list[Any] = []
    for param in attributes.get("param") or []:
        parameters.append(_param(param, where))
    remappings = []
    for remap in attributes.get("remap") or []:
        if not remap.get("from") or not remap.get("to"):
            raise LaunchError(f"{where}: each remap needs from and to")
        remappings.append((Text(str(remap["from"]), where), Text(str(remap["to"]), where)))
    return Node(
        package=text("pkg"), executable=text("exec"), name=text("name"),
        namespace=text("namespace") or text("ns"), exec_name=text("exec_name"),
        arguments=[Words(text("args"))] if attributes.get("args") else [],
        ros_arguments=[Words(text("ros_args"))] if attributes.get("ros_args") else [],
        parameters=parameters, remappings=remappings, additional_env=env,
        condition=condition, **process,
    )  # fmt: skip


def _process_options(attributes: Mapping[str, Any], where: str,
                     text: Callable[[str], Text | None]) -> dict[str, Any]:  # fmt: skip
    """A node's or executable's ``on_exit="shutdown"``, ``respawn``, ``respawn_delay`` and
    signal timeouts, as ROS 2's XML and YAML take them."""
    options: dict[str, Any] = {}
    if "launch-prefix" in attributes:
        raise LaunchError(f"{where}: 'launch-prefix' is not supported here")
    if "on_exit" in attributes:
        if str(attributes["on_exit"]).strip() != "shutdown":
            raise LaunchError(f"{where}: on_exit={attributes['on_exit']!r}: only 'shutdown' is "
                              "supported")  # fmt: skip
        options["on_exit"] = Shutdown()
    for key in ("respawn", "respawn_delay", "sigterm_timeout", "sigkill_timeout"):
        if key in attributes:
            options[key] = text(key)
    return options


def _param(param: Mapping[str, Any], where: str) -> Any:
    """One ``param`` of a node: ``{name: value}`` (nested groups flattened), or a params
    file (``from``)."""
    if "from" in param:
        return Text(str(param["from"]), where)
    name = param.get("name")
    nested = param.get("param")
    if name and isinstance(nested, list) and "value" not in param:
        inner: dict[str, Any] = {}
        for child in nested:
            inner.update(_param(child, where))
        return {str(name): inner}
    if not name or "value" not in param:
        raise LaunchError(f"{where}: each param needs a name and a value, a from, or nested "
                          "params")  # fmt: skip
    value = param["value"]
    return {str(name): Text(value, where) if isinstance(value, str) else value}


read_frontends_with(frontend_description)
