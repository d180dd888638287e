"""``emailmw launch FILE [name:=value ...]`` and ``emailmw launch PACKAGE FILE ...``:
``ros2 launch`` for launch files in ROS 2's Python, XML or YAML form.

The file is read into a description and evaluated (:func:`plan`: ``emailmw._launch``,
which says what is supported; anything else is one line naming it); every node's program
is looked up before anything starts (a missing one refuses the launch, as ros2 launch
does); then the processes start together (a ``TimerAction``'s after its period). Each line
they print is prefixed with its name (``[talker-1] ...``), as ``ros2 launch`` does. Ctrl-C
(SIGINT) or SIGTERM is passed on to every process; the launch ends when all have ended,
with status 0 when every one ended cleanly. ``PACKAGE FILE``: the file under the
package's share directory (``share/PACKAGE``, its ``launch`` folder first), as ros2 finds it.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._core.errors import EmailMWError
from .._launch import LaunchProcess, evaluate, frontend_description, load_python_launch_file
from .._launch.description import package_share
from .common import CommandError, Commands, program_environment
from .run import find_executable

__all__ = ["LaunchProcess", "find_launch_file", "plan", "register"]


def plan(path: Path, arguments: Mapping[str, str]) -> list[LaunchProcess]:
    """The processes the launch file ``path`` starts, with ``arguments`` (``name:=value``
    from the command line) over its declared defaults; :class:`CommandError` in one line
    for anything not supported or not found."""
    try:
        if path.suffix == ".py":
            description = load_python_launch_file(path)
        else:
            description = frontend_description(path)
        processes = evaluate(description, arguments, path)
    except EmailMWError as exc:
        raise CommandError(str(exc)) from None
    if not processes:
        raise CommandError(f"{path}: launches nothing (no node or process)")
    return processes


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


def _say(line: str) -> None:
    print(line, flush=True)


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
    processes = plan(path, arguments)
    for process in processes:  # (every program found before anything starts)
        if process.node is not None:
            find_executable(*process.node)
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
    started = time.monotonic()
    try:
        for process in sorted(processes, key=lambda p: p.delay):
            try:
                due = started + process.delay - time.monotonic()
                if due > 0 and stopping.wait(due):
                    break  # (stopped while its timer ran)
                child = subprocess.Popen(
                    process.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, env={**env, **process.env},
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
