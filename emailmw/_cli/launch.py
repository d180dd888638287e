"""``emailmw launch FILE [name:=value ...]``: ``ros2 launch`` for the nodes of a launch
file in ROS 2's YAML or XML form.

What is supported (what starting nodes with parameters and remappings needs):

* ``arg`` (``name``, ``default``), set from the command line as ``name:=value``;
* ``node`` (``pkg``, ``exec``, ``name``, ``namespace``, ``args``, ``param`` with ``name``
  and ``value``, ``remap`` with ``from`` and ``to``): run as ``emailmw run pkg exec``
  with ``--ros-args`` for the name, namespace, parameters and remappings;
* ``executable`` (``cmd``, ``name``): a command;
* the substitutions ``$(var NAME)`` and ``$(env NAME [DEFAULT])``.

Anything else (``include``, ``group``, other substitutions, Python launch files: those
need ROS 2's ``launch`` library, which is not on PyPI) is one line naming it. The file is
read into a plan first (:func:`plan`, pure), then the processes start together; each line
they print is prefixed with its name (``[talker-1] ...``), as ``ros2 launch`` does. Ctrl-C
(SIGINT) or SIGTERM is passed on to every process; the launch ends when all have ended,
with status 0 when every one ended cleanly.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .common import CommandError, Commands, program_environment

__all__ = ["LaunchProcess", "plan", "register"]


@dataclass(frozen=True)
class LaunchProcess:
    """One process of a launch: its label (``talker-1``) and argument vector."""

    label: str
    argv: tuple[str, ...]


_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")


def _substitute(text: str, variables: Mapping[str, str], where: str) -> str:
    def one(match: re.Match[str]) -> str:
        words = match.group(1).split()
        if len(words) == 2 and words[0] == "var":
            if words[1] not in variables:
                raise CommandError(f"{where}: no launch argument {words[1]!r} (declare it: arg)")
            return variables[words[1]]
        if words and words[0] == "env" and len(words) in (2, 3):
            value = os.environ.get(words[1], words[2] if len(words) == 3 else None)
            if value is None:
                raise CommandError(f"{where}: environment variable {words[1]} is not set")
            return value
        raise CommandError(f"{where}: $({match.group(1)}) is not supported (var and env are)")

    return _SUBSTITUTION.sub(one, text)


def _text(value: Any) -> str:
    """A parameter value as ``-p name:=value`` takes it (YAML)."""
    if isinstance(value, str):
        return value
    dumped: str = yaml.safe_dump(value, default_flow_style=True, width=1 << 30)
    return dumped.removesuffix("\n...\n").strip()


def _entries(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The launch file's entries as (tag, attributes with ``param``/``remap`` lists)."""
    name = path.name
    if name.endswith(".py"):
        raise CommandError(
            f"{path}: Python launch files need ROS 2's launch library, which is not on PyPI: "
            "write it in the YAML or XML form (docs/ros-users.md)"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if name.endswith(".xml") or text.lstrip().startswith("<"):
        try:
            root = ET.fromstring(text)  # noqa: S314 - the user's own launch file
        except ET.ParseError as exc:
            raise CommandError(f"{path}: not XML: {exc}") from None
        if root.tag != "launch":
            raise CommandError(f"{path}: expected a <launch> element, got <{root.tag}>")
        out = []
        for element in root:
            attributes: dict[str, Any] = dict(element.attrib)
            params = [dict(c.attrib) for c in element if c.tag == "param"]
            remaps = [dict(c.attrib) for c in element if c.tag == "remap"]
            others = {c.tag for c in element} - {"param", "remap"}
            if others:
                raise CommandError(f"{path}: <{element.tag}> has <{sorted(others)[0]}>, which "
                                   "is not supported (param and remap are)")  # fmt: skip
            out.append((element.tag, {**attributes, "param": params, "remap": remaps}))
        return out
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CommandError(f"{path}: not YAML: {exc}") from None
    entries = data.get("launch") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise CommandError(f"{path}: expected 'launch:' and a list of entries (arg, node ...)")
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise CommandError(f"{path}: each entry is one tag (arg, node, executable): {entry!r}")
        ((tag, attributes),) = entry.items()
        if not isinstance(attributes, dict):
            raise CommandError(f"{path}: {tag}: expected its attributes, got {attributes!r}")
        out.append((str(tag), attributes))
    return out


def plan(path: Path, arguments: Mapping[str, str]) -> list[LaunchProcess]:
    """The processes the launch file ``path`` starts, with ``arguments`` (``name:=value``
    from the command line) over its ``arg`` defaults. Raises :class:`CommandError` for
    anything not supported (see the module)."""
    variables = dict(arguments)
    processes: list[LaunchProcess] = []
    for tag, attributes in _entries(path):
        where = f"{path.name}: {tag}"

        def get(key: str, default: str | None = None, *, _a: dict[str, Any] = attributes,
                _w: str = where) -> str | None:  # fmt: skip
            value = _a.get(key, default)
            return None if value is None else _substitute(str(value), variables, _w)

        if tag == "arg":
            name = get("name")
            if not name:
                raise CommandError(f"{where}: needs a name")
            if name not in variables:
                default = get("default")
                if default is None:
                    raise CommandError(f"{path.name}: argument {name!r} has no default: give "
                                       f"{name}:=VALUE")  # fmt: skip
                variables[name] = default
            continue
        if tag == "node":
            package, executable = get("pkg"), get("exec")
            if not package or not executable:
                raise CommandError(f"{where}: needs pkg and exec")
            ros: list[str] = []
            name = get("name")
            if name:
                ros += ["-r", f"__node:={name}"]
            namespace = get("namespace") or get("ns")
            if namespace:
                ros += ["-r", f"__ns:=/{namespace.lstrip('/')}"]
            for param in attributes.get("param") or []:
                key = _substitute(str(param.get("name", "")), variables, where)
                if not key or "value" not in param:
                    raise CommandError(f"{where}: each param needs a name and a value")
                value = param["value"]
                value = _substitute(value, variables, where) if isinstance(value, str) else value
                ros += ["-p", f"{key}:={_text(value)}"]
            for remap in attributes.get("remap") or []:
                source, target = remap.get("from"), remap.get("to")
                if not source or not target:
                    raise CommandError(f"{where}: each remap needs from and to")
                ros += ["-r", f"{_substitute(str(source), variables, where)}:="
                              f"{_substitute(str(target), variables, where)}"]  # fmt: skip
            extra = shlex.split(get("args") or "")
            argv = (sys.executable, "-m", "emailmw", "run", package, executable, *extra,
                    *(["--ros-args", *ros] if ros else []))  # fmt: skip
            label = name or executable
        elif tag == "executable":
            command = get("cmd")
            if not command:
                raise CommandError(f"{where}: needs cmd")
            argv = tuple(shlex.split(command))
            label = get("name") or Path(argv[0]).name
        else:
            raise CommandError(f"{path.name}: {tag!r} is not supported (arg, node and "
                               "executable are)")  # fmt: skip
        processes.append(LaunchProcess(f"{label}-{len(processes) + 1}", argv))
    if not processes:
        raise CommandError(f"{path}: launches nothing (no node or executable)")
    return processes


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "launch", parents=[common], help="start the nodes of a YAML or XML launch file",
        description="Start the nodes of a ROS 2 launch file in its YAML or XML form (arg, "
        "node with param and remap, executable; $(var) and $(env)), as 'ros2 launch'.",
    )  # fmt: skip
    parser.add_argument("file", type=Path, metavar="FILE")
    parser.add_argument("arguments", nargs="*", metavar="NAME:=VALUE")
    parser.set_defaults(run=run)


def _say(line: str) -> None:
    print(line, flush=True)


def run(args: argparse.Namespace) -> int:
    arguments = {}
    for item in args.arguments:
        name, sep, value = item.partition(":=")
        if not sep or not name:
            raise CommandError(f"launch argument {item!r}: expected NAME:=VALUE")
        arguments[name] = value
    env = program_environment(getattr(args, "config", None))
    processes = plan(args.file, arguments)
    running: list[tuple[LaunchProcess, subprocess.Popen[bytes]]] = []
    readers = []
    lock = threading.Lock()

    def relay(label: str, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            with lock:
                sys.stdout.write(f"[{label}] {raw.decode(errors='replace').rstrip()}\n")
                sys.stdout.flush()

    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        del frame
        stopping.set()
        for _, child in running:
            if child.poll() is None:
                child.send_signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for process in processes:
            try:
                child = subprocess.Popen(
                    process.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, env=env,
                )  # fmt: skip
            except OSError as exc:
                stop(signal.SIGTERM, None)
                raise CommandError(f"{process.label}: cannot start {process.argv[0]}: "
                                   f"{exc.strerror or exc}") from None  # fmt: skip
            running.append((process, child))
            _say(f"[INFO] [{process.label}]: process started with pid [{child.pid}]")
            reader = threading.Thread(target=relay, args=(process.label, child.stdout),
                                      daemon=True)  # fmt: skip
            reader.start()
            readers.append(reader)
        clean = True
        for process, child in running:
            code = child.wait()
            for reader in readers:
                reader.join(0.0)
            if code == 0:
                _say(f"[INFO] [{process.label}]: process has finished cleanly [pid {child.pid}]")
            else:
                clean = False
                _say(f"[ERROR] [{process.label}]: process has died [pid {child.pid}, exit code "
                     f"{code}, cmd '{shlex.join(process.argv)}']")  # fmt: skip
        for reader in readers:
            reader.join(5)
        return 0 if clean else 1
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
