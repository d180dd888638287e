"""Shell completion (argcomplete, bash and zsh): verbs and options from the parsers, type
names from the interfaces emailmw knows, and topic, service, action and node names from the
graph daemon (``daemon.py``: from memory), else from the mailbox, when it answers within
:data:`GRAPH_BUDGET_S` (else none: a completion never hangs the shell); a node's parameter
names from the daemon (it asks the node).

Install once (``docs/ros-users.md``)::

    eval "$(register-python-argcomplete emailmw)"     # in ~/.bashrc or ~/.zshrc

The completers are attached in one place, :func:`install`, by each command's argument
names (``name`` of ``topic echo`` completes topics, ``type`` of ``service call`` service
types, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from .._core.config import load_options
from .._core.interfaces import interface_names
from .._core.names import is_hidden
from .._delivery.graph import Graph, read_graph
from .._transport.factory import make_receiver
from .quick import ask, config_file, daemon_socket, private_directory

__all__ = ["GRAPH_BUDGET_S", "install", "names_of"]

#: how long a completion waits for the graph (seconds)
GRAPH_BUDGET_S = 1.0

Completer = Callable[..., list[str]]


def _graph(parsed_args: argparse.Namespace) -> Graph | None:
    """The graph of the configured account, or None when there is none or it takes longer
    than the budget (the reading goes on in a daemon thread the shell does not wait for)."""
    found: list[Graph] = []

    def read() -> None:
        options = load_options(getattr(parsed_args, "config", None))
        if options.intraprocess:
            return
        receiver = make_receiver(options)
        try:
            found.append(read_graph(receiver))
        finally:
            receiver.close()

    def guarded() -> None:
        with contextlib.suppress(Exception):  # no completion is the answer to any failure
            read()

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    thread.join(GRAPH_BUDGET_S)
    return found[0] if found else None


def _from_daemon(parsed_args: argparse.Namespace, kind: str, node: str = "") -> list[str] | None:
    """The names of ``kind`` the configuration's graph daemon knows (``daemon.py``: from
    memory), or None when none answers within the budget."""
    given = getattr(parsed_args, "config", None)
    config = config_file(["--config", given] if given else [])
    if config is None or not private_directory((path := daemon_socket(config)).parent):
        return None  # (no daemon, or a directory whose socket could be anyone's)
    try:
        answer = ask(path, {"control": "names", "kind": kind, "node": node},
                     timeout=GRAPH_BUDGET_S)  # fmt: skip
    except (OSError, ValueError):
        return None
    names = answer.get("names")
    return [str(n) for n in names] if isinstance(names, list) else None


def _from_graph(kind: str) -> Completer:
    def complete(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
        names = _from_daemon(parsed_args, kind)
        if names is None:
            graph = _graph(parsed_args)
            if graph is None:
                return []
            names = names_of(kind, graph)
        return sorted(n for n in names if n.startswith(prefix))

    return complete


def _parameters(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """A node's parameter names: asked of the node by the graph daemon (without one, a
    login and a call would not fit in the budget: none)."""
    node = getattr(parsed_args, "node", None)
    names = _from_daemon(parsed_args, "parameters", node) if node else None
    return sorted(n for n in names or [] if n.startswith(prefix))


def _topics(graph: Graph) -> list[str]:
    return [t for t in graph.topics() if not is_hidden(t)]


def _services(graph: Graph) -> list[str]:
    return [s for s in graph.services() if not is_hidden(s)]


def _actions(graph: Graph) -> list[str]:
    suffix = "/_action/send_goal"
    return [s[: -len(suffix)] for s in graph.services() if s.endswith(suffix)]


def _nodes(graph: Graph) -> list[str]:
    return [n for n in graph.nodes if not is_hidden(n)]


_GRAPH_NAMES: dict[str, Callable[[Graph], list[str]]] = {
    "topics": _topics, "services": _services, "actions": _actions, "nodes": _nodes,
}  # fmt: skip


def names_of(kind: str, graph: Graph, name: str = "") -> list[str]:
    """The names of ``kind`` (``topics``, ``services``, ``actions``, ``nodes``) in
    ``graph``, hidden ones left out; ``topic-types``, ``service-types``: the types the
    graph knows of topic or service ``name``."""
    if kind == "topic-types":
        return sorted(graph.topics().get(name, ()))
    if kind == "service-types":
        return sorted(graph.services().get(name, ()))
    return _GRAPH_NAMES[kind](graph)


def _types(kind: str) -> Completer:
    """The types of ``kind`` (``msg``, ``srv``, ``action``); for a topic or service the
    graph knows (``topic pub /chatter``, ``service call /add_two_ints``), its own type(s)
    only, as ros2cli offers them."""

    def complete(prefix: str, parsed_args: argparse.Namespace | None = None,
                 **_: Any) -> list[str]:  # fmt: skip
        name = getattr(parsed_args, "name", None) if kind in ("msg", "srv") else None
        if parsed_args is not None and name:
            graph_kind = "topic-types" if kind == "msg" else "service-types"
            own = _from_daemon(parsed_args, graph_kind, name)
            if own is None:
                graph = _graph(parsed_args)
                own = names_of(graph_kind, graph, name) if graph is not None else []
            found = [t for t in own if t.startswith(prefix)]
            if found:
                return found
        return [n for n in interface_names() if f"/{kind}/" in n and n.startswith(prefix)]

    return complete


def _all_types(prefix: str, **_: Any) -> list[str]:
    return [n for n in interface_names() if n.startswith(prefix)]


#: (command, argument) -> its completer; the verb does not matter
_COMPLETERS: dict[tuple[str, str], Completer] = {
    ("topic", "name"): _from_graph("topics"),
    ("topic", "type"): _types("msg"),
    ("service", "name"): _from_graph("services"),
    ("service", "type"): _types("srv"),
    ("action", "name"): _from_graph("actions"),
    ("action", "type"): _types("action"),
    ("node", "name"): _from_graph("nodes"),
    ("param", "node"): _from_graph("nodes"),
    ("param", "name"): _parameters,
    ("interface", "type"): _all_types,
    ("bag", "topics"): _from_graph("topics"),
}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-parsers there (no public API)
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def install(parser: argparse.ArgumentParser) -> None:
    """Attach the completers to the arguments of every command's verbs."""
    for command, command_parser in _subcommands(parser).items():
        for verb_parser in [command_parser, *_subcommands(command_parser).values()]:
            for action in verb_parser._actions:
                completer = _COMPLETERS.get((command, action.dest))
                if completer is not None:
                    action.completer = completer  # type: ignore[attr-defined]
