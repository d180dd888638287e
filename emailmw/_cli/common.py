"""What every verb of the command line shares: the common options, the account context a
verb that talks to other processes runs in, and the one-line errors of user mistakes.

A command module (``topic``, ``service``, ...) has ``register(commands, common)``, which
adds its parser; each verb is one function ``run(args) -> int`` bound to its parser with
``set_defaults(run=...)``. A verb that needs the mail account takes the context as its
first argument and is wrapped with :func:`with_account`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from .._core.config import load_options
from .._core.errors import EmailMWError, yaml_error
from .._core.names import resolve_name
from .._delivery.context import Context
from .._delivery.graph import Graph, graph_of, read_graph

__all__ = [
    "CONFIG_HELP",
    "CommandError",
    "Commands",
    "Verb",
    "account_context",
    "common_options",
    "current_graph",
    "share_context",
    "resolve",
    "verbs",
    "with_account",
    "yaml_values",
]

CONFIG_HELP = "email.yml (default: EMAILMW_CONFIG_FILE, EMAIL_CONFIG_FILE, ./email.yml, ~/...)"

#: a verb: the parsed arguments in, the exit status out
Verb = Callable[[argparse.Namespace], int]
#: what ``add_subparsers`` returns (argparse does not name its type)
Commands = Any


class CommandError(EmailMWError):
    """A mistake on the command line: its message is the whole line the user sees (after
    ``emailmw: error:``), saying what to do."""


def common_options() -> argparse.ArgumentParser:
    """The options every command takes after its verb too (``emailmw topic list --config
    F``); absent there (SUPPRESS), the ones before the command stand."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    common.add_argument(  # (as ros2: emailmw topic list --no-daemon)
        "--no-daemon", action="store_true", default=argparse.SUPPRESS,
        help="do not use the graph daemon (emailmw daemon): read the mailbox",
    )  # fmt: skip
    return common


def verbs(
    parser: argparse.ArgumentParser, common: argparse.ArgumentParser
) -> Callable[..., argparse.ArgumentParser]:
    """``add(name, run=..., help=...)``: a verb of ``parser``, taking the common options,
    run by ``run``."""
    group = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def add(name: str, *, run: Verb, **kwargs: Any) -> argparse.ArgumentParser:
        verb = group.add_parser(name, parents=[common], **kwargs)
        verb.set_defaults(run=run)
        return verb

    return add


def take_config(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """``--config FILE`` (or ``--config=FILE``) among a program's arguments, and the rest:
    ``emailmw run PKG EXE --config F`` names the account the program runs on. Arguments
    from ``--ros-args`` on are passed on as they are."""
    found: str | None = None
    rest: list[str] = []
    items = list(argv)
    index = 0
    while index < len(items):
        item = items[index]
        if item == "--ros-args":
            rest.extend(items[index:])
            break
        if item == "--config":
            if index + 1 >= len(items):
                raise CommandError("--config needs a file: --config FILE")
            found = items[index + 1]
            index += 2
            continue
        if item.startswith("--config="):
            found = item.partition("=")[2]
        else:
            rest.append(item)
        index += 1
    return found, rest


def program_environment(config: str | None) -> dict[str, str]:
    """The environment a program started by ``run`` or ``launch`` gets: this one, with
    ``EMAILMW_CONFIG_FILE`` naming ``config`` (made absolute) when one was given, so that
    every node of it finds the account the command line was given. A file that does not
    exist is one line."""
    env = dict(os.environ)
    if config is not None:
        path = Path(config).expanduser()
        if not path.is_file():
            raise CommandError(f"--config {config}: no such file (give the account's email.yml)")
        env["EMAILMW_CONFIG_FILE"] = str(path.resolve())
    return env


def account_context(args: argparse.Namespace) -> Context:
    """The context of the configured mail account (``--config``, else the usual places);
    one line saying how to configure one when there is none.

    The command line looks on, beside the application that may run on the same
    configuration: it settles nothing in the mailbox (``on-receive: keep``, no quarantine)
    and takes neither the application's state file nor its spool (its messages are sent
    with the ``server`` guarantee)."""
    options = load_options(args.config)
    if options.intraprocess:
        raise CommandError(
            "no mail account configured: this command talks to other processes by email. "
            "Give one with --config FILE or EMAILMW_CONFIG_FILE, or write ./email.yml "
            "(an example: README's Configuration; for the local test server: "
            "python -m emailmw.testing.mailserver config alice > email.yml)"
        )
    return Context(
        dataclasses.replace(
            options, on_receive="keep", quarantine=None, state_file=None, spool=None,
            send_guarantee="server",
        )
    )  # fmt: skip


#: the graph daemon's context, which every verb it runs shares (``daemon.py``); None in a
#: command of its own
_shared: Context | None = None


def share_context(context: Context | None) -> None:
    """Let the verbs run in this process use ``context`` (the daemon's), kept open."""
    global _shared
    _shared = context


@contextlib.contextmanager
def _account(args: argparse.Namespace) -> Iterator[Context]:
    if _shared is not None:
        yield _shared
        return
    with account_context(args) as context:
        yield context


def with_account(run: Callable[..., int]) -> Callable[..., int]:
    """``run(context, args, *more)`` as ``verb(args, *more)``: run with the account's
    context (the daemon's, in the daemon), shut down when it returns (the daemon's stays
    open)."""

    @functools.wraps(run)
    def verb(args: argparse.Namespace, *more: Any) -> int:
        with _account(args) as context:
            return run(context, args, *more)

    return verb


def current_graph(context: Context) -> Graph:
    """The graph: the daemon's, kept up to date in memory; else read from the mailbox's
    history of the graph topic (at once, no waiting for the next announcements)."""
    if context is _shared:
        return graph_of(context).graph()
    return read_graph(context.receiver)


def resolve(name: str, what: str = "topic name") -> str:
    """``name`` resolved as a node in the root namespace resolves it (``chatter`` is
    ``/chatter``), the same for every verb."""
    return resolve_name(name, "emailmw_cli", "/", what)


def yaml_values(text: str, what: str = "VALUES") -> Any:
    """``text`` as YAML (an empty text: ``{}``), or one line saying where it is wrong."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CommandError(str(yaml_error(exc, what))) from exc
    return {} if value is None else value
