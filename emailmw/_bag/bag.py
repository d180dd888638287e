"""Recording, playing, describing and exporting bags (rosbag2, MCAP storage).

A bag holds each message on its topic, CDR-serialized with its ROS type's definition, at
the time it was received (rosbag2's log time: the recorder's receive time; an exported
archive's, the mailbox's delivery time), and beside it, at the same time,
emailmw's metadata of it on ``/_emailmw/message_info`` (``emailmw_msgs/msg/MessageInfo``:
the topic, emailmw's type name, the send and receive times, the publisher's GID, the
sequence number, the verified identity, the Message-ID). A message that came without a
type (a core ``Publisher``'s string) is kept as ``std_msgs/msg/String`` data, its
MessageInfo's ``message_type`` empty, and played back as it came.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

import yaml
from rosbags.rosbag2 import Reader, StoragePlugin, Writer

from .._core.carried import unpack
from .._core.cdr import BagTypes
from .._core.errors import ConfigError, EmailMWError
from .._core.interfaces import HEADER_MESSAGE_TYPE, from_data, get_interface, serialize, to_data
from .._core.log import get_logger
from .._core.packing import (
    BODY_ENCODING_HEADER,
    PART_DIGEST_HEADER,
    PieceDigest,
    Reassembly,
    decompress_body,
    join_parts,
    part_of,
)
from .._core.protocol import PublishRoute, classify
from .._core.types import Email, Gid, MessageInfo
from .._core.waitables import wait_any
from .._delivery.context import Context
from .._delivery.entities import Publisher, Subscription
from .._delivery.graph import GRAPH_TOPIC, graph_of
from .._delivery.polling import Ticket
from .._pipeline.landing import unit_emails

__all__ = ["BagInfo", "BagWriter", "bag_info", "export", "play", "read_bag", "record"]

_log = get_logger("bag")
INFO_TOPIC: Final = "/_emailmw/message_info"
INFO_TYPE: Final = "emailmw_msgs/msg/MessageInfo"
_UNTYPED: Final = "std_msgs/msg/String"
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NS: Final = 1_000_000_000


def _stamp(ns: int) -> dict[str, int]:
    return {"sec": ns // _NS, "nanosec": ns % _NS}


@dataclass
class BagWriter:
    """Writes messages into a new bag directory ``path`` (refused when it exists)."""

    path: Path
    types: BagTypes = field(default_factory=BagTypes)

    def __post_init__(self) -> None:
        if self.path.exists():
            raise ConfigError(f"{self.path} exists already: give a new directory", source="-o")
        self._writer = Writer(self.path, version=9, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self._connections: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self.count = 0

    def _connection(self, topic: str, type_name: str) -> Any:
        found = self._connections.get((topic, type_name))
        if found is None:
            self.types.register(type_name)
            found = self._writer.add_connection(
                topic, type_name, msgdef=self.types.msgdef(type_name),
                rihs01=self.types.store.hash_rihs01(type_name),
            )  # fmt: skip
            self._connections[(topic, type_name)] = found
        return found

    def write(
        self,
        topic: str,
        message_type: str | None,
        data: Any,
        info: MessageInfo,
        received_ns: int,
    ) -> None:
        """Write one message (its plain data; ``message_type`` None: untyped, ``data`` its
        body) and its MessageInfo, at its receive time (``received_ns``)."""
        self.write_encoded(encode(self.types, topic, message_type, data, info, received_ns))

    def write_encoded(self, encoded: Encoded) -> None:
        """Write a message :func:`encode` made (perhaps in another process)."""
        topic, kind, stamp, payload, meta = encoded
        with self._lock:
            self._writer.write(self._connection(topic, kind), stamp, payload)
            self._writer.write(self._connection(INFO_TOPIC, INFO_TYPE), stamp, meta)
            self.count += 1

    def close(self) -> None:
        with self._lock:
            self._writer.close()


#: a message ready for a bag: (topic, ROS type, bag timestamp, CDR of the message, CDR of
#: its MessageInfo)
Encoded = tuple[str, str, int, bytes, bytes]


def encode(
    types: BagTypes,
    topic: str,
    message_type: str | None,
    data: Any,
    info: MessageInfo,
    received_ns: int,
) -> Encoded:
    """One message and its MessageInfo as CDR, with its topic, ROS type and timestamp."""
    kind = message_type or _UNTYPED
    payload = data if message_type else {"data": data}
    stamp = received_ns or info.source_timestamp  # (rosbag2's log time: when received)
    meta = {
        "topic": topic,
        "message_type": message_type or "",
        "source_stamp": _stamp(info.source_timestamp),
        "received_stamp": _stamp(received_ns),
        "publisher_gid": info.publisher_gid.value,
        "sequence_number": -1 if info.sequence_number is None else info.sequence_number,
        "identity": info.identity or "",
        "message_id": info.message_id or "",
    }
    return topic, kind, stamp, types.to_cdr(kind, payload), types.to_cdr(INFO_TYPE, meta)


@dataclass(frozen=True)
class Recorded:
    """One message of a bag: its topic, emailmw type name (None: untyped), plain data
    (the body for an untyped one), bag timestamp and emailmw's metadata of it."""

    topic: str
    message_type: str | None
    data: Any
    timestamp_ns: int
    info: dict[str, Any]


def read_bag(path: str | Path, topics: Sequence[str] = ()) -> Iterator[Recorded]:
    """The messages of a bag (written by emailmw or another rosbag2 tool), in time order;
    ``topics``: only these. Each comes with its MessageInfo (matched by time and topic;
    none in a bag another tool wrote)."""
    types = BagTypes()
    with Reader(Path(path)) as reader:
        wanted = [c for c in reader.connections if not topics or c.topic in (*topics, INFO_TOPIC)]
        group: list[tuple[Any, int, bytes]] = []
        for connection, timestamp, raw in reader.messages(connections=wanted):
            if group and timestamp != group[0][1]:
                yield from _paired(group, types)
                group = []
            group.append((connection, timestamp, raw))
        yield from _paired(group, types)


def _paired(group: list[tuple[Any, int, bytes]], types: BagTypes) -> Iterator[Recorded]:
    """The messages of one timestamp, each with its MessageInfo."""
    infos = [types.from_cdr(INFO_TYPE, raw) for c, _, raw in group if c.topic == INFO_TOPIC]
    for connection, timestamp, raw in group:
        if connection.topic == INFO_TOPIC:
            continue
        info = next((i for i in infos if i["topic"] == connection.topic), None)
        if info is not None:
            infos.remove(info)
        data = _from_cdr(types, connection.msgtype, raw)
        message_type: str | None = connection.msgtype
        if info is not None and info["message_type"] == "" and message_type == _UNTYPED:
            message_type, data = None, data.get("data", "")
        yield Recorded(connection.topic, message_type, data, timestamp, info or {})


def _from_cdr(types: BagTypes, type_name: str, raw: bytes) -> Any:
    try:
        return types.from_cdr(type_name, raw)
    except KeyError as exc:
        raise ConfigError(
            f"the bag holds {type_name}, a type emailmw does not know: load its package "
            "(emailmw.interfaces.load) first",
            source="bag",
        ) from exc


# ----------------------------------------------------------------------------- record


def _plain_body(body: str, message_type: str | None) -> Any:
    """A message's plain data from its YAML body, checked against its type."""
    if message_type is None:
        return body
    kind = get_interface(message_type)
    data = yaml.load(body, Loader=_Loader)  # noqa: S506 - a safe loader
    return to_data(from_data(kind, data))


#: a batch the recorder hands its writing process: at most this many messages or bytes
RECORD_BATCH: Final = 256
RECORD_BATCH_BYTES: Final = 1 << 20
#: batches in the writing process's hands at most (memory stays bounded; beyond it the
#: recorder waits, its subscriptions fill and their publishers are held back)
RECORD_IN_FLIGHT: Final = 4

#: a message handed to the writing process: topic, type (None: untyped), body, source
#: time, receive time, publisher GID, sequence number, identity, Message-ID
_Taken = tuple[str, "str | None", str, int, int, int, "int | None", "str | None", "str | None"]


def run_writer(path: str, connection: Any) -> None:
    """The recorder's writing process: parses each message's body, encodes it and its
    MessageInfo as CDR and writes the bag, in the order they come; answers each batch
    with how many it wrote and what it left out (topic, why). A recorder that ends
    without saying so (killed) leaves a bag closed all the same."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (Ctrl-C is the recorder's to handle)
    try:
        writer = BagWriter(Path(path))
    except EmailMWError as exc:
        connection.send(("error", str(exc)))
        return
    connection.send(("ready",))
    answering = True  # (a recorder that is gone hears nothing; what it sent is written)
    try:
        while True:
            try:
                message = connection.recv()
            except (EOFError, OSError):
                return
            if message[0] == "close":
                break
            refused: list[tuple[str, str]] = []
            for topic, kind, body, source, received, gid, seq, identity, mid in message[1]:
                info = MessageInfo(source, received, Gid(gid), seq, kind, identity=identity,
                                   message_id=mid)  # fmt: skip
                try:
                    writer.write(topic, kind, _plain_body(body, kind), info, received)
                except (KeyError, EmailMWError, yaml.YAMLError) as exc:
                    refused.append((topic, str(exc)))
            if answering:
                try:
                    connection.send(("done", len(message[1]) - len(refused), refused))
                except OSError:
                    answering = False
    finally:
        writer.close()
    with contextlib.suppress(OSError):
        connection.send(("closed", writer.count))


class _RecordingProcess:
    """The recorder's side of :func:`run_writer`: messages taken are batched and
    handed over; at most :data:`RECORD_IN_FLIGHT` batches are in its hands (back-pressure
    beyond). Not thread-safe (the recording loop's alone)."""

    def __init__(self, out: Path) -> None:
        # a new interpreter (``python -m emailmw._bag.writer``), not multiprocessing's:
        # fork would copy the recorder's threads mid-step, spawn runs the caller's main
        # module again (a script without a __main__ guard would record twice); it costs
        # a second once, before anything is subscribed
        mine, theirs = socket.socketpair()
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "emailmw._bag.writer", str(theirs.fileno()), str(out)],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self._connection = Connection(mine.detach())
        first = self._receive()
        if first[0] == "error":
            self._process.wait(10)
            raise ConfigError(first[1], source="-o")
        self._batch: list[_Taken] = []
        self._tickets: list[Ticket] = []
        self._bytes = 0
        # per batch in the writer's hands: its tickets, released once it says it wrote it
        self._in_flight: collections.deque[list[Ticket]] = collections.deque()
        self.recorded = 0
        self.refused: dict[str, int] = {}

    @property
    def pending(self) -> int:
        """Messages taken and not yet written or refused."""
        return len(self._batch) + sum(len(t) for t in self._in_flight)

    def add(self, topic: str, body: str, info: MessageInfo, ticket: Ticket) -> None:
        """Take a message to record; its ``ticket`` is released (the message settled)
        once the writing process wrote it."""
        self._tickets.append(ticket)
        self._batch.append((
            topic, info.message_type, body, info.source_timestamp, info.received_timestamp,
            info.publisher_gid.value, info.sequence_number, info.identity, info.message_id,
        ))  # fmt: skip
        self._bytes += len(body)
        if len(self._batch) >= RECORD_BATCH or self._bytes >= RECORD_BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Hand over what was taken (waiting while the writer has its hands full)."""
        if not self._batch:
            return
        while len(self._in_flight) >= RECORD_IN_FLIGHT:
            self._answer(self._receive())
        self._connection.send(("batch", self._batch))
        self._in_flight.append(self._tickets)
        self._batch, self._tickets, self._bytes = [], [], 0

    def drain(self) -> None:
        """Wait for the answers to every batch handed over."""
        while self._in_flight:
            self._answer(self._receive())

    def collect(self) -> None:
        """Take in the answers that came (without waiting)."""
        while self._in_flight and self._connection.poll():
            self._answer(self._receive())

    def _answer(self, message: tuple[Any, ...]) -> None:
        if message[0] != "done":
            raise EmailMWError(f"the bag's writing process stopped: {message!r}")
        for ticket in self._in_flight.popleft():
            ticket.release()
        self.recorded += message[1]
        for topic, why in message[2]:
            self.refused[topic] = self.refused.get(topic, 0) + 1
            if self.refused[topic] == 1:
                _log.warning("not recorded on %s: %s", topic, why)

    def _receive(self) -> tuple[Any, ...]:
        try:
            return tuple(self._connection.recv())
        except (EOFError, OSError) as exc:
            raise EmailMWError(f"the bag's writing process ended ({exc})") from exc

    def close(self) -> int:
        """Hand over the rest, let the writer close the bag; how many were recorded."""
        try:
            self.flush()
            self.drain()
            self._connection.send(("close",))
            closed = self._receive()
            return int(closed[1]) if closed[0] == "closed" else self.recorded
        finally:
            self._connection.close()
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()


def record(
    context: Context,
    out: Path,
    topics: Sequence[str],
    *,
    all_topics: bool = False,
    stop: threading.Event | None = None,
    count: int | None = None,
    duration: float | None = None,
    on_message: Callable[[int], None] | None = None,
    on_subscribed: Callable[[str], None] | None = None,
) -> int:
    """Record ``topics`` (with ``all_topics``: every topic in the graph, those that appear
    later too, emailmw's own left out) into a new bag ``out``, until ``stop`` is set,
    ``count`` messages were recorded or ``duration`` seconds passed. The number recorded.
    A message of a type emailmw does not know is counted and left out (logged once).
    ``on_subscribed(topic)`` once a topic is subscribed: what is published from then on
    is recorded; ``on_message(n)`` as messages are taken (``n``: taken so far).

    The messages are parsed, encoded and written by a process of the recorder's own
    (:func:`run_writer`, ``_bag/writer.py``): the recording process only takes them and
    hands them over in batches, so that a recorder in a busy process (or a busy recorder)
    takes little of its interpreter's time. A message is settled once that process wrote
    it (a recorder killed before leaves it unsettled, to come again); the bag is closed
    whether the recorder returns, raises or is killed."""
    writer = _RecordingProcess(out)
    subscriptions: dict[str, Subscription] = {}
    end = None if duration is None else time.monotonic() + duration
    stop = stop or threading.Event()
    monitor = graph_of(context) if all_topics else None
    next_look = 0.0
    taken = 0

    def follow() -> None:
        names = list(topics)
        if monitor is not None:
            names += [
                t for t in monitor.graph().topics() if t != GRAPH_TOPIC and not t.startswith("/_")
            ]
        for name in names:
            if name not in subscriptions:
                subscriptions[name] = Subscription(name, context=context)
                if on_subscribed is not None:
                    on_subscribed(name)

    def wanted() -> bool:  # (what was refused is made up for by more)
        return count is None or writer.recorded + writer.pending < count

    try:
        while not stop.is_set() and wanted():
            now = time.monotonic()
            if end is not None and now >= end:
                break
            if now >= next_look:
                follow()
                next_look = now + 1.0
            writer.collect()
            wait = 1.0 if end is None else max(0.0, min(1.0, end - now))
            if not wait_any(list(subscriptions.values()), wait):
                continue
            for topic, subscription in list(subscriptions.items()):
                while wanted() and (got := subscription.take_with_ticket()) is not None:
                    writer.add(topic, *got)
                    taken += 1
                    if on_message is not None:
                        on_message(taken)
            writer.flush()  # (what came: written now, in large batches when much comes)
            if not wanted():  # all taken that were wanted: the answers say if enough were
                writer.drain()
    finally:
        for subscription in subscriptions.values():
            subscription.close()
        recorded = writer.close()
    return recorded


# ----------------------------------------------------------------------------- play


def play(
    context: Context,
    path: Path,
    *,
    rate: float = 1.0,
    loop: bool = False,
    topics: Sequence[str] = (),
    stop: threading.Event | None = None,
) -> int:
    """Publish a bag's messages over ``context`` with their recorded timing (``rate``:
    faster or slower), each on its topic with its type; ``loop``: again and again until
    ``stop``. The number published."""
    if not rate > 0:
        raise ConfigError("--rate must be above 0", source="emailmw bag play")
    stop = stop or threading.Event()
    publishers: dict[str, Publisher] = {}
    sent = 0
    try:
        while True:
            start_wall = time.monotonic()
            first: int | None = None
            for message in read_bag(path, topics):
                if message.topic.startswith("/_emailmw/"):
                    continue
                if first is None:
                    first = message.timestamp_ns
                due = start_wall + (message.timestamp_ns - first) / _NS / rate
                if stop.wait(max(0.0, due - time.monotonic())):
                    return sent
                publisher = publishers.get(message.topic)
                if publisher is None:
                    publisher = publishers[message.topic] = Publisher(
                        message.topic, context=context
                    )
                if message.message_type is None:
                    publisher.publish(str(message.data))
                else:
                    typed = from_data(get_interface(message.message_type), message.data)
                    publisher.publish(serialize(typed), {HEADER_MESSAGE_TYPE: message.message_type})
                sent += 1
            if not loop or stop.is_set():
                return sent
    finally:
        context.flush(30)
        for publisher in publishers.values():
            publisher.close()


# ----------------------------------------------------------------------------- info


@dataclass
class BagInfo:
    """What ``ros2 bag info`` says of a bag."""

    path: Path
    files: list[str]
    size: int
    storage: str
    start_ns: int
    end_ns: int
    messages: int
    topics: list[tuple[str, str, int]]  # topic, type, count

    def text(self) -> str:
        lines = [
            f"Files:             {', '.join(self.files)}",
            f"Bag size:          {_size(self.size)}",
            f"Storage id:        {self.storage}",
            f"Duration:          {_seconds(self.end_ns - self.start_ns)}s",
            f"Start:             {_when(self.start_ns)} ({_seconds(self.start_ns)})",
            f"End:               {_when(self.end_ns)} ({_seconds(self.end_ns)})",
            f"Messages:          {self.messages}",
        ]
        width = max((len(t) for t, _, _ in self.topics), default=0)
        type_width = max((len(k) for _, k, _ in self.topics), default=0)
        for index, (topic, kind, count) in enumerate(self.topics):
            head = "Topic information: " if index == 0 else " " * 19
            lines.append(
                f"{head}Topic: {topic:<{width}} | Type: {kind:<{type_width}} | "
                f"Count: {count} | Serialization Format: cdr"
            )
        if not self.topics:
            lines.append("Topic information: ")
        return "\n".join(lines)


def _seconds(ns: int) -> str:
    return f"{ns // _NS}.{ns % _NS:09d}"


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{size} B"
        value /= 1024
    return f"{size} B"


def _when(ns: int) -> str:
    moment = time.gmtime(ns // _NS)
    return time.strftime("%b %d %Y %H:%M:%S", moment) + f".{ns % _NS:09d} UTC"


def bag_info(path: str | Path) -> BagInfo:
    """The summary of a bag (its metadata)."""
    root = Path(path)
    if not (root / "metadata.yaml").is_file():
        raise ConfigError(f"{root}: not a bag (no metadata.yaml)", source="bag")
    with Reader(root) as reader:
        topics = sorted((c.topic, c.msgtype, c.msgcount) for c in reader.connections)
        stored = sorted(p for p in root.iterdir() if p.suffix in (".mcap", ".db3"))
        files = [p.name for p in stored]
        size = sum(p.stat().st_size for p in stored)
        return BagInfo(
            root,
            files,
            size,
            "mcap" if files and files[0].endswith(".mcap") else "sqlite3",
            reader.start_time if reader.message_count else 0,
            reader.end_time if reader.message_count else 0,
            reader.message_count,
            topics,
        )


# ----------------------------------------------------------------------------- export


#: emails a worker process encodes at a time
EXPORT_CHUNK: Final = 2000


def export(
    units: Iterable[dict[str, Any]],
    out: Path,
    *,
    include_internal: bool = False,
    workers: int | None = None,
    on_message: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Write the published messages of an archive's units (``list_units`` of the
    pipeline's landing: the same listing and reader ``emailmw analyze`` uses) into a new
    bag ``out``: the bag a recorder would have written had it been there. Returns
    (written, left out: not a publish, foreign or malformed mail, a type emailmw does not
    know, a wstring).

    The emails are parsed and encoded by ``workers`` processes (default: one per core),
    chunks of :data:`EXPORT_CHUNK` emails, while this process writes the bag in the
    units' order; at most two chunks a worker are in flight (memory stays bounded)."""
    chunks = [c for unit in units for c in _chunks(unit)]
    workers = workers or os.cpu_count() or 1
    writer = BagWriter(out)
    left = 0
    try:
        waiting: Reassembly[tuple[Email, int | None]] = Reassembly(timeout=float("inf"))
        for encoded, parts, refused in _encoded(chunks, include_internal, workers):
            left += refused
            for item in encoded:
                writer.write_encoded(item)
            for email, delivered in parts:
                found = part_of(email)
                assert found is not None
                verdict, items = waiting.offer(found, email.from_, (email, delivered), 0.0)
                if verdict in ("duplicate", "refused"):
                    left += 1
                if verdict != "complete":
                    continue
                joined = join_parts([e for e, _ in items])
                if not PieceDigest.of(joined.body, items[0][0].headers.get(PART_DIGEST_HEADER)):
                    left += len(items)  # parts that do not make the message they name
                    continue
                whole = _encoded_message(writer.types, joined, items[-1][1], include_internal)
                if whole is None:
                    left += len(items)
                else:
                    writer.write_encoded(whole)
            if on_message is not None:
                on_message(writer.count)
    finally:
        writer.close()
    return writer.count, left


#: what a chunk gives: its messages encoded, the parts of messages sent as several emails
#: (each (email, delivery time): joined by the writing process, parts may lie in other
#: chunks), and how many emails were left out
Chunk = tuple[list[Encoded], list[tuple[Email, int | None]], int]


def _chunks(unit: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A Maildir unit in pieces of :data:`EXPORT_CHUNK` files (an mbox unit as it is)."""
    if unit["kind"] != "maildir":
        yield unit
        return
    for group in unit["groups"]:
        names = group["names"]
        for start in range(0, len(names), EXPORT_CHUNK):
            piece = {**group, "names": names[start : start + EXPORT_CHUNK]}
            yield {**unit, "groups": [piece]}


def _encoded(chunks: list[dict[str, Any]], include_internal: bool, workers: int) -> Iterator[Chunk]:
    if workers <= 1 or len(chunks) <= 1:
        for chunk in chunks:
            yield encode_chunk(chunk, include_internal)
        return
    # fork: the workers inherit the imported modules (a forkserver's workers import
    # emailmw, rosbags and numpy again: a second of start-up for a few seconds of work)
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        waiting: collections.deque[concurrent.futures.Future[Chunk]]
        waiting = collections.deque()
        pending = iter(chunks)
        for chunk in itertools.islice(pending, 2 * workers):
            waiting.append(pool.submit(encode_chunk, chunk, include_internal))
        while waiting:
            result = waiting.popleft().result()
            for chunk in itertools.islice(pending, 1):
                waiting.append(pool.submit(encode_chunk, chunk, include_internal))
            yield result


_worker_types: BagTypes | None = None


def encode_chunk(chunk: dict[str, Any], include_internal: bool) -> Chunk:
    """The published messages of a chunk of an archive, encoded (a batch email's each on
    its own), the parts of larger messages, and how many emails were left out. Run in a
    worker process (its types kept between chunks)."""
    global _worker_types
    if _worker_types is None:
        _worker_types = BagTypes()
    types = _worker_types
    encoded: list[Encoded] = []
    parts: list[tuple[Email, int | None]] = []
    left = 0
    unreadable: list[Any] = []
    for _, _, delivered_ns, stored in unit_emails(chunk, unreadable):
        # what the email carries, through the one stage every consumer of mail reads
        for item in unpack(stored, max_size=1 << 31):
            email = item.email
            if email is None:
                left += 1
                continue
            try:
                if part_of(email) is not None:
                    parts.append((email, delivered_ns))
                    continue
            except Exception:  # noqa: BLE001 - no stored email stops the export
                left += 1
                continue
            found = _encoded_message(types, email, delivered_ns, include_internal)
            if found is None:
                left += 1
            else:
                encoded.append(found)
    return encoded, parts, left + len(unreadable)


def _encoded_message(
    types: BagTypes, email: Email, delivered_ns: int | None, include_internal: bool
) -> Encoded | None:
    """A whole message (one email's, or joined from parts) encoded; None when it is not a
    published message the bag holds."""
    route = classify(email, delivered_ns or 0)
    if not isinstance(route, PublishRoute) or (
        not include_internal and route.topic.startswith("/_emailmw/")
    ):
        return None
    received = delivered_ns or route.info.source_timestamp
    body = email.body
    try:
        encoding = email.headers.get(BODY_ENCODING_HEADER)
        if encoding is not None:
            body = decompress_body(body, encoding, 1 << 31)
        data = _plain_body(body, route.info.message_type)
        return encode(types, route.topic, route.info.message_type, data, route.info, received)
    except (KeyError, EmailMWError, yaml.YAMLError):
        return None
