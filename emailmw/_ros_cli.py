"""``emailmw topic|service|node|interface ...``: ros2cli's verbs over email.

The graph (``list``/``info``) is read from the mailbox's history of the graph topic, so it is
there at once. Commands that wait (``echo``, ``hz``, ``bw``) see mail that arrives after they
start; ``--count`` makes ``hz``/``bw`` stop after that many messages.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import typing
from typing import Any

import yaml

from ._context import Context
from ._entities import Subscription
from ._exceptions import ConfigError
from ._graph import GRAPH_TOPIC, read_graph
from ._interfaces import ServiceType, deserialize, get_interface, interface_names, serialize
from ._node import Node
from ._waitset import wait_for_message_with_info

__all__ = ["add_ros_commands", "run_ros_command"]


def add_ros_commands(commands: Any) -> None:
    topic = commands.add_parser("topic", help="topics: list, info, echo, pub, hz, bw")
    tv = topic.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = tv.add_parser("list", help="topics in the graph")
    p.add_argument("-t", "--show-types", action="store_true")
    p = tv.add_parser("info", help="type, publishers and subscriptions of a topic")
    p.add_argument("name")
    p = tv.add_parser("echo", help="print the messages of a topic")
    p.add_argument("name")
    p.add_argument("--once", action="store_true", help="exit after the first message")
    p.add_argument("--field", help="print only this field (a.b for nested)")
    p = tv.add_parser("pub", help="publish a message given as YAML")
    p.add_argument("name")
    p.add_argument("type")
    p.add_argument("values", nargs="?", default="{}")
    p.add_argument("-r", "--rate", type=float, default=1.0, help="Hz (default 1)")
    p.add_argument("-t", "--times", type=int, default=0, help="publish N times (0: forever)")
    p.add_argument("-1", "--once", action="store_true", help="publish once")
    for verb in ("hz", "bw"):
        p = tv.add_parser(verb, help=f"{'message rate' if verb == 'hz' else 'bandwidth'}")
        p.add_argument("name")
        p.add_argument("--count", type=int, default=0, help="stop after N messages")

    service = commands.add_parser("service", help="services: list, call")
    sv = service.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = sv.add_parser("list", help="services in the graph")
    p.add_argument("-t", "--show-types", action="store_true")
    p = sv.add_parser("call", help="call a service with a request given as YAML")
    p.add_argument("name")
    p.add_argument("type")
    p.add_argument("values", nargs="?", default="{}")
    p.add_argument("--timeout", type=float, default=60.0)

    node = commands.add_parser("node", help="nodes: list, info")
    nv = node.add_subparsers(dest="verb", required=True, metavar="VERB")
    nv.add_parser("list", help="live nodes")
    p = nv.add_parser("info", help="a node's publishers, subscriptions, services")
    p.add_argument("name")

    interface = commands.add_parser("interface", help="message and service types")
    iv = interface.add_subparsers(dest="verb", required=True, metavar="VERB")
    iv.add_parser("list", help="known types")
    p = iv.add_parser("show", help="the fields of a type")
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
    return kind


def _values(text: str) -> Any:
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", source="VALUES") from exc


def _graph_command(context: Context, args: argparse.Namespace) -> int:
    graph = read_graph(context)
    if args.command == "node":
        if args.verb == "list":
            for name in sorted(graph.nodes):
                print(name)
            return 0
        record = graph.nodes.get(args.name)
        if record is None:
            print(f"emailmw: error: no node {args.name!r} in the graph", file=sys.stderr)
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
        kinds = table.get(args.name)
        if kinds is None:
            print(f"emailmw: error: no topic {args.name!r} in the graph", file=sys.stderr)
            return 1
        pubs = sum(1 for n in graph.nodes.values() for t, _ in n.publishers if t == args.name)
        subs = sum(1 for n in graph.nodes.values() for t, _ in n.subscriptions if t == args.name)
        print(
            f"Type: {', '.join(sorted(kinds))}\nPublisher count: {pubs}\nSubscription count: {subs}"
        )
        return 0
    for name in sorted(n for n in table if n != GRAPH_TOPIC):
        print(f"{name} [{', '.join(sorted(table[name]))}]" if args.show_types else name)
    return 0


def _echo(context: Context, args: argparse.Namespace) -> int:
    sub = Subscription(args.name, context=context)
    while True:
        got = wait_for_message_with_info(sub, -1)
        if got is None:
            continue
        body, _ = got
        if args.field:
            value: Any = yaml.safe_load(body)
            for part in args.field.split("."):
                value = value[part] if isinstance(value, dict) else None
            print(value if not isinstance(value, dict | list) else yaml.safe_dump(value).strip())
        else:
            print(body.rstrip("\n"))
        print("---", flush=True)
        if args.once:
            return 0


def _rate(context: Context, args: argparse.Namespace) -> int:
    sub = Subscription(args.name, context=context)
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
    publisher = node.create_publisher(kind, args.name)
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
    client = node.create_client(kind, args.name)
    print(f"requester: making request: {serialize(request).strip()}", flush=True)
    response = client.call(request, timeout=args.timeout)
    print(f"response:\n{serialize(response).strip()}")
    node.destroy_node()
    return 0


def run_ros_command(args: argparse.Namespace) -> int:
    if args.command == "interface":
        return _interface(args)
    with Context(args.config) as context:
        if args.command in ("node",) or args.verb in ("list", "info"):
            return _graph_command(context, args)
        if args.verb == "echo":
            return _echo(context, args)
        if args.verb in ("hz", "bw"):
            return _rate(context, args)
        if args.verb == "pub":
            return _pub(context, args)
        return _call(context, args)
