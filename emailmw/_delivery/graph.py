"""Discovery: nodes announce themselves on a reserved topic; the graph is computed from the
announcements (a pure function, :func:`build_graph`).

Every node sends an announcement (its name, its publishers, subscriptions, services and
clients with their types) when it starts, whenever its entities change and every
``announce_period`` seconds, and a leave message when it is destroyed. An announcement
expires after three periods, so a node that dies without leaving disappears. Because the
mailbox keeps the announcements, a tool that starts later reads the graph from the
mailbox's history at once instead of waiting for the next round.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import yaml

from .._core.closeable import Closeable
from .._core.log import get_logger
from .._core.protocol import PublishRoute, classify
from .._core.types import Email, MessageInfo
from .._transport.base import EmailReceiver
from .context import Context
from .entities import Publisher, Subscription
from .peers import GRAPH_TOPIC
from .waitset import wait_for_message_with_info

__all__ = [
    "GRAPH_TOPIC",
    "Announced",
    "Announcer",
    "Endpoint",
    "Graph",
    "NodeRecord",
    "GraphMonitor",
    "announcer_of",
    "build_graph",
    "graph_of",
    "read_graph",
]


class Announced(Protocol):
    """What the graph announces of a node (:class:`~emailmw.Node` is one): its name, its
    period and its entities, each with a ``topic`` or ``service_name`` and a type."""

    @property
    def announce_period(self) -> float: ...

    @property
    def publishers(self) -> Sequence[Any]: ...

    @property
    def subscriptions(self) -> Sequence[Any]: ...

    @property
    def services(self) -> Sequence[Any]: ...

    @property
    def clients(self) -> Sequence[Any]: ...

    def get_fully_qualified_name(self) -> str: ...


GRAPH_TYPE: Final = "emailmw/msg/NodeAnnouncement"
_EXPIRY_PERIODS: Final = 3
_log = get_logger("graph")


@dataclass(frozen=True)
class Endpoint:
    """One publisher or subscription as its node announced it: its topic, type, GID
    (0: not said) and QoS (history, depth, reliability, durability; empty: not said)."""

    topic: str
    type: str
    gid: int = 0
    qos: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NodeRecord:
    name: str
    gid: int
    period: float
    announced_ns: int
    publishers: tuple[tuple[str, str], ...] = ()
    subscriptions: tuple[tuple[str, str], ...] = ()
    services: tuple[tuple[str, str], ...] = ()
    clients: tuple[tuple[str, str], ...] = ()
    #: the publishers and subscriptions with their GIDs and QoS (``topic info -v``)
    endpoints: tuple[tuple[str, Endpoint], ...] = ()  # ("publisher" | "subscription", ...)


@dataclass
class Graph:
    nodes: dict[str, NodeRecord] = field(default_factory=dict)

    def topics(self) -> dict[str, set[str]]:
        """Topic -> its types, over every live node's publishers and subscriptions."""
        out: dict[str, set[str]] = {}
        for node in self.nodes.values():
            for topic, kind in (*node.publishers, *node.subscriptions):
                out.setdefault(topic, set()).add(kind)
        return out

    def services(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for node in self.nodes.values():
            for name, kind in node.services:
                out.setdefault(name, set()).add(kind)
        return out


def announcement(node: Announced, event: str = "announce") -> str:
    """A node's announcement: its entities, and what its other waitables (an action's
    server or client) say they are (``graph_entries()``: kind -> (name, type) pairs)."""

    def pairs(entities: Sequence[Any], attr: str, kind: str) -> list[dict[str, Any]]:
        found = [{"name": getattr(e, attr), "type": _type_of(e), **_details(e)} for e in entities]
        for waitable in getattr(node, "waitables", ()):
            entries = getattr(waitable, "graph_entries", None)
            if entries is not None:
                found += [{"name": n, "type": t} for n, t in entries().get(kind, ())]
        return found

    return str(
        yaml.safe_dump(
            {
                "event": event,
                "node": node.get_fully_qualified_name(),
                "period": node.announce_period,
                "publishers": pairs(node.publishers, "topic", "publishers"),
                "subscriptions": pairs(node.subscriptions, "topic", "subscriptions"),
                "services": pairs(node.services, "service_name", "services"),
                "clients": pairs(node.clients, "service_name", "clients"),
            },
            sort_keys=False,
        )
    )


def _details(entity: Any) -> dict[str, Any]:
    """What ``topic info --verbose`` shows of an endpoint: its GID and QoS, where it has them."""
    out: dict[str, Any] = {}
    gid = getattr(getattr(entity, "_core", None), "gid", None)
    if gid is not None:
        out["gid"] = gid.value
    qos = getattr(entity, "qos_profile", None) or getattr(entity, "qos", None)
    if qos is not None and hasattr(qos, "depth"):
        out["qos"] = {
            "history": qos.history.name.lower(),
            "depth": str(qos.depth),
            "reliability": qos.reliability.name.lower(),
            "durability": qos.durability.name.lower(),
        }
    return out


def _type_of(entity: Any) -> str:
    kind = getattr(entity, "msg_type", None) or getattr(entity, "srv_type", None)
    return str(getattr(kind, "__emailmw_type__", None) or getattr(kind, "name", "?"))


#: one announcement as the graph counts it: (node, source ns, sequence number, its data)
Announcement = tuple[str, int, int, dict[str, Any]]


def read_announcement(body: str, info: MessageInfo) -> Announcement | None:
    """One graph message (its body and info), or None (logged) when it is malformed."""
    try:
        data = yaml.safe_load(body)
        if isinstance(data, dict) and data.get("event") in ("reader", "probe"):
            return None  # a reader's record (``_peers``): not a node
        name = str(data["node"])
    except (yaml.YAMLError, KeyError, TypeError):
        _log.info("ignored a malformed graph announcement from %s", info.publisher_gid)
        return None
    data = data | {"_gid": info.publisher_gid.value}
    return name, info.source_timestamp, info.sequence_number or 0, data


def build_graph(emails: list[Email], now_ns: int) -> Graph:
    """The live nodes according to these graph emails (any order): for each node its
    newest message counts; a leave or an expired announcement removes it."""
    found = []
    for email in emails:
        route = classify(email, now_ns)
        if isinstance(route, PublishRoute) and route.topic == GRAPH_TOPIC:
            announced = read_announcement(email.body, route.info)
            if announced is not None:
                found.append(announced)
    return graph_of_announcements(found, now_ns)


def graph_of_announcements(found: Iterable[Announcement], now_ns: int) -> Graph:
    """The live nodes according to these announcements (any order); see
    :func:`build_graph`."""
    latest: dict[str, tuple[int, int, dict[str, Any]]] = {}
    for name, stamp, seq, data in found:
        if name not in latest or (stamp, seq) > latest[name][:2]:
            latest[name] = (stamp, seq, data)
    graph = Graph()
    for name, (stamp, _, data) in latest.items():
        try:
            record = _record(name, stamp, data, now_ns)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            _log.info("ignored the malformed graph announcement of %r: %s", name, exc)
            continue
        if record is not None:
            graph.nodes[name] = record
    return graph


def _record(name: str, stamp: int, data: dict[str, Any], now_ns: int) -> NodeRecord | None:
    """The node an announcement says, or None when it left or expired; a malformed one
    raises."""
    period = float(data.get("period", 30.0))
    if data.get("event") == "leave" or now_ns - stamp > _EXPIRY_PERIODS * period * 1e9:
        return None

    def pairs(key: str, data: dict[str, Any] = data) -> tuple[tuple[str, str], ...]:
        return tuple((str(e["name"]), str(e["type"])) for e in data.get(key) or ())

    def endpoints(data: dict[str, Any] = data) -> tuple[tuple[str, Endpoint], ...]:
        found = []
        for key, kind in (("publishers", "publisher"), ("subscriptions", "subscription")):
            for e in data.get(key) or ():
                qos = e.get("qos") if isinstance(e.get("qos"), dict) else {}
                found.append((kind, Endpoint(
                    str(e["name"]), str(e["type"]), int(e.get("gid") or 0),
                    tuple((str(k), str(v)) for k, v in qos.items()),
                )))  # fmt: skip
        return tuple(found)

    return NodeRecord(
        name,
        int(data["_gid"]),
        period,
        stamp,
        pairs("publishers"),
        pairs("subscriptions"),
        pairs("services"),
        pairs("clients"),
        endpoints(),
    )


def read_graph(receiver: EmailReceiver, limit: int = 2000) -> Graph:
    """The graph from the mailbox's history of the graph topic."""
    return build_graph(receiver.history(GRAPH_TOPIC, limit), time.time_ns())


class Announcer:
    """One per context (:func:`announcer_of`): announces its nodes on ``publisher`` (the
    graph topic's), at once on every change and periodically on a thread of its own (it
    waits on an event between rounds: no busy loop). Owns ``publisher``. Thread-safe."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._nodes: weakref.WeakSet[Announced] = weakref.WeakSet()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="emailmw-graph", daemon=True)
        self._thread.start()

    def send(self, node: Announced, event: str = "announce") -> None:
        try:
            self._publisher.publish(announcement(node, event), {"Message-Type": GRAPH_TYPE})
        except Exception as exc:  # noqa: BLE001 - discovery must never break the node
            _log.warning("announcing %s failed: %s", node.get_fully_qualified_name(), exc)

    def add(self, node: Announced) -> None:
        with self._lock:
            self._nodes.add(node)
        self.send(node)

    def remove(self, node: Announced) -> None:
        with self._lock:
            self._nodes.discard(node)
        self.send(node, "leave")

    def _run(self) -> None:
        due: dict[int, float] = {}
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                nodes = list(self._nodes)
            wait = 60.0
            for node in nodes:
                when = due.setdefault(id(node), now + node.announce_period)
                if when <= now:
                    self.send(node)
                    when = due[id(node)] = now + node.announce_period
                wait = min(wait, when - now)
            self._stop.wait(max(0.01, wait))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._publisher.close()


def announcer_of(context: Context) -> Announcer:
    """The graph announcer of ``context``: one per context, created on first use (by its
    first node) and closed when the context shuts down. Raises
    :class:`~emailmw.ClosedError` once it is shut down."""
    return context.shared(
        "emailmw.graph", lambda: Announcer(Publisher(GRAPH_TOPIC, context=context))
    )


class _GraphReader(Subscription):
    """The monitor's subscription to the graph topic: its thread's waiting does not start
    the context's receiving (:meth:`Context.start_receiving`). Receiving starts when the
    application first waits or asks (the graph itself included: :meth:`GraphMonitor.graph`,
    :meth:`GraphMonitor.wait_for`): mail that comes before the application made its
    entities would find none and be settled unread. (A node's monitor started it at the
    node's creation: a restarted subscriber with a state file lost what came, or was
    pending, before its ``create_subscription``.)"""

    def _before_wait(self) -> None:
        pass


class GraphMonitor(Closeable):
    """The live graph of a context's account, kept up to date: seeded from the mailbox's
    history of the graph topic, then each announcement as it arrives (a subscription to
    the graph topic, read by a thread of its own). :meth:`wait_for` blocks until the graph
    says something (a service has a server). One per context (:func:`graph_of`); closed
    with the context. Thread-safe."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._cond = threading.Condition()
        self._latest: dict[str, Announcement] = {}
        self._closed = False
        self._listeners: list[Callable[[], None]] = []
        self._sub = _GraphReader(GRAPH_TOPIC, context=context)
        try:
            history = context.receiver.history(GRAPH_TOPIC, 2000)
        except NotImplementedError:
            history = []
        now = time.time_ns()
        for email in history:
            route = classify(email, now)
            if isinstance(route, PublishRoute) and route.topic == GRAPH_TOPIC:
                self._add(read_announcement(email.body, route.info))
        self._thread = threading.Thread(target=self._run, name="emailmw-graph-monitor", daemon=True)
        self._thread.start()

    def _add(self, found: Announcement | None) -> None:
        if found is None:
            return
        with self._cond:
            known = self._latest.get(found[0])
            if known is None or found[1:3] > known[1:3]:
                self._latest[found[0]] = found
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` (on the monitor's thread: quick, no blocking) after each
        announcement read: the graph may have changed."""
        with self._cond:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        with self._cond:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _run(self) -> None:
        while not self._closed:
            try:
                got = wait_for_message_with_info(self._sub, 1.0)
            except Exception:  # noqa: BLE001 - closed under it: the loop ends
                return
            if got is not None:
                self._add(read_announcement(*got))

    def graph(self) -> Graph:
        """The graph now (expired announcements left out). Asking starts the context's
        receiving (the application is live: see :class:`_GraphReader`)."""
        self._context.start_receiving()
        return self.peek()

    def peek(self) -> Graph:
        """The graph now, for emailmw's own watchers: receiving is not started (see
        :class:`_GraphReader`)."""
        with self._cond:
            found = list(self._latest.values())
        return graph_of_announcements(found, time.time_ns())

    def wait_for(self, holds: Callable[[Graph], bool], timeout: float | None) -> bool:
        """Block until ``holds(graph)`` (looked at on every announcement, and every
        second for expiries), at most ``timeout`` seconds (None: no limit); whether it
        holds. False at once when the context shuts down."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._context.start_receiving()
        with self._cond:
            while True:
                if holds(self.peek()):
                    return True
                if self._closed or not self._context.ok():
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(1.0 if left is None else min(left, 1.0))

    def close(self) -> None:
        self._closed = True
        with self._cond:
            self._cond.notify_all()
        self._sub.close()


def graph_of(context: Context) -> GraphMonitor:
    """The :class:`GraphMonitor` of ``context`` (created on first use)."""
    return context.shared("emailmw.graph.monitor", lambda: GraphMonitor(context))
