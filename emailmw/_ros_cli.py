"""``emailmw topic|service|node|interface ...``: ros2cli's verbs over email.

The graph (``list``/``info``) is read from the mailbox's history of the graph topic, so it is
there at once. Commands that wait (``echo``, ``hz``, ``bw``) see mail that arrives after they
start; ``--count`` makes ``hz``/``bw`` stop after that many messages.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
import typing
from collections.abc import Callable
from typing import Any

import yaml

from ._config import load_options
from ._context import Context
from ._entities import Subscription
from ._exceptions import ConfigError
from ._graph import GRAPH_TOPIC, read_graph
from ._interfaces import ServiceType, deserialize, get_interface, interface_names, serialize
from ._names import resolve_name
from ._node import Node
from ._waitset import wait_for_message_with_info

__all__ = ["add_ros_commands", "run_ros_command"]


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of Hz, got {text!r}")
    return value


def add_ros_commands(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """The verbs; each leaf parser takes ``parents``' options (``--config`` after the verb)."""

    def subcommands(parser: argparse.ArgumentParser) -> Callable[..., argparse.ArgumentParser]:
        verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        return functools.partial(verbs.add_parser, parents=parents)

    topic = commands.add_parser("topic", help="topics: list, info, echo, pub, hz, bw")
    tv = subcommands(topic)
    p = tv("list", help="topics in the graph")
    p.add_argument("-t", "--show-types", action="store_true")
    p = tv("info", help="type, publishers and subscriptions of a topic")
    p.add_argument("name")
    p = tv("echo", help="print the messages of a topic")
    p.add_argument("name")
    p.add_argument("--once", action="store_true", help="exit after the first message")
    p.add_argument("--field", help="print only this field (a.b for nested)")
    p = tv("pub", help="publish a message given as YAML")
    p.add_argument("name")
    p.add_argument("type")
    p.add_argument("values", nargs="?", default="{}")
    p.add_argument("-r", "--rate", type=_positive, default=1.0, help="Hz (default 1)")
    p.add_argument("-t", "--times", type=int, default=0, help="publish N times (0: forever)")
    p.add_argument("-1", "--once", action="store_true", help="publish once")
    for verb in ("hz", "bw"):
        p = tv(verb, help=f"{'message rate' if verb == 'hz' else 'bandwidth'}")
        p.add_argument("name")
        p.add_argument("--count", type=int, default=0, help="stop after N messages")

    service = commands.add_parser("service", help="services: list, call")
    sv = subcommands(service)
    p = sv("list", help="services in the graph")
    p.add_argument("-t", "--show-types", action="store_true")
    p = sv("call", help="call a service with a request given as YAML")
    p.add_argument("name")
    p.add_argument("type")
    p.add_argument("values", nargs="?", default="{}")
    p.add_argument("--timeout", type=float, default=60.0)

    node = commands.add_parser("node", help="nodes: list, info")
    nv = subcommands(node)
    nv("list", help="live nodes")
    p = nv("info", help="a node's publishers, subscriptions, services")
    p.add_argument("name")

    interface = commands.add_parser("interface", help="message and service types")
    iv = subcommands(interface)
    iv("list", help="known types")
    p = iv("show", help="the fields of a type")
    p.add_argument("type")


def _fields(cls: Any, indent: str = "") -> list[str]:
    lines = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        name = getattr(kind, "__emailmw_type__", None) or getattr(kind, "__name__", str(kind))
        lines.append(f"{indent}{name} {f.name}")
        if dataclasses.is_dataclass(kind):
            lines += _fields(kind, indent + "\t")
    return lines


def _interface(args: argparse.Namespace) -> int:
    if args.verb == "list":
        for name in interface_names():
            print(name)
        return 0
    kind = get_interface(args.type)
    if isinstance(kind, ServiceType):
        print("\n".join([*_fields(kind.Request), "---", *_fields(kind.Response)]))
    else:
        print("\n".join(_fields(kind)))
    return 0


def _message_type(name: str) -> Any:
    try:
        kind = get_interface(name)
    except KeyError as exc:
        raise ConfigError(
            f"unknown message type {name!r} (see 'emailmw interface list')", source="TYPE"
        ) from exc
    if isinstance(kind, ServiceType):
        raise ConfigError(
            f"{name!r} is a service type: a topic carries a message type such as "
            "std_msgs/msg/String (see 'emailmw interface list')",
            source="TYPE",
        )
    return kind


def _name(name: str, what: str = "topic name") -> str:
    """``name`` resolved as a node in the root namespace resolves it (``chatter`` is
    ``/chatter``), the same for every verb."""
    return resolve_name(name, "emailmw_cli", "/", what)


def _warn_if_unpublished(context: Context, topic: str) -> None:
    if not any(
        t == topic for n in read_graph(context.receiver).nodes.values() for t, _ in n.publishers
    ):
        print(
            f"WARNING: topic [{topic}] does not appear to be published yet",
            file=sys.stderr,
            flush=True,
        )


def _field(body: str, path: str) -> Any:
    value: Any = yaml.safe_load(body)
    for depth, part in enumerate(path.split(".")):
        if not isinstance(value, dict) or part not in value:
            where = ".".join(path.split(".")[:depth]) or "the message"
            fields = ", ".join(value) if isinstance(value, dict) else "none"
            raise ConfigError(
                f"{where} has no field {part!r} (its fields: {fields})", source="--field"
            )
        value = value[part]
    return value


def _values(text: str) -> Any:
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", source="VALUES") from exc


def _graph_command(context: Context, args: argparse.Namespace) -> int:
    graph = read_graph(context.receiver)
    if args.command == "node":
        if args.verb == "list":
            for name in sorted(graph.nodes):
                print(name)
            return 0
        node_name = args.name if args.name.startswith("/") else f"/{args.name}"
        record = graph.nodes.get(node_name)
        if record is None:
            print(f"emailmw: error: no node {node_name!r} in the graph", file=sys.stderr)
            return 1
        print(record.name)
        for title, pairs in (
            ("Publishers", record.publishers),
            ("Subscribers", record.subscriptions),
            ("Service Servers", record.services),
            ("Service Clients", record.clients),
        ):
            print(f"  {title}:")
            for name, kind in sorted(pairs):
                print(f"    {name}: {kind}")
        return 0
    table = graph.services() if args.command == "service" else graph.topics()
    if args.command == "topic" and args.verb == "info":
        topic = _name(args.name)
        kinds = table.get(topic)
        if kinds is None:
            print(f"emailmw: error: no topic {topic!r} in the graph", file=sys.stderr)
            return 1
        pubs = sum(1 for n in graph.nodes.values() for t, _ in n.publishers if t == topic)
        subs = sum(1 for n in graph.nodes.values() for t, _ in n.subscriptions if t == topic)
        print(
            f"Type: {', '.join(sorted(kinds))}\nPublisher count: {pubs}\nSubscription count: {subs}"
        )
        return 0
    for name in sorted(n for n in table if n != GRAPH_TOPIC):
        print(f"{name} [{', '.join(sorted(table[name]))}]" if args.show_types else name)
    return 0


def _echo(context: Context, args: argparse.Namespace) -> int:
    topic = _name(args.name)
    sub = Subscription(topic, context=context)
    _warn_if_unpublished(context, topic)
    while True:
        got = wait_for_message_with_info(sub, -1)
        if got is None:
            continue
        body, _ = got
        if args.field:
            value = _field(body, args.field)
            print(value if not isinstance(value, dict | list) else yaml.safe_dump(value).strip())
        else:
            print(body.rstrip("\n"))
        print("---", flush=True)
        if args.once:
            return 0


def _rate(context: Context, args: argparse.Namespace) -> int:
    topic = _name(args.name)
    sub = Subscription(topic, context=context)
    _warn_if_unpublished(context, topic)
    stamps: list[float] = []
    sizes: list[int] = []
    while not args.count or len(stamps) < args.count:
        got = wait_for_message_with_info(sub, -1)
        if got is None:
            continue
        stamps.append(time.monotonic())
        sizes.append(len(got[0].encode()))
        if len(stamps) >= 2:
            span = stamps[-1] - stamps[0]
            if args.verb == "hz":
                print(
                    f"average rate: {(len(stamps) - 1) / span:.3f}\n\tmessages: {len(stamps)}",
                    flush=True,
                )
            else:
                print(f"{sum(sizes[1:]) / span:.2f} B/s from {len(stamps)} messages", flush=True)
    return 0


def _pub(context: Context, args: argparse.Namespace) -> int:
    kind = _message_type(args.type)
    msg = deserialize(kind, yaml.safe_dump(_values(args.values)))
    node = Node(f"emailmw_cli_pub_{int(time.time())}", context=context, announce_period=60)
    publisher = node.create_publisher(kind, _name(args.name))
    times = 1 if args.once else args.times
    sent = 0
    while not times or sent < times:
        publisher.publish(msg)
        sent += 1
        print(f"publishing #{sent}: {serialize(msg).strip()}", flush=True)
        if not times or sent < times:
            time.sleep(1.0 / args.rate)
    context.flush(30)
    node.destroy_node()
    return 0


def _call(context: Context, args: argparse.Namespace) -> int:
    kind = get_interface(args.type)
    if not isinstance(kind, ServiceType):
        raise ConfigError(f"{args.type!r} is not a service type", source="TYPE")
    request = deserialize(kind.Request, yaml.safe_dump(_values(args.values)))
    node = Node(f"emailmw_cli_call_{int(time.time())}", context=context, announce_period=60)
    client = node.create_client(kind, _name(args.name, "service name"))
    print(f"requester: making request: {serialize(request).strip()}", flush=True)
    response = client.call(request, timeout=args.timeout)
    print(f"response:\n{serialize(response).strip()}")
    node.destroy_node()
    return 0


def run_ros_command(args: argparse.Namespace) -> int:
    if args.command == "interface":
        return _interface(args)
    options = load_options(args.config)
    if options.intraprocess:
        raise ConfigError(
            "no mail account configured: this command talks to other processes by email. "
            "Give one with --config FILE or EMAILMW_CONFIG_FILE, or write ./email.yml "
            "(an example: README's Configuration; for the local test server: "
            "python -m emailmw.testing.mailserver config alice > email.yml)",
            source=args.config or "emailmw",
        )
    with Context(options) as context:
        if args.command in ("node",) or args.verb in ("list", "info"):
            return _graph_command(context, args)
        if args.verb == "echo":
            return _echo(context, args)
        if args.verb in ("hz", "bw"):
            return _rate(context, args)
        if args.verb == "pub":
            return _pub(context, args)
        return _call(context, args)
