"""Landing: mail archives -> Parquet, one typed row per stored email. Plain Python + pyarrow.

Spark pays dearly for many small files (listing 200k Maildir files takes it ~7 s and every
file is a task input), so archives are read here instead: ``os.scandir`` over Maildirs, a
streaming split of mbox files, each message parsed once with emailmw's own wire format
(:func:`emailmw._wire.parse_head`, which is :func:`~emailmw._wire.parse` without the body)
and classified with its own protocol (:func:`emailmw._protocol.read_metadata`, what
``classify`` reads). Worker processes each write their own Parquet part (zstd), so memory
stays bounded by one batch whatever the archive's size. In a plain run they also write the
``messages`` and ``rejects`` tables (:class:`TableSink`); Spark then reads only these
compact files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import fnmatch
import functools
import gc
import hashlib
import itertools
import mmap
import multiprocessing
import multiprocessing.forkserver
import os
import re
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._exceptions import ForeignEmailError, MalformedEmailError
from .._protocol import Unroutable, read_metadata
from .._types import Headers
from .._wire import parse, parse_head

__all__ = [
    "INTERNAL_TOPIC_PREFIX",
    "LANDING_SCHEMA",
    "LATENCY_RESOLUTION_NS",
    "MESSAGES_SCHEMA",
    "MINUTES_SCHEMA",
    "STREAMS_SCHEMA",
    "REJECTS_COLUMNS",
    "Source",
    "TableSink",
    "Tally",
    "Written",
    "describe",
    "QUARANTINE_SQL",
    "is_quarantine",
    "signature_status",
    "land",
    "maildirs",
    "partition_dir",
    "start_workers",
    "wanted_topic",
]

LANDING_SCHEMA: Final = pa.schema(
    [
        ("source", pa.string()),
        ("mailbox", pa.string()),
        ("key", pa.string()),
        ("status", pa.string()),  # ok | foreign | malformed
        ("reason", pa.string()),
        ("kind", pa.string()),  # publish | request | response
        ("topic", pa.string()),
        ("message_id", pa.string()),
        ("in_reply_to", pa.string()),
        ("publisher_gid", pa.int64()),
        ("publisher_seq", pa.int64()),
        ("client_gid", pa.int64()),
        ("request_seq", pa.int64()),
        ("source_ns", pa.int64()),
        ("delivered_ns", pa.int64()),
        # what delivered_ns is known to: 1000 (a Dovecot Maildir file name's microseconds) or
        # 1_000_000_000 (a Received:/Date: header's second); null without a delivery time
        ("delivered_res_ns", pa.int64()),
        ("size", pa.int64()),
        ("from_addr", pa.string()),
        ("to_addr", pa.string()),
        # emailmw mail's signature (docs/security.md): signed | unsigned, or with a keystore
        # verified | invalid | untrusted; null for rejects. Landed parts of earlier versions
        # lack it and read as null.
        ("security", pa.string()),
        # an mbox message's byte offset (its "From " line; ``key`` is the same number, in 16
        # digits), null for a Maildir file: Spark orders ties by it without parsing ``key``.
        # Landed parts of earlier versions lack it and read as null.
        ("offset", pa.int64()),
    ]
)
# The ``messages`` table: one row per emailmw email, hive-partitioned by topic and day (those
# two columns live in the directory names, not in the files), exactly as Spark writes it.
MESSAGES_SCHEMA: Final = pa.schema(
    [
        *(LANDING_SCHEMA.field(name) for name in LANDING_SCHEMA.names[5:16]),
        # null where delivered_res_ns is coarser than LATENCY_RESOLUTION_NS
        ("latency_ms", pa.float64()),
        *(LANDING_SCHEMA.field(name) for name in ("size", "from_addr", "to_addr", "security")),
        *(LANDING_SCHEMA.field(name) for name in ("mailbox", "source", "key")),
        ("day", pa.date32()),
    ]
)
# Publishes per topic and minute of delivery, as the landing counts the rows it writes: the
# per-minute rate series of ``topic_stats`` in a plain run (see :meth:`TableSink.per_minute`).
# An empty topic is null, as in the ``messages`` table.
MINUTES_SCHEMA: Final = pa.schema(
    [("topic", pa.string()), ("minute", pa.int64()), ("messages", pa.int64())]
)
# The publishers' streams among the rows the landing writes (publishes with a sequence
# number; an empty topic is null, as in the ``messages`` table): the names of
# ``publisher_health``'s streams in a plain run (see :meth:`TableSink.streams`).
STREAMS_SCHEMA: Final = pa.schema(
    [("publisher_gid", pa.int64()), ("topic", pa.string()), ("mailbox", pa.string())]
)
# the columns of a messages file (topic and day are in its directory names)
_MESSAGE_FILE_COLUMNS: Final = [n for n in MESSAGES_SCHEMA.names if n not in ("topic", "day")]
REJECTS_COLUMNS: Final = ("source", "mailbox", "key", "status", "reason", "topic", "size")
# Parquet dictionary encoding only where values repeat: on unique columns (message_id, key,
# the timestamps) pyarrow would build a dictionary, give up and write plain anyway.
_DICTIONARY_COLUMNS: Final = [
    "source", "mailbox", "status", "reason", "kind", "topic", "from_addr", "to_addr",
    "publisher_gid", "client_gid", "delivered_res_ns", "security",
]  # fmt: skip
_BATCH: Final = 20_000
_READ_CHUNK: Final = 1 << 16
_DOVECOT_NAME: Final = re.compile(r"^(\d+)\.M(\d+)P")
_MBOXRD_QUOTED: Final = re.compile(rb"(?m)^>(>*From )")


def is_quarantine(mailbox: str | None) -> bool:
    """Whether a mailbox label (a Maildir folder such as ``u/Maildir/.Quarantine``, an mbox
    file's name such as ``Quarantine.mbox``) is a quarantine folder: its last name is
    ``Quarantine`` (any case), the folder ``verify: enforce`` moves refused mail to.
    :data:`QUARANTINE_SQL` is the same rule in Spark SQL."""
    if not mailbox:
        return False
    last = mailbox.rpartition("/")[2].removesuffix(".mbox")
    return last.rpartition(".")[2].lower() == "quarantine"


QUARANTINE_SQL: Final = (
    "lower(regexp_extract(regexp_replace(mailbox, '[.]mbox$', ''), '([^/.]*)$', 1)) = 'quarantine'"
)


#: topics emailmw itself publishes on (the graph announcements): left out of the tables
#: unless a run includes them
INTERNAL_TOPIC_PREFIX: Final = "/_emailmw/"


@functools.lru_cache(maxsize=4096)
def wanted_topic(topic: str | None, glob: str | None, include_internal: bool) -> bool:
    """Whether a run keeps a message of ``topic``: it matches ``glob`` (whole, when there is
    one; a null topic never does), and is not emailmw's own unless ``include_internal``.
    Spark's filter in ``job._messages`` is the same rule."""
    if glob is not None and (topic is None or not re.fullmatch(fnmatch.translate(glob), topic)):
        return False
    return include_internal or topic is None or not topic.startswith(INTERNAL_TOPIC_PREFIX)


def _write_parquet(table: pa.Table, path: Path | str) -> None:
    """Every Parquet file the landing writes: zstd, dictionaries where values repeat."""
    pq.write_table(table, path, compression="zstd", use_dictionary=_DICTIONARY_COLUMNS)


@functools.lru_cache(maxsize=65536)
def _date_ns(value: str) -> int | None:
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        return None
    return int(parsed.timestamp()) * 1_000_000_000


SECOND_NS: Final = 1_000_000_000
MICROSECOND_NS: Final = 1_000
#: the coarsest delivery-time resolution latencies and round trips are computed at; coarser
#: rows get bounds instead (see docs/pipeline.md)
LATENCY_RESOLUTION_NS: Final = 1_000_000


def delivery_time(
    received: str | None, date: str | None, name_ns: int | None
) -> tuple[int | None, int | None]:
    """Server delivery time in ns, and its resolution in ns: the topmost ``Received:`` date
    (else ``Date:``), known to the second; a Dovecot Maildir file name (``secs.M<usecs>P...``)
    within the same second refines it to the microsecond. (None, None) without either.
    """
    stamp = None
    if received and ";" in received:
        stamp = _date_ns(received.rpartition(";")[2].strip())
    if stamp is None and date:
        stamp = _date_ns(date.strip())
    if stamp is None:
        return (name_ns, MICROSECOND_NS) if name_ns is not None else (None, None)
    if name_ns is not None and name_ns // SECOND_NS == stamp // SECOND_NS:
        return name_ns, MICROSECOND_NS
    return stamp, SECOND_NS


def maildir_name_ns(name: str) -> int | None:
    found = _DOVECOT_NAME.match(name)
    if found is None:
        return None
    return int(found.group(1)) * 1_000_000_000 + int(found.group(2)) * 1000


# The columns :func:`_row` fills, in LANDING_SCHEMA order (all but source, mailbox, key and
# offset).
_DESCRIBED: Final = tuple(LANDING_SCHEMA.names[3:-1])
_Row = tuple[Any, ...]
_NONE_11: Final = (None,) * 11  # kind .. delivered_res_ns of mail that does not parse


def describe(raw: bytes, name_ns: int | None = None, keystore: str | None = None) -> dict[str, Any]:
    """The landing columns (all but source/mailbox/key/offset, which say where the email
    is stored) for one stored email; ``keystore``: verify signatures against it."""
    return dict(zip(_DESCRIBED, _row(raw, name_ns, keystore), strict=True))


@functools.lru_cache(maxsize=4)
def _trusted(keystore: str) -> dict[str, Any]:
    from .._security import Keystore

    return Keystore(keystore).trusted()


def signature_status(raw: bytes, headers: Headers, source_ns: int, keystore: str | None) -> str:
    """The ``security`` column of an emailmw email: ``unsigned``, ``signed`` (not
    verified: no keystore), else what verifying it against ``keystore``'s trusted keys
    says: ``verified``, ``invalid`` or ``untrusted`` (unknown, or expired when it was
    sent)."""
    if headers.item("emailmw-signature") is None:
        return "unsigned"
    if keystore is None:
        return "signed"
    from .._security import read_signature, verify

    try:
        email = parse(raw)
    except (ForeignEmailError, MalformedEmailError):
        return "invalid"
    signature = read_signature(email)
    if signature is None or isinstance(signature, str):
        return "invalid"
    public = _trusted(keystore).get(signature.identity)
    if public is None or public.expired(source_ns / 1e9):
        return "untrusted"
    return "verified" if verify(email, signature, public.verify_key) else "invalid"


def _row(raw: bytes, name_ns: int | None, keystore: str | None = None) -> _Row:
    # status, reason, kind, topic, message_id, in_reply_to, publisher_gid, publisher_seq,
    # client_gid, request_seq, source_ns, delivered_ns, delivered_res_ns, size, from_addr,
    # to_addr, security
    size = len(raw)
    try:
        parsed = parse_head(raw)
    except ForeignEmailError as exc:
        return ("foreign", str(exc), *_NONE_11, size, None, None, None)
    except MalformedEmailError as exc:
        return ("malformed", str(exc), *_NONE_11, size, None, None, None)
    headers = parsed.headers
    delivered, res = delivery_time(headers.get("received"), headers.get("date"), name_ns)
    message_id = parsed.message_id
    to = ", ".join(parsed.to)
    metadata = read_metadata(headers)  # classify()'s reading, without its route objects
    if isinstance(metadata, Unroutable):
        return (
            "malformed" if metadata.malformed else "foreign", metadata.reason, None,
            parsed.subject, message_id, None, None, None, None, None, None, delivered, res,
            size, parsed.from_, to, None,
        )  # fmt: skip
    is_service, source_ns, gid, seq = metadata
    security = signature_status(raw, headers, source_ns, keystore)
    if is_service:
        return (
            "ok", None, "response" if parsed.in_reply_to else "request", parsed.subject,
            message_id, parsed.in_reply_to, None, None, gid, seq, source_ns, delivered, res,
            size, parsed.from_, to, security,
        )  # fmt: skip
    return (
        "ok", None, "publish", parsed.subject, message_id, parsed.in_reply_to, gid, seq,
        None, None, source_ns, delivered, res, size, parsed.from_, to, security,
    )  # fmt: skip


class _Columns:
    """Rows of one Parquet part, kept as tuples and turned into columns once, at the end.

    A Maildir part fills ``mailboxes`` and ``keys`` (file names) with :meth:`add`; an mbox
    part, all from one file, names its ``mailbox`` once and fills ``offsets``, from which
    the keys are written (16 digits, as one vectorised step).
    """

    def __init__(self, source: str, mailbox: str | None = None) -> None:
        self.source = source
        self.mailbox = mailbox
        self.mailboxes: list[str] = []
        self.keys: list[str] = []
        self.offsets: list[int] = []
        self.rows: list[_Row] = []

    def add(self, mailbox: str, key: str, row: _Row) -> None:
        self.mailboxes.append(mailbox)
        self.keys.append(key)
        self.rows.append(row)

    def write(self, path: Path, sink: TableSink | None = None) -> Written | None:
        count = len(self.rows)
        described = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(_DESCRIBED)
        string = pa.string()
        if self.mailbox is None:
            mailboxes = pa.array(self.mailboxes, string)
            keys = pa.array(self.keys, string)
            offsets = pa.nulls(count, pa.int64())
        else:
            mailboxes = pa.array([self.mailbox] * count, string)
            offsets = pa.array(self.offsets, pa.int64())
            keys = pc.utf8_lpad(pc.cast(offsets, string), 16, "0")  # f"{offset:016d}"
        arrays = [pa.array([self.source] * count, string), mailboxes, keys]
        arrays += [
            pa.array(column, field.type)
            for column, field in zip(described, list(LANDING_SCHEMA)[3:-1], strict=True)
        ]
        arrays.append(offsets)
        table = pa.Table.from_arrays(arrays, schema=LANDING_SCHEMA)
        _write_parquet(table, path)
        if sink is None:
            return None
        return sink.write(table, f"{path.parent.name.removeprefix('src=')}-{path.stem}")


# ----------------------------------------------------------------------------- tables

_HIVE_NULL: Final = "__HIVE_DEFAULT_PARTITION__"
# What Spark escapes in a partition directory name (ExternalCatalogUtils.escapePathName,
# on a POSIX file system): control characters, '"#%'*/:=?\', DEL, '{', '[', ']', '^'.
_ESCAPED: Final = frozenset([*map(chr, range(1, 32)), *"\"#%'*/:=?\\", "\x7f", "{", "[", "]", "^"])
_EPOCH: Final = dt.date(1970, 1, 1)
_DAY_US: Final = 86_400_000_000


def partition_dir(column: str, value: object) -> str:
    """``column=value`` as Spark names a partition directory: the same escaping, and
    ``__HIVE_DEFAULT_PARTITION__`` for null or empty (read back as null)."""
    text = "" if value is None else str(value)
    if not text:
        return f"{column}={_HIVE_NULL}"
    if any(c in _ESCAPED for c in text):
        text = "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)
    return f"{column}={text}"


# ("kind", kind) and ("reject", status, reason) -> emails
Tally = Counter[tuple[str | None, ...]]


class Written(NamedTuple):
    """What a worker wrote of one landed part, as counted for the calling process."""

    tally: Tally
    minutes: pa.Table  # MINUTES_SCHEMA, one row per topic and minute among the publishes
    streams: pa.Table  # STREAMS_SCHEMA, each stream once


# the parts' minute counts and stream lists are merged into one table each once this many
# have come in (memory stays bounded by the distinct topics and minutes, and streams,
# however many parts an archive has)
_MERGE_EVERY: Final = 64


def _distinct_streams(tables: list[pa.Table]) -> pa.Table:
    combined = pa.concat_tables(tables) if tables else STREAMS_SCHEMA.empty_table()
    keys = STREAMS_SCHEMA.names
    return combined.group_by(keys, use_threads=False).aggregate([]).select(keys)


def _sum_minutes(tables: list[pa.Table]) -> pa.Table:
    combined = pa.concat_tables(tables) if tables else MINUTES_SCHEMA.empty_table()
    summed = combined.group_by(["topic", "minute"], use_threads=False).aggregate(
        [("messages", "sum")]
    )
    return summed.rename_columns(["topic", "minute", "messages"]).cast(MINUTES_SCHEMA)


@dataclass
class TableSink:
    """The run's ``messages`` and ``rejects`` tables, written by the landing workers as they
    go (one file per part and topic-day), with the run's filters applied.

    Spark then only reads them instead of writing every row a second time from the landed
    parts:
    9-11 s. The layout and the values are Spark's own (a test writes the same rows with
    Spark and compares), so the tables read the same whoever wrote them.

    ``tally`` counts what was written, by kind and by reject reason, :meth:`per_minute` the
    publishes per topic and minute, and :meth:`streams` lists the publisher streams; all
    are filled in the calling process as parts finish (:meth:`add`), so that the summary
    needs no Spark job, ``topic_stats`` no second scan of the archive for its rate series
    and ``publisher_health`` no aggregation to name its streams.
    """

    out: Path
    since_ns: int | None = None
    until_ns: int | None = None
    topic_glob: str | None = None
    include_internal: bool = False
    tally: Tally = field(default_factory=Counter, compare=False)
    _minutes: list[pa.Table] = field(default_factory=list, init=False, compare=False, repr=False)
    _streams: list[pa.Table] = field(default_factory=list, init=False, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:  # workers get the settings, not the counts
        return {**self.__dict__, "tally": Counter(), "_minutes": [], "_streams": []}

    def prepare(self) -> None:
        self.tally.clear()
        self._minutes.clear()
        self._streams.clear()
        for name in ("messages", "rejects"):
            shutil.rmtree(self.out / name, ignore_errors=True)
            (self.out / name).mkdir(parents=True)

    def finish(self) -> None:
        for name in ("messages", "rejects"):
            (self.out / name / "_SUCCESS").touch()

    def add(self, written: Written) -> None:
        """Count a part's :meth:`write` (the calling process's side)."""
        self.tally.update(written.tally)
        self._minutes.append(written.minutes)
        self._streams.append(written.streams)
        if len(self._minutes) >= _MERGE_EVERY:
            self._minutes[:] = [_sum_minutes(self._minutes)]
            self._streams[:] = [_distinct_streams(self._streams)]

    def per_minute(self) -> pa.Table:
        """Publishes written per topic and minute of delivery (MINUTES_SCHEMA), exactly as
        ``topic_stats``' SQL counts them from the ``messages`` table: the minute is
        ``CAST(delivered_ns / 60000000000 AS BIGINT)`` (null without a delivery time), and
        an empty topic is null, as in that table (whose series the SQL leaves null: its
        join does not match a null topic)."""
        self._minutes[:] = [_sum_minutes(self._minutes)]
        return self._minutes[0]

    def streams(self) -> pa.Table:
        """Every publisher stream written (STREAMS_SCHEMA, each once): the publishes with a
        sequence number, by publisher GID, topic (null when empty, as in the ``messages``
        table) and mailbox, the rows ``publisher_health`` is computed from."""
        self._streams[:] = [_distinct_streams(self._streams)]
        return self._streams[0]

    def write(self, landed: pa.Table, name: str) -> Written:
        """Write the rows of one landed part that pass the filters (a worker's call)."""
        tally: Tally = Counter()
        delivered = landed["delivered_ns"]
        keep = None
        if self.since_ns is not None:
            keep = pc.greater_equal(delivered, self.since_ns)
        if self.until_ns is not None:
            below = pc.less(delivered, self.until_ns)
            keep = below if keep is None else pc.and_kleene(keep, below)
        if keep is not None:  # null delivery time: dropped, as SQL's comparison drops it
            landed = landed.filter(keep)
        ok = pc.equal(landed["status"], "ok")
        rejects = landed.filter(pc.invert(ok)).select(list(REJECTS_COLUMNS))
        reasons = zip(rejects["status"].to_pylist(), rejects["reason"].to_pylist(), strict=True)
        tally.update(("reject", status, reason) for status, reason in reasons)
        if rejects.num_rows:
            _write_parquet(rejects, self.out / "rejects" / f"part-{name}.zstd.parquet")
        messages = landed.filter(ok)
        if self.topic_glob is not None or not self.include_internal:
            topics = pc.unique(messages["topic"]).to_pylist()
            wanted = [t for t in topics if wanted_topic(t, self.topic_glob, self.include_internal)]
            if len(wanted) < len(topics):  # (a null in ``wanted`` matches the null topic)
                wanted_array = pa.array(wanted, pa.string())
                messages = messages.filter(pc.is_in(messages["topic"], wanted_array))
        minutes, streams = MINUTES_SCHEMA.empty_table(), STREAMS_SCHEMA.empty_table()
        for mailbox in pc.value_counts(landed["mailbox"]).to_pylist():
            if is_quarantine(mailbox["values"]):
                tally[("quarantined",)] += mailbox["counts"]
        if messages.num_rows:
            self._write_messages(messages, name)
            kinds = pc.value_counts(messages["kind"]).to_pylist()
            tally.update({("kind", kind["values"]): kind["counts"] for kind in kinds})
            marks = pc.value_counts(messages["security"]).to_pylist()
            tally.update({("security", mark["values"]): mark["counts"] for mark in marks})
            publishes = messages.filter(pc.equal(messages["kind"], "publish"))
            minutes, streams = _minute_counts(publishes), _streams(publishes)
        return Written(tally, minutes, streams)

    def _write_messages(self, messages: pa.Table, name: str) -> None:
        delivered = messages["delivered_ns"]
        # Spark's own arithmetic: (delivered - source) as double / 1e6 where the delivery
        # time's resolution allows, and the day of timestamp_micros(cast(delivered / 1000 as
        # long)) in UTC
        latency = pc.if_else(
            pc.less_equal(messages["delivered_res_ns"], LATENCY_RESOLUTION_NS),
            pc.divide(
                pc.cast(pc.subtract(delivered, messages["source_ns"]), pa.float64(), safe=False),
                1e6,
            ),
            pa.scalar(None, pa.float64()),
        )
        micros = _long_quotient(delivered, 1000.0)
        # the day, floored as Spark floors it (also before 1970); null where micros is null
        days = pa.array(
            np.floor_divide(micros.fill_null(0).to_numpy(), _DAY_US),
            pa.int64(),
            mask=pc.is_null(micros).to_numpy(zero_copy_only=False),
        )
        table = pa.table(
            {
                column: latency if column == "latency_ms" else messages[column]
                for column in _MESSAGE_FILE_COLUMNS
            }
        )
        # the rows of each topic-day, in their order (a single-threaded group_by keeps it)
        keyed = pa.table(
            {"topic": messages["topic"], "day": days, "row": np.arange(len(days), dtype=np.int64)}
        )
        grouped = keyed.group_by(["topic", "day"], use_threads=False).aggregate([("row", "list")])
        for topic, day, rows in zip(
            grouped["topic"].to_pylist(),
            grouped["day"].to_pylist(),
            grouped["row_list"].combine_chunks(),
            strict=True,
        ):
            when = None if day is None else _EPOCH + dt.timedelta(days=day)
            directory = (
                self.out / "messages" / partition_dir("topic", topic) / partition_dir("day", when)
            )
            directory.mkdir(parents=True, exist_ok=True)
            _write_parquet(table.take(rows.values), directory / f"part-{name}.zstd.parquet")


def _long_quotient(values: pa.ChunkedArray, divisor: float) -> pa.ChunkedArray:
    """``CAST(values / divisor AS BIGINT)`` as Spark computes it: a double division,
    truncated toward zero; null stays null."""
    quotient = pc.divide(pc.cast(values, pa.float64(), safe=False), divisor)
    return pc.cast(pc.trunc(quotient), pa.int64(), safe=False)


def _topic_or_null(topic: pa.ChunkedArray) -> pa.ChunkedArray:
    """An empty topic as null, as the ``messages`` table reads it back."""
    return pc.if_else(pc.equal(topic, ""), pa.scalar(None, pa.string()), topic)


def _streams(publishes: pa.Table) -> pa.Table:
    """The distinct streams of ``publishes`` with a sequence number (STREAMS_SCHEMA)."""
    publishes = publishes.filter(pc.is_valid(publishes["publisher_seq"]))
    named = pa.table(
        {
            "publisher_gid": publishes["publisher_gid"],
            "topic": _topic_or_null(publishes["topic"]),
            "mailbox": publishes["mailbox"],
        }
    )
    return _distinct_streams([named.cast(STREAMS_SCHEMA)])


def _minute_counts(publishes: pa.Table) -> pa.Table:
    """``publishes`` per topic and minute (MINUTES_SCHEMA), with Spark's arithmetic for the
    minute (``CAST(delivered_ns / 60000000000 AS BIGINT)``) and an empty topic as null."""
    minute = _long_quotient(publishes["delivered_ns"], 6e10)
    keyed = pa.table({"topic": _topic_or_null(publishes["topic"]), "minute": minute})
    counted = keyed.group_by(["topic", "minute"], use_threads=False).aggregate([([], "count_all")])
    return counted.rename_columns(["topic", "minute", "messages"]).cast(MINUTES_SCHEMA)


# ----------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class Source:
    """One archive to land: ``kind`` is maildir or mbox; ``label`` names it in the tables."""

    kind: str
    path: Path
    label: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.kind}:{self.path.resolve()}".encode()).hexdigest()[:16]


def maildirs(root: Path) -> Iterator[tuple[Path, str]]:
    """Every Maildir (a directory with ``cur/`` and ``new/``) at or below ``root``, with a
    mailbox label relative to ``root``."""
    for directory, subdirs, _ in os.walk(root):
        here = Path(directory)
        if "cur" in subdirs and "new" in subdirs:
            label = str(here.relative_to(root)) if here != root else root.name
            yield here, label
        subdirs[:] = [d for d in subdirs if d not in ("cur", "new", "tmp")]


def _read_file(name: str, dir_fd: int) -> bytes:
    """The whole file ``name`` in the directory open as ``dir_fd``, with bare system calls
    (half the cost of ``open().read()``, which matters at 200k small files); opened relative
    to its directory, the kernel does not walk the whole path each time (4.4 rather than
    4.8 us a file here)."""
    fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    try:
        data = os.read(fd, _READ_CHUNK)
        if len(data) < _READ_CHUNK:
            return data
        chunks = [data]
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a worker lands a part. The part's rows (tuples,
    all alive until it is written) make every collection walk a longer list, for nothing:
    the parse makes no reference cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# A Maildir part: (source label, [(directory, mailbox, file names)], part path, sink). Names
# only, not paths: the walk and the hand-over to a worker (pickled through a pipe) cost
# 0.5 CPU-seconds at 200k files with a full path and a tuple per file, 0.25 like this.
_FilesTask = tuple[str, list[tuple[str, str, list[str]]], str, TableSink | None]
# ... and the keystore to verify signatures against (None: not verified)
_KeyedFilesTask = tuple[str, list[tuple[str, str, list[str]]], str, TableSink | None, str | None]


def _land_files(task: _KeyedFilesTask) -> Written | None:
    source, groups, out, sink, keystore = task
    columns = _Columns(source)
    with _gc_paused():
        for directory, mailbox, names in groups:
            try:
                dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue  # removed while we walked, and its files with it
            try:
                for name in names:
                    try:
                        raw = _read_file(name, dir_fd)
                    except FileNotFoundError:
                        continue  # moved or expunged while we walked
                    key = name.partition(":2,")[0]
                    columns.add(mailbox, key, _row(raw, maildir_name_ns(name), keystore))
            finally:
                os.close(dir_fd)
        return columns.write(Path(out), sink)


def _maildir_tasks(source: Source, out_dir: Path, sink: TableSink | None) -> Iterator[_FilesTask]:
    groups: list[tuple[str, str, list[str]]] = []
    size = part = 0
    for maildir, mailbox in maildirs(source.path):
        for sub in ("cur", "new"):
            directory = str(maildir / sub)
            with os.scandir(directory) as entries:
                while read := list(itertools.islice(entries, _BATCH - size)):
                    chunk = [entry.name for entry in read if entry.is_file()]
                    if not chunk:
                        continue
                    groups.append((directory, mailbox, chunk))
                    size += len(chunk)
                    if size >= _BATCH:
                        yield source.label, groups, str(out_dir / f"part-{part:05d}.parquet"), sink
                        groups, size, part = [], 0, part + 1
    if groups or part == 0:
        yield source.label, groups, str(out_dir / f"part-{part:05d}.parquet"), sink


def _mbox_ranges(path: Path, pieces: int) -> list[tuple[int, int]]:
    """Split an mbox into byte ranges that each start at a ``From `` separator line."""
    size = path.stat().st_size
    if size == 0:
        return []
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        starts = [0]
        for i in range(1, pieces):
            found = m.find(b"\nFrom ", size * i // pieces)
            if found == -1:
                break
            if found + 1 > starts[-1]:
                starts.append(found + 1)
    return [(a, b) for a, b in zip(starts, [*starts[1:], size], strict=True) if b > a]


def _land_mbox_range(
    task: tuple[str, str, str, int, int, str, TableSink | None, str | None],
) -> Written | None:
    source, path, mailbox, start, end, out, sink, keystore = task
    columns = _Columns(source, mailbox)
    if end <= start:  # an empty mbox (which mmap refuses): an empty part
        return columns.write(Path(out), sink)
    offsets, rows = columns.offsets, columns.rows
    with (
        _gc_paused(),
        open(path, "rb") as handle,
        mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m,
    ):
        find = m.find
        # mboxrd quoting: a line '>From ' (any number of '>') loses one '>'. Every such line
        # holds the string '>From ', so a piece without it needs no look at any message
        # (one search of the piece cost 0.2 us a message, a search of each message 0.6 us)
        quoted = find(b">From ", start, end) != -1
        # the piece's first message may lack an envelope line; every later one starts at
        # the "From " line that ended the message before it
        envelope = m[start : start + 5] == b"From "
        pos = start
        while pos < end:  # one copy per message: the bytes between envelope and blank line
            nxt = find(b"\nFrom ", pos, end)
            stop = end if nxt == -1 else nxt + 1
            first = pos
            if envelope:
                newline = find(b"\n", pos, stop)
                first = stop if newline == -1 else newline + 1
            envelope = True
            last = stop
            if last - first >= 2 and m[last - 1] == 10 and m[last - 2] == 10:
                last -= 1  # the blank line that separates mbox messages
            raw = m[first:last]
            if quoted and b"\n>" in raw:
                raw = _MBOXRD_QUOTED.sub(rb"\1", raw)  # mboxrd: '>From ' -> 'From '
            if raw and not raw.isspace():
                offsets.append(pos)
                rows.append(_row(raw, None, keystore))
            pos = stop
        return columns.write(Path(out), sink)


def _task_size(task: tuple[Any, ...], kind: str) -> int:
    """Files in a Maildir task, bytes in an mbox task: the unit of the progress display."""
    if kind == "maildir":
        return sum(len(names) for _, _, names in task[1])
    return int(task[4]) - int(task[3])


def _source_dir(landing: Path, source: Source) -> Path:
    """Where ``source`` lands under the ``landing`` directory."""
    return landing / f"src={source.digest}"


def _tasks(
    sources: Iterable[Source],
    landing: Path,
    workers: int,
    sink: TableSink | None,
    keystore: str | None = None,
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """(kind, task) for every part of every source, as the sources are walked; each
    source's landing directory is emptied first."""
    for source in sources:
        out_dir = _source_dir(landing, source)
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        if source.kind == "maildir":
            for task in _maildir_tasks(source, out_dir, sink):
                yield "maildir", (*task, keystore)
            continue
        # ~64 MB pieces, as many as a multiple of the workers: with 15 pieces on 2 workers
        # the last one ran alone, one core idle for its whole length
        rounds = -(-source.path.stat().st_size // ((64 << 20) * workers))
        ranges = _mbox_ranges(source.path, max(1, rounds) * workers)
        for part, (start, end) in enumerate(ranges or [(0, 0)]):
            out = str(out_dir / f"part-{part:05d}.parquet")
            yield "mbox", (
                source.label, str(source.path), source.path.name, start, end, out, sink, keystore
            )  # fmt: skip


def _workers_context() -> multiprocessing.context.ForkServerContext:
    # Workers come from a fork server, never a fork of this process: the Spark driver starts
    # in another thread meanwhile, and a fork taken while that thread holds a lock (imports,
    # the JVM launch) can leave a worker hung for ever. The server imports this module once
    # and forks ready workers. It imports pandas too: pyarrow imports it on the first
    # ``pa.array`` of a list (to ask whether that is a pandas object), so that every worker
    # would otherwise import it again.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "pandas"])
    return context


def start_workers() -> None:
    """Start the landing's fork server now, so that its imports (~0.5 s of a core) overlap
    the caller's work instead of delaying the first worker of :func:`land`. Optional and
    idempotent; the server lives as long as this process."""
    _workers_context()
    multiprocessing.forkserver.ensure_running()


def land(
    sources: list[Source],
    landing: Path,
    *,
    workers: int | None = None,
    progress: Any = None,
    sink: TableSink | None = None,
    keystore: str | None = None,
) -> list[Path]:
    """Land every source under ``landing/src=<digest>/`` (replacing an earlier landing of the
    same source) and return those directories. ``progress(done, total)`` is called as parts
    finish. With a ``sink``, the run's ``messages`` and ``rejects`` tables are written too
    (replacing earlier ones). With a ``keystore``, signed mail is verified against its
    trusted keys (the ``security`` column)."""
    if sink is not None:
        sink.prepare()
    workers = workers or max(1, os.cpu_count() or 1)
    unique: dict[str, Source] = {}  # a source named twice lands once
    for source in sources:
        unique.setdefault(source.digest, source)
    submitted: list[tuple[Future[Written | None], int]] = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=_workers_context()) as pool:
        # each part is handed out as soon as the walk has made it: the first Maildir part
        # starts after 20,000 directory entries, not after the whole directory
        for kind, task in _tasks(unique.values(), landing, workers, sink, keystore):
            work = _land_files if kind == "maildir" else _land_mbox_range
            submitted.append((pool.submit(work, task), _task_size(task, kind)))
        total = sum(size for _, size in submitted)
        done = 0
        for future, size in submitted:
            written = future.result()
            if sink is not None and written is not None:
                sink.add(written)
            done += size
            if progress is not None:
                progress(done, total)
    if sink is not None:
        sink.finish()
    return [_source_dir(landing, source) for source in unique.values()]
