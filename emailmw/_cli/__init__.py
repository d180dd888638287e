"""The ``emailmw`` command line: one module per command (ros2cli's shape), each verb one
function. Errors are one line on standard error with a non-zero exit status (2 for usage
errors), never a traceback unless ``--debug``.

A verb the graph daemon answers (``quick.py``) goes to it first; this module imports the
commands only when a command runs here, so that path stays quick.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Final

from .. import __version__
from .quick import try_daemon

__all__ = ["main"]


#: the commands (each a module of this package) with their one-line help, in the order
#: ``--help`` lists them; the help is the one each command's ``register`` gives
#: (``tests/test_cli_parser.py`` checks that they agree)
COMMANDS: Final = {
    "topic": "topics: list, info, type, find, echo, pub, hz, bw, delay",
    "service": "services: list, type, find, call",
    "action": "actions: list, info, send_goal",
    "param": "parameters of nodes: list, get, set, ...",
    "node": "nodes: list, info",
    "interface": "message and service types",
    "bag": "bags: record, play, info, export (rosbag2, MCAP)",
    "run": "run a Python program of a package or directory",
    "launch": "start the nodes of a Python, XML or YAML launch file",
    "daemon": "the graph daemon that answers the command line quickly",
    "doctor": "check the configuration, servers, TLS, login, clock, keys and graph",
    "config": "the loaded configuration: show",
    "analyze": "traffic analytics of mail archives (Spark)",
    "security": "keystores and identities (docs/security.md)",
    "gateway": "relay routed messages between hubs (docs/addressing.md)",
    "stem": "Stem messages (docs/addressing.md)",
}


def command_module(name: str) -> ModuleType:
    """The module of command ``name`` (imported now)."""
    return importlib.import_module(f"{__name__}.{name}")


def _chosen(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not an option (or ``--config``'s
    value), when it names one."""
    value_next = False
    for word in argv:
        if value_next:
            value_next = False
        elif word == "--config":
            value_next = True
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. For ``argv`` (the command line it will parse), only the
    command it runs is registered whole, its module imported; the others by name and help
    (a command starts in about two thirds of the time: 0.85 -> 0.55 CPU-s). ``argv`` None:
    every command whole (shell completion)."""
    from .common import CONFIG_HELP, common_options

    top = argparse.ArgumentParser(prog="emailmw", description="emailmw command line")
    top.add_argument("--version", action="version", version=f"emailmw {__version__}")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    top.add_argument("--config", help=CONFIG_HELP)
    top.add_argument(
        "--no-daemon", action="store_true",
        help="do not use the graph daemon (emailmw daemon): read the mailbox",
    )  # fmt: skip
    common = common_options()
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = None if argv is None else _chosen(argv)
    for name, summary in COMMANDS.items():
        if argv is None or name == chosen:
            command_module(name).register(commands, common)
        else:
            commands.add_parser(name, help=summary)
    return top


def main(argv: Sequence[str] | None = None, *, daemon: bool = True) -> int:
    """Run one command line (``argv``: ``sys.argv[1:]``); its exit status. ``daemon``:
    hand a verb the graph daemon answers to it (False: in the daemon itself)."""
    given = list(sys.argv[1:] if argv is None else argv)
    if daemon:
        answered = try_daemon(given)
        if answered is not None:
            return answered
    from .._core.errors import EmailMWError

    completing = "_ARGCOMPLETE" in os.environ  # the shell asks for completions (complete.py)
    top = parser(None if completing else given)
    if completing:
        import argcomplete

        from .complete import install

        install(top)
        argcomplete.autocomplete(top, always_complete_options=False)
    args = top.parse_args(given)
    try:
        status: int = args.run(args)
        return status
    except KeyboardInterrupt:
        print("emailmw: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader left (``emailmw topic echo ... | head``): end quietly, as cat does;
        # stdout goes to /dev/null so the interpreter's final flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (EmailMWError, OSError, ImportError, KeyError) as exc:
        if args.debug:
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"emailmw: error: {message}", file=sys.stderr)
        return 1
