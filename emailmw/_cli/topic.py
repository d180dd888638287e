"""``emailmw topic list|info|type|find|echo|pub|hz|bw|delay``: ros2 topic's verbs over
email, with its options and output formats.

The graph (``list``/``info``/``type``/``find``) is read from the mailbox's history of the
graph topic, so it is there at once. Verbs that wait (``echo``, ``hz``, ``bw``, ``delay``)
see mail that arrives after they start (``echo --qos-durability transient_local``: the
newest ``--qos-depth`` messages of the mailbox first); ``--count`` makes ``hz``/``bw``/
``delay`` stop after that many messages.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import statistics
import sys
import time
from typing import Any

import yaml

from .._core.errors import TypeMismatchError
from .._core.interfaces import deserialize, get_interface, serialize, to_data
from .._core.names import is_hidden
from .._core.protocol import PublishRoute, classify
from .._core.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSPresetProfiles,
    QoSProfile,
    ReliabilityPolicy,
)
from .._delivery.context import Context
from .._delivery.entities import Subscription
from .._delivery.graph import GRAPH_TOPIC, Graph
from .._delivery.waitset import wait_for_message_with_info
from .._ros.node import Node
from .common import CommandError, Commands, current_graph, resolve, verbs, with_account, yaml_values
from .interface import message_type

__all__ = ["add_qos_options", "qos_of", "register"]


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of Hz, got {text!r}")
    return value


def add_qos_options(parser: argparse.ArgumentParser) -> None:
    """ros2's ``--qos-*`` options."""
    parser.add_argument("--qos-profile", choices=QoSPresetProfiles.short_keys())
    parser.add_argument("--qos-depth", type=int, metavar="N")
    parser.add_argument("--qos-history", choices=["keep_last", "keep_all", "system_default"])
    parser.add_argument("--qos-reliability", choices=["reliable", "best_effort", "system_default"])
    parser.add_argument(
        "--qos-durability", choices=["volatile", "transient_local", "system_default"]
    )


def qos_of(args: argparse.Namespace) -> QoSProfile:
    """The QoS the ``--qos-*`` options say (a preset, then each option over it)."""
    profile = (
        QoSPresetProfiles.get_from_short_key(args.qos_profile)
        if args.qos_profile
        else QoSProfile(depth=10)
    )
    if args.qos_depth is not None:
        if args.qos_depth < 1:
            raise CommandError("--qos-depth must be 1 or more")
        profile.depth = args.qos_depth
    if args.qos_history:
        profile.history = HistoryPolicy[args.qos_history.upper()]
    if args.qos_reliability:
        profile.reliability = ReliabilityPolicy[args.qos_reliability.upper()]
    if args.qos_durability:
        profile.durability = DurabilityPolicy[args.qos_durability.upper()]
    return profile


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "topic", help="topics: list, info, type, find, echo, pub, hz, bw, delay"
    )
    add = verbs(parser, common)
    p = add("list", run=list_, help="topics in the graph")
    p.add_argument("-t", "--show-types", action="store_true")
    p.add_argument(
        "--include-hidden-topics", action="store_true", help="those with a token starting _"
    )
    p = add("info", run=info, help="type, publishers and subscriptions of a topic")
    p.add_argument("name")
    p.add_argument("-v", "--verbose", action="store_true", help="each endpoint: node, GID, QoS")
    add("type", run=type_, help="the type of a topic").add_argument("name")
    add("find", run=find, help="the topics of a type").add_argument("type")
    p = add("echo", run=echo, help="print the messages of a topic")
    p.add_argument("name")
    p.add_argument("--once", action="store_true", help="exit after the first message")
    p.add_argument("--field", help="print only this field (a.b for nested)")
    p.add_argument("--csv", action="store_true", help="one line of values per message")
    p.add_argument("--no-arr", action="store_true", help="arrays as their type and length")
    p.add_argument("--no-str", action="store_true", help="strings as their length")
    p.add_argument(
        "--filter",
        dest="filter_expr",
        metavar="EXPR",
        help="print only messages for which the Python expression on m is true",
    )
    add_qos_options(p)
    p = add("pub", run=pub, help="publish a message given as YAML")
    p.add_argument("name")
    p.add_argument("type")
    p.add_argument("values", nargs="?", default="{}")
    p.add_argument("-r", "--rate", type=_positive, default=1.0, help="Hz (default 1)")
    p.add_argument("-t", "--times", type=int, default=0, help="publish N times (0: forever)")
    p.add_argument("-1", "--once", action="store_true", help="publish once")
    add_qos_options(p)
    for verb, what, run in (
        ("hz", "message rate", hz),
        ("bw", "bandwidth", bw),
        ("delay", "delay from publisher to here (Source-Timestamp)", delay),
    ):
        p = add(verb, run=run, help=what)
        p.add_argument("name")
        p.add_argument("--count", type=int, default=0, help="stop after N messages")
        p.add_argument("-w", "--window", type=int, default=10000, help="over the last N")


def _graph(context: Context) -> Graph:
    return current_graph(context)


@with_account
def list_(context: Context, args: argparse.Namespace) -> int:
    table = _graph(context).topics()
    for name in sorted(n for n in table if args.include_hidden_topics or not is_hidden(n)):
        print(f"{name} [{', '.join(sorted(table[name]))}]" if args.show_types else name)
    return 0


def _types(graph: Graph, topic: str) -> set[str]:
    kinds = graph.topics().get(topic)
    if kinds is None:
        raise CommandError(f"no topic {topic!r} in the graph (see 'emailmw topic list')")
    return kinds


@with_account
def info(context: Context, args: argparse.Namespace) -> int:
    graph = _graph(context)
    topic = resolve(args.name)
    kinds = _types(graph, topic)
    print(f"Type: {', '.join(sorted(kinds))}\n")
    for kind, title in (("publisher", "Publisher"), ("subscription", "Subscription")):
        found = [
            (name, endpoint)
            for name, record in sorted(graph.nodes.items())
            for what, endpoint in record.endpoints
            if what == kind and endpoint.topic == topic
        ]
        print(f"{title} count: {len(found)}\n")
        if not args.verbose:
            continue
        for name, endpoint in found:
            namespace, _, node = name.rpartition("/")
            qos = dict(endpoint.qos)
            print(f"Node name: {node}")
            print(f"Node namespace: {namespace or '/'}")
            print(f"Topic type: {endpoint.type}")
            print(f"Endpoint type: {kind.upper()}")
            print(f"GID: {endpoint.gid:08x}" if endpoint.gid else "GID: (not announced)")
            print("QoS profile:")
            for key in ("reliability", "history", "depth", "durability"):
                label = "History (Depth)" if key == "history" else key.capitalize()
                if key == "depth":
                    continue
                value = qos.get(key, "unknown").upper()
                if key == "history":
                    value = f"{value} ({qos.get('depth', '?')})"
                print(f"  {label}: {value}")
            print("  Lifespan: Infinite\n  Deadline: Infinite\n  Liveliness: AUTOMATIC\n")
    return 0


@with_account
def type_(context: Context, args: argparse.Namespace) -> int:
    for kind in sorted(_types(_graph(context), resolve(args.name))):
        print(kind)
    return 0


@with_account
def find(context: Context, args: argparse.Namespace) -> int:
    for name, kinds in sorted(_graph(context).topics().items()):
        if args.type in kinds and name != GRAPH_TOPIC:
            print(name)
    return 0


def _warn_if_unpublished(context: Context, topic: str) -> None:
    if not any(t == topic for n in _graph(context).nodes.values() for t, _ in n.publishers):
        print(
            f"WARNING: topic [{topic}] does not appear to be published yet",
            file=sys.stderr,
            flush=True,
        )


def _field(data: Any, path: str) -> Any:
    value = data
    for depth, part in enumerate(path.split(".")):
        if not isinstance(value, dict) or part not in value:
            where = ".".join(path.split(".")[:depth]) or "the message"
            fields = ", ".join(value) if isinstance(value, dict) else "none"
            raise CommandError(f"--field: {where} has no field {part!r} (its fields: {fields})")
        value = value[part]
    return value


def _abridged(value: Any, no_arr: bool, no_str: bool) -> Any:
    if isinstance(value, dict):
        return {k: _abridged(v, no_arr, no_str) for k, v in value.items()}
    if isinstance(value, list):
        if no_arr:
            return f"<sequence length: {len(value)}>"
        return [_abridged(v, no_arr, no_str) for v in value]
    if isinstance(value, str) and no_str:
        return f"<string length: {len(value)}>"
    return value


def _csv(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [cell for v in value.values() for cell in _csv(v)]
    if isinstance(value, list):
        return [cell for v in value for cell in _csv(v)]
    if isinstance(value, bool):
        return ["True" if value else "False"]
    return [str(value)]


class _Message:
    """``m`` of ``--filter``: a message's fields as attributes (nested too)."""

    def __init__(self, data: Any) -> None:
        for key, value in (data or {}).items() if isinstance(data, dict) else ():
            setattr(self, key, _Message(value) if isinstance(value, dict) else value)


def _compile_filter(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return compile(text, "--filter", "eval")
    except SyntaxError as exc:
        raise CommandError(f"--filter: not a Python expression: {exc.msg}") from None


def _history(context: Context, topic: str, depth: int) -> list[tuple[str, Any]]:
    """The newest ``depth`` messages of ``topic`` in the mailbox (transient_local)."""
    try:
        stored = context.receiver.history(topic, 4 * depth + 16)
    except NotImplementedError:
        return []
    now = time.time_ns()
    routed = [
        (email.body, route.info)
        for email in stored
        if isinstance(route := classify(email, now), PublishRoute) and route.topic == topic
    ]
    routed.sort(key=lambda item: (item[1].source_timestamp, item[1].sequence_number or 0))
    return routed[-depth:]


@with_account
def echo(context: Context, args: argparse.Namespace) -> int:
    topic = resolve(args.name)
    qos = qos_of(args)
    condition = _compile_filter(args.filter_expr)
    sub = Subscription(topic, qos.depth if qos.history is HistoryPolicy.KEEP_LAST else None,
                       context=context)  # fmt: skip
    _warn_if_unpublished(context, topic)
    pending = (
        _history(context, topic, qos.depth)
        if qos.durability is DurabilityPolicy.TRANSIENT_LOCAL
        else []
    )
    seen: set[tuple[int, int | None]] = set()
    while True:
        if pending:
            body, info = pending.pop(0)
        else:
            got = wait_for_message_with_info(sub, -1)
            if got is None:
                continue
            body, info = got
        key = (info.publisher_gid.value, info.sequence_number)
        if info.sequence_number is not None and key in seen:
            continue  # the history and the live subscription overlap
        seen.add(key)
        data = _data(body, info.message_type)
        if condition is not None:
            try:
                passes = eval(condition, {"__builtins__": {}}, {"m": _Message(data)})  # noqa: S307
            except Exception as exc:  # noqa: BLE001 - the user's expression may raise anything
                raise CommandError(f"--filter: {type(exc).__name__}: {exc}") from None
            if not passes:
                continue
        if args.field:
            data = _field(data, args.field)
        data = _abridged(data, args.no_arr, args.no_str)
        if args.csv:
            print(",".join(_csv(data)), flush=True)
        elif isinstance(data, dict | list):
            print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip("\n"))
            print("---", flush=True)
        else:
            print(data)
            print("---", flush=True)
        if args.once:
            return 0


def _data(body: str, message_type: str | None) -> Any:
    """A message's data: its typed fields, else what its YAML body holds, else the body."""
    if message_type is not None:
        try:
            return to_data(deserialize(get_interface(message_type), body))
        except (KeyError, TypeMismatchError):
            pass
    try:
        loaded = yaml.safe_load(body)
    except yaml.YAMLError:
        return body.rstrip("\n")
    return loaded if isinstance(loaded, dict | list) else body.rstrip("\n")


class RateWindow:
    """The last ``size`` messages of a topic, by when they were **sent** (their
    Source-Timestamp), not when they arrived: mail arrives in bursts (a batch email brings
    many at once, a server delivers in parallel), so arrival times say how the mail
    travelled, not how often the topic is published. Kept in send order. Pure."""

    def __init__(self, size: int) -> None:
        self.size = max(2, size)
        self.stamps: list[float] = []  # seconds, sorted
        self.sizes: list[int] = []  # in the same order
        self.delays: list[float] = []  # arrival - send, seconds (arrival order)

    def add(self, sent_s: float, size: int, delay_s: float) -> None:
        at = bisect.bisect_right(self.stamps, sent_s)
        self.stamps.insert(at, sent_s)
        self.sizes.insert(at, size)
        self.delays.append(delay_s)
        del self.stamps[: -self.size], self.sizes[: -self.size], self.delays[: -self.size]

    def gaps(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.stamps)]

    def span(self) -> float:
        return self.stamps[-1] - self.stamps[0] if len(self.stamps) > 1 else 0.0


def _rate(context: Context, args: argparse.Namespace, say: Any) -> int:
    """Read the topic and print ``say(window)`` once a second (as ros2 does), the first
    time once the window holds two messages."""
    topic = resolve(args.name)
    sub = Subscription(topic, context=context)
    _warn_if_unpublished(context, topic)
    window = RateWindow(args.window)
    received = 0
    said = 0.0
    while not args.count or received < args.count:
        got = wait_for_message_with_info(sub, 1.0)
        if got is not None:
            received += 1
            info = got[1]
            window.add(info.source_timestamp / 1e9, len(got[0].encode()),
                       (time.time_ns() - info.source_timestamp) / 1e9)  # fmt: skip
        if time.monotonic() - said < 1.0 and not (args.count and received >= args.count):
            continue
        line = say(window)
        if line:
            print(line, flush=True)
            said = time.monotonic()
    return 0


@with_account
def hz(context: Context, args: argparse.Namespace) -> int:
    return _rate(context, args, hz_line)


def hz_line(window: RateWindow) -> str:
    """What ``topic hz`` says of ``window`` ('' before two messages)."""
    gaps = window.gaps()
    if not gaps or window.span() <= 0:
        return ""
    return (
        f"average rate: {(len(gaps)) / window.span():.3f}\n"
        f"\tmin: {min(gaps):.3f}s max: {max(gaps):.3f}s "
        f"std dev: {statistics.pstdev(gaps):.5f}s window: {len(window.stamps)}"
    )


@with_account
def bw(context: Context, args: argparse.Namespace) -> int:
    return _rate(context, args, bw_line)


def bw_line(window: RateWindow) -> str:
    """What ``topic bw`` says of ``window`` ('' before two messages)."""
    span = window.span()
    if span <= 0:
        return ""
    return f"{sum(window.sizes[1:]) / span:.2f} B/s from {len(window.stamps)} messages"


@with_account
def delay(context: Context, args: argparse.Namespace) -> int:
    def say(window: RateWindow) -> str:
        delays = window.delays
        if not delays:
            return ""
        return (
            f"average delay: {statistics.mean(delays):.3f}\n"
            f"\tmin: {min(delays):.3f}s max: {max(delays):.3f}s "
            f"std dev: {statistics.pstdev(delays):.5f}s window: {len(delays)}"
        )

    return _rate(context, args, say)


def pub(args: argparse.Namespace) -> int:
    kind = message_type(args.type)  # mistakes in the arguments before connecting
    try:
        msg = deserialize(kind, yaml.safe_dump(yaml_values(args.values)))
    except TypeMismatchError as exc:
        raise CommandError(f"VALUES: {exc}") from None
    return _publish(args, kind, msg, qos_of(args))


@with_account
def _publish(
    context: Context, args: argparse.Namespace, kind: Any, msg: Any, qos: QoSProfile
) -> int:
    node = Node(f"emailmw_cli_pub_{int(time.time())}", context=context, announce_period=60,
                start_parameter_services=False)  # fmt: skip
    publisher = node.create_publisher(kind, resolve(args.name), qos)
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
