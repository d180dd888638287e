"""The ``emailmw`` command line: one module per command (ros2cli's shape), each verb one
function. Errors are one line on standard error with a non-zero exit status (2 for usage
errors), never a traceback unless ``--debug``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import __version__
from .._core.errors import EmailMWError
from . import (
    action,
    analyze,
    bag,
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
from .common import CONFIG_HELP, common_options

__all__ = ["main"]

#: the commands, in the order ``--help`` lists them
COMMANDS = (
    topic, service, action, param, node, interface, bag, run, launch, doctor, analyze,
    security, gateway, stem,
)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    """The whole command line's parser."""
    top = argparse.ArgumentParser(prog="emailmw", description="emailmw command line")
    top.add_argument("--version", action="version", version=f"emailmw {__version__}")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    top.add_argument("--config", help=CONFIG_HELP)
    common = common_options()
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(commands, common)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    top = parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (complete.py)
        import argcomplete

        from .complete import install

        install(top)
        argcomplete.autocomplete(top, always_complete_options=False)
    args = top.parse_args(argv)
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
