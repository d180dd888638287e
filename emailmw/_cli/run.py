"""``emailmw run PACKAGE_OR_PATH EXECUTABLE [ARGS...]``: ``ros2 run`` for Python programs.

What runs, looked up in this order (:func:`find_executable`, pure but for the file system
and the installed distributions):

1. ``PACKAGE_OR_PATH`` a directory (a path, or a name no installed package has): the
   file ``EXECUTABLE`` or ``EXECUTABLE.py`` in it;
2. an installed Python distribution ``PACKAGE`` (``pip install``): its console script
   ``EXECUTABLE`` (``[project.scripts]``), or a script an ament_python package installs
   under ``<prefix>/lib/PACKAGE/EXECUTABLE``.

The program replaces this process (``exec``): its output, signals and exit status are its
own, as with ``ros2 run``; ``ARGS`` (``--ros-args ...`` too) are passed on unchanged but
for ``--config FILE`` (anywhere on the command line before ``--ros-args``): the
account the program runs on, given to it as ``EMAILMW_CONFIG_FILE``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .common import CommandError, Commands, program_environment, take_config

__all__ = ["Executable", "find_executable", "register"]


@dataclass(frozen=True)
class Executable:
    """What to exec: the argument vector before the user's arguments, and a description."""

    argv: tuple[str, ...]
    what: str


def find_executable(package: str, executable: str) -> Executable:
    """The program ``emailmw run package executable`` runs (see the module), or a
    :class:`CommandError` saying what was looked for."""
    python = sys.executable
    directory = Path(package)
    path_like = "/" in package or package.startswith(".")
    if directory.is_dir() and (path_like or not _installed(package)):
        for candidate in (directory / executable, directory / f"{executable}.py"):
            if candidate.is_file():
                return Executable((python, str(candidate)), f"{candidate}")
        raise CommandError(
            f"no {executable} or {executable}.py in the directory {package}: give a file in it"
        )
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise CommandError(
            f"no directory and no installed Python package named {package!r}: give a directory "
            "holding the program, or a package installed with pip"
        ) from None
    names = []
    for entry in distribution.entry_points:
        if entry.group in ("console_scripts", "gui_scripts"):
            names.append(entry.name)
            if entry.name == executable:
                module, _, attr = (part.strip() for part in entry.value.partition(":"))
                code = (
                    "import functools, importlib, sys; "
                    f"sys.argv[0] = {executable!r}; "
                    f"target = functools.reduce(getattr, {attr.split('.')!r}, "
                    f"importlib.import_module({module!r})); "
                    "sys.exit(target())"
                    if attr
                    else f"import runpy, sys; sys.argv[0] = {executable!r}; "
                    f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
                )
                return Executable((python, "-c", code), f"{package}'s {entry.value}")
    script = Path(sys.prefix) / "lib" / package / executable
    if script.is_file():
        names.append(executable)
        return Executable((python, str(script)), str(script))
    known = ", ".join(sorted(names)) or "none"
    raise CommandError(
        f"package {package!r} has no executable {executable!r} (its executables: {known})"
    )


def _installed(package: str) -> bool:
    try:
        importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "run", parents=[common], help="run a Python program of a package or directory",
        description="Run a program as 'ros2 run' does: a console script of an installed "
        "Python package, or a file of a directory. The arguments after EXECUTABLE "
        "(--ros-args ... too) go to the program; --config FILE names the account it runs on.",
    )  # fmt: skip
    parser.add_argument("package", metavar="PACKAGE_OR_PATH")
    parser.add_argument("executable", metavar="EXECUTABLE")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="ARGS")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config, argv = take_config(args.argv)
    env = program_environment(config or getattr(args, "config", None))
    found = find_executable(args.package, args.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    # the program replaces this process, as ros2 run's does
    os.execve(found.argv[0], [*found.argv, *argv], env)  # noqa: S606
