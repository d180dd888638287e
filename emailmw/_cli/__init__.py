"""The ``emailmw`` command line: one module per command (ros2cli's shape), each verb one
function. Errors are one line on standard error with a non-zero exit status (2 for usage
errors), never a traceback unless ``--debug``.

A verb the graph daemon answers (``quick.py``) goes to it first; this module imports the
commands only when a command runs here, so that path stays quick.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from .. import __version__
from .quick import try_daemon

__all__ = ["main"]


def _commands() -> tuple[ModuleType, ...]:
    """The commands, in the order ``--help`` lists them."""
    from . import (
        action,
        analyze,
        bag,
        daemon,
        doctor,
        gateway,
        interface,
        launch,
        node,
        param,
        run,
        security,
        service,
        stem,
        topic,
    )

    return (
        topic, service, action, param, node, interface, bag, run, launch, daemon, doctor,
        analyze, security, gateway, stem,
    )  # fmt: skip


def parser() -> argparse.ArgumentParser:
    """The whole command line's parser."""
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
    for command in _commands():
        command.register(commands, common)
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

    top = parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (complete.py)
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
