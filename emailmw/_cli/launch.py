"""``emailmw launch FILE [name:=value ...]`` and ``emailmw launch PACKAGE FILE ...``:
``ros2 launch`` for launch files in ROS 2's Python, XML or YAML form.

The file is read into a description and evaluated (:func:`plan`: ``emailmw._launch``,
which says what is supported; anything else is one line naming it); every node's program
is looked up before anything starts (a missing one refuses the launch, as ros2 launch
does); then the launch runs as ``ros2 launch`` runs it (``emailmw._launch.service``: the
processes, their prefixed output, event handlers, shutdown and Ctrl-C). ``PACKAGE FILE``:
the file under the package's share directory (``share/PACKAGE``, its ``launch`` folder
first), as ros2 finds it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from .._core.errors import EmailMWError
from .._launch import (
    LaunchContext,
    LaunchProcess,
    frontend_description,
    launch_context,
    load_python_launch_file,
    run_launch,
)
from .._launch.description import package_share
from .common import CommandError, Commands, program_environment
from .run import find_executable

__all__ = ["LaunchProcess", "find_launch_file", "plan", "prepare", "register"]


def plan(path: Path, arguments: Mapping[str, str]) -> list[LaunchProcess]:
    """The processes the launch file ``path`` starts at once, with ``arguments``
    (``name:=value`` from the command line) over its declared defaults;
    :class:`CommandError` in one line for anything not supported or not found."""
    return prepare(path, arguments).processes


def prepare(path: Path, arguments: Mapping[str, str]) -> LaunchContext:
    """The launch file ``path`` evaluated: the processes it starts at once and its event
    handlers (:func:`plan`'s errors)."""
    try:
        if path.suffix == ".py":
            description = load_python_launch_file(path)
        else:
            description = frontend_description(path)
        context = launch_context(description, arguments, path)
    except EmailMWError as exc:
        raise CommandError(str(exc)) from None
    if not context.processes:
        raise CommandError(f"{path}: launches nothing (no node or process)")
    return context


def find_launch_file(package: str, name: str) -> Path:
    """``emailmw launch PACKAGE FILE``: the file in the package's share directory."""
    try:
        share = package_share(package)
    except EmailMWError as exc:
        raise CommandError(str(exc)) from None
    for candidate in (share / "launch" / name, share / name):
        if candidate.is_file():
            return candidate
    found = sorted(share.rglob(name))
    if found:
        return found[0]
    raise CommandError(f"package {package!r} has no launch file {name!r} (in {share})")


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "launch", parents=[common], help="start the nodes of a Python, XML or YAML launch file",
        description="Start what a ROS 2 launch file starts (its Python, XML or YAML form), "
        "as 'ros2 launch': FILE, or PACKAGE FILE (in the package's share directory), then "
        "the launch arguments as NAME:=VALUE.",
    )  # fmt: skip
    parser.add_argument("file", metavar="FILE_OR_PACKAGE")
    parser.add_argument("arguments", nargs="*", metavar="[FILE] NAME:=VALUE")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    arguments = {}
    given = list(args.arguments)
    path = Path(args.file)
    if given and ":=" not in given[0] and not path.is_file():
        path = find_launch_file(args.file, given.pop(0))
    for item in given:
        name, sep, value = item.partition(":=")
        if not sep or not name:
            raise CommandError(f"launch argument {item!r}: expected NAME:=VALUE")
        arguments[name] = value
    env = program_environment(getattr(args, "config", None))
    context = prepare(path, arguments)
    for process in context.processes:  # (every program found before anything starts)
        if process.node is not None:
            find_executable(*process.node)
    try:
        return run_launch(context, env)
    except EmailMWError as exc:
        raise CommandError(str(exc)) from None
