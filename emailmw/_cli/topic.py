"""``emailmw topic list|info|echo|pub|hz|bw``: ros2 topic's verbs over email.

The graph (``list``/``info``) is read from the mailbox's history of the graph topic, so it is
there at once. Verbs that wait (``echo``, ``hz``, ``bw``) see mail that arrives after they
start; ``--count`` makes ``hz``/``bw`` stop after that many messages.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import yaml

from .._context import Context
from .._entities import Subscription
from .._graph import GRAPH_TOPIC, read_graph
from .._interfaces import deserialize, serialize
from .._node import Node
from .._waitset import wait_for_message_with_info
from .common import CommandError, Commands, resolve, verbs, with_account, yaml_values
from .interface import message_type

__all__ = ["register"]


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of Hz, got {text!r}")
    return value


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("topic", help="topics: list, info, echo, pub, hz, bw")
    add = verbs(parser, common)
    add("list", run=list_, help="topics in the graph").add_argument(
        "-t", "--show-types", action="store_true"
    )
    add("info", run=info, help="type, publishers and subscriptions of a topic").add_argument("name")
    p = add("echo", run=echo, help="print the messages of a topic")
    p.add_argument("name")
    p.add_argument("--once", action="store_true", help="exit after the first message")
    p.add_argument("--field", help="print only this field (a.b for nested)")
    p = add("pub", run=pub, help="publish a message given as YAML")
    p.add_argument("name")
    p.add_argument("type")
    p.add_argument("values", nargs="?", default="{}")
    p.add_argument("-r", "--rate", type=_positive, default=1.0, help="Hz (default 1)")
    p.add_argument("-t", "--times", type=int, default=0, help="publish N times (0: forever)")
    p.add_argument("-1", "--once", action="store_true", help="publish once")
    for verb, what, run in (("hz", "message rate", hz), ("bw", "bandwidth", bw)):
        p = add(verb, run=run, help=what)
        p.add_argument("name")
        p.add_argument("--count", type=int, default=0, help="stop after N messages")


@with_account
def list_(context: Context, args: argparse.Namespace) -> int:
    table = read_graph(context.receiver).topics()
    for name in sorted(n for n in table if n != GRAPH_TOPIC):
        print(f"{name} [{', '.join(sorted(table[name]))}]" if args.show_types else name)
    return 0


@with_account
def info(context: Context, args: argparse.Namespace) -> int:
    graph = read_graph(context.receiver)
    topic = resolve(args.name)
    kinds = graph.topics().get(topic)
    if kinds is None:
        raise CommandError(f"no topic {topic!r} in the graph (see 'emailmw topic list')")
    pubs = sum(1 for n in graph.nodes.values() for t, _ in n.publishers if t == topic)
    subs = sum(1 for n in graph.nodes.values() for t, _ in n.subscriptions if t == topic)
    print(f"Type: {', '.join(sorted(kinds))}\nPublisher count: {pubs}\nSubscription count: {subs}")
    return 0


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
            raise CommandError(f"--field: {where} has no field {part!r} (its fields: {fields})")
        value = value[part]
    return value


@with_account
def echo(context: Context, args: argparse.Namespace) -> int:
    topic = resolve(args.name)
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


def _rate(context: Context, args: argparse.Namespace, say: Any) -> int:
    topic = resolve(args.name)
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
            print(say(stamps, sizes), flush=True)
    return 0


@with_account
def hz(context: Context, args: argparse.Namespace) -> int:
    return _rate(
        context,
        args,
        lambda stamps, _: (
            f"average rate: {(len(stamps) - 1) / (stamps[-1] - stamps[0]):.3f}\n"
            f"\tmessages: {len(stamps)}"
        ),
    )


@with_account
def bw(context: Context, args: argparse.Namespace) -> int:
    return _rate(
        context,
        args,
        lambda stamps, sizes: (
            f"{sum(sizes[1:]) / (stamps[-1] - stamps[0]):.2f} B/s from {len(stamps)} messages"
        ),
    )


def pub(args: argparse.Namespace) -> int:
    kind = message_type(args.type)  # mistakes in the arguments before connecting
    msg = deserialize(kind, yaml.safe_dump(yaml_values(args.values)))
    return _publish(args, kind, msg)


@with_account
def _publish(context: Context, args: argparse.Namespace, kind: Any, msg: Any) -> int:
    node = Node(f"emailmw_cli_pub_{int(time.time())}", context=context, announce_period=60)
    publisher = node.create_publisher(kind, resolve(args.name))
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
