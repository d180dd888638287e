"""ROS's command-line arguments and params files: pure, no I/O but reading a params file.

* :func:`parse_ros_args`: the ``--ros-args`` sections of a command line (``-p name:=value``,
  ``--params-file FILE``, ``--log-level [name:=]level``, ``-r from:=to`` with
  ``__node``/``__ns``), as :class:`RosArgs`;
* :func:`read_params_file`: a params YAML file in ROS's format (node name, or ``/**``,
  then ``ros__parameters``, nested names joined with ``.``).

Errors are one line naming the argument or the file: :class:`~emailmw.ConfigError`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, yaml_error
from .names import resolve_name

__all__ = [
    "RosArgs",
    "params_file_sections",
    "parse_ros_args",
    "read_params_file",
    "remove_ros_args",
]


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

    def remap(self, name: str, node_name: str, namespace: str = "/") -> str:
        """``name`` (a fully qualified topic or service name) after the ``-r`` rules, whose
        names are expanded as the node's are (relative: in its ``namespace``), as rcl's."""
        for node, source, target in self.remaps:
            if node is not None and node != node_name:
                continue
            if name == resolve_name(source, node_name, namespace, "remapped name"):
                return resolve_name(target, node_name, namespace, "remapped name")
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


def params_file_sections(path: str | Path) -> dict[str, dict[str, Any]]:
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


def read_params_file(
    path: str | Path, node_name: str, fqn: str, *, wildcards: bool = True
) -> dict[str, Any]:
    """The parameters a params file gives node ``node_name`` (``fqn``): its wildcard
    sections first (unless ``wildcards`` is False), then the node's own."""
    sections = params_file_sections(path)
    values: dict[str, Any] = {}
    for pattern, params in sorted(sections.items(), key=lambda kv: "*" not in kv[0]):
        if not wildcards and "*" in pattern:
            continue
        if _matches(pattern, node_name, fqn):
            values.update(params)
    return values
