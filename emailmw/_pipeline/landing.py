"""Landing: mail archives -> typed rows, one per stored email, parsed where Spark runs.

The driver lists each archive into units of work (:func:`list_units`: batches of Maildir file
names, byte ranges of mbox files cut at message boundaries; an IMAP folder is staged as a
Maildir first), which is cheap: ``os.scandir`` and a few searches, no email read. The
executors land the units (:func:`land_units`, run by ``DataFrame.mapInArrow``): each
message read and parsed once with emailmw's own wire format (:func:`emailmw._core.wire.parse_head`,
which is :func:`~emailmw._core.wire.parse` without the body) and classified with its own protocol
(:func:`emailmw._core.protocol.read_metadata`, what ``classify`` reads), as Arrow batches. Spark
writes them, and everything computed from them (see ``tables.py``).
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import gc
import hashlib
import itertools
import mmap
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from .._core.carried import outer_fields, split
from .._core.errors import ConfigError, ForeignEmailError, MalformedEmailError
from .._core.protocol import Unroutable, read_metadata
from .._core.types import Headers
from .._core.wire import parse, parse_head

__all__ = [
    "mbox_ranges_from",
    "INTERNAL_TOPIC_PREFIX",
    "LANDING_SCHEMA",
    "LATENCY_RESOLUTION_NS",
    "REJECTS_COLUMNS",
    "Source",
    "LANDED_SCHEMA",
    "UNIT_SCHEMA",
    "describe",
    "land_numbered_units",
    "land_unit",
    "land_units",
    "list_units",
    "QUARANTINE_SQL",
    "signature_status",
    "maildirs",
]

LANDING_SCHEMA: Final = pa.schema(
    [
        ("source", pa.string()),
        ("mailbox", pa.string()),
        ("key", pa.string()),
        ("status", pa.string()),  # ok | foreign | malformed | unreadable
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
        # how the message travelled when not alone in its email: "batch i/N" (part i of a
        # batch email, ``_packing``: its key is the email's plus "#i") or "part i/N" (a
        # part of a message sent as several emails); null otherwise. Landed parts of earlier
        # versions lack it and read as null.
        ("packed", pa.string()),
        # a part of a message sent as several emails: the whole's Message-ID (its Part-Of
        # header), by which ``messages`` joins the parts into one row; null otherwise.
        # Landed parts of earlier versions lack it and read as null.
        ("part_of", pa.string()),
        # an mbox message's byte offset (its "From " line; ``key`` is the same number, in 16
        # digits), null for a Maildir file: Spark orders ties by it without parsing ``key``.
        # Landed parts of earlier versions lack it and read as null.
        ("offset", pa.int64()),
    ]
)
REJECTS_COLUMNS: Final = ("source", "mailbox", "key", "status", "reason", "topic", "size")
_READ_CHUNK: Final = 1 << 16
_DOVECOT_NAME: Final = re.compile(r"^(\d+)\.M(\d+)P")
_MBOXRD_QUOTED: Final = re.compile(rb"(?m)^>(>*From )")


#: Whether a mailbox label (a Maildir folder such as ``u/Maildir/.Quarantine``, an mbox
#: file's name such as ``Quarantine.mbox``) is a quarantine folder: its last name is
#: ``Quarantine`` (any case), the folder ``verify: enforce`` moves refused mail to.
QUARANTINE_SQL: Final = (
    "lower(regexp_extract(regexp_replace(mailbox, '[.]mbox$', ''), '([^/.]*)$', 1)) = 'quarantine'"
)


#: topics emailmw itself publishes on (the graph announcements): left out of the tables
#: unless a run includes them
INTERNAL_TOPIC_PREFIX: Final = "/_emailmw/"


@functools.lru_cache(maxsize=65536)
@functools.lru_cache(maxsize=4096)  # (mail delivered within a second shares its date)
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
_NONE_9: Final = (None,) * 9  # kind .. source_ns
_TRACE_RE: Final = re.compile(r"^(received|date):[ \t]*(.*)$", re.I | re.M)


def _stored_time(raw: bytes, name_ns: int | None) -> tuple[int | None, int | None]:
    """The delivery time of an email that does not parse: its store's (a Maildir file
    name) refined by, or else, its topmost ``Received:`` (or ``Date:``), read leniently."""
    end = raw.find(b"\n\n")
    crlf = raw.find(b"\r\n\r\n")
    if crlf != -1 and (end == -1 or crlf < end):
        end = crlf
    block = raw[: end if end != -1 else 65536][:65536].decode("latin-1")
    unfolded = re.sub(r"\r?\n[ \t]+", " ", block).replace("\r", "")
    found: dict[str, str] = {}
    for name, value in _TRACE_RE.findall(unfolded):
        found.setdefault(name.lower(), value)
    return delivery_time(found.get("received"), found.get("date"), name_ns)


def describe(raw: bytes, name_ns: int | None = None, keystore: str | None = None) -> dict[str, Any]:
    """The landing columns (all but source/mailbox/key/offset, which say where the email
    is stored) for one stored email; ``keystore``: verify signatures against it."""
    return dict(zip(_DESCRIBED, _row(raw, name_ns, keystore), strict=True))


@functools.lru_cache(maxsize=4)
def _trusted(keystore: str) -> dict[str, Any]:
    from .._security import Keystore  # imported by executors only when a keystore is given

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
    from .._security import check_signature

    try:
        email = parse(raw)
    except (ForeignEmailError, MalformedEmailError):
        return "invalid"
    status = check_signature(email, _trusted(keystore), source_ns).status
    return "invalid" if status == "unsigned" else status  # a header that is not a signature


def _row(
    raw: bytes,
    name_ns: int | None,
    keystore: str | None = None,
    delivered: tuple[int | None, int | None] | None = None,
    packed: str | None = None,
) -> _Row:
    """The described columns of one email (``delivered``: its delivery time and resolution
    when known from elsewhere: a batch's parts have the batch email's)."""
    # status, reason, kind, topic, message_id, in_reply_to, publisher_gid, publisher_seq,
    # client_gid, request_seq, source_ns, delivered_ns, delivered_res_ns, size, from_addr,
    # to_addr, security, packed
    size = len(raw)
    try:
        parsed = parse_head(raw)
    except (ForeignEmailError, MalformedEmailError) as exc:
        status = "foreign" if isinstance(exc, ForeignEmailError) else "malformed"
        # its delivery time all the same (from the store, or its trace headers, read
        # leniently): a window keeps the rejects delivered in it
        stamp, res = delivered if delivered is not None else _stored_time(raw, name_ns)
        return (status, str(exc), *_NONE_9, stamp, res, size, None, None, None, packed, None)
    headers = parsed.headers
    if delivered is None:
        delivered = delivery_time(headers.get("received"), headers.get("date"), name_ns)
    stamp, res = delivered
    part_of = None
    if packed is None and (part := headers.get("part")) is not None:
        packed = f"part {part.strip()[:20]}"
        part_of = (headers.get("part-of") or "").strip()[:998] or None
    message_id = parsed.message_id
    to = ", ".join(parsed.to)
    metadata = read_metadata(headers)  # classify()'s reading, without its route objects
    if isinstance(metadata, Unroutable):
        return (
            "malformed" if metadata.malformed else "foreign", metadata.reason, None,
            parsed.subject, message_id, None, None, None, None, None, None, stamp, res,
            size, parsed.from_, to, None, packed, None,
        )  # fmt: skip
    is_service, source_ns, gid, seq = metadata
    security = signature_status(raw, headers, source_ns, keystore)
    if is_service:
        return (
            "ok", None, "response" if parsed.in_reply_to else "request", parsed.subject,
            message_id, parsed.in_reply_to, None, None, gid, seq, source_ns, stamp, res,
            size, parsed.from_, to, security, packed, part_of,
        )  # fmt: skip
    return (
        "ok", None, "publish", parsed.subject, message_id, parsed.in_reply_to, gid, seq,
        None, None, source_ns, stamp, res, size, parsed.from_, to, security, packed, part_of,
    )  # fmt: skip


def _rows(raw: bytes, name_ns: int | None, keystore: str | None) -> list[tuple[str, _Row]]:
    """The rows of one stored email (what it carries: ``_carried.split``, the one stage
    every consumer of mail reads through), each with what its key gets after the email's:
    one row (""), or one a message of a batch email ("#1", "#2", ...) with the batch
    email's own delivery time (its topmost ``Received:``: the delivery, not the
    submission at the bottom). A batch that cannot be unpacked is one malformed row; a
    message of a batch that is not emailmw's is malformed (a batch carries emailmw's only)."""
    parts, broken = split(raw)
    if broken:
        return [("", ("malformed", broken, *_NONE_11, len(raw), None, None, None, None, None))]
    if parts is None:
        return [("", _row(raw, name_ns, keystore))]
    fields = outer_fields(raw)
    delivered = delivery_time(fields.get("received"), fields.get("date"), name_ns)
    total = len(parts)
    out = []
    for i, part in enumerate(parts, 1):
        row = _row(part, name_ns, keystore, delivered, f"batch {i}/{total}")
        if row[0] == "foreign":
            row = ("malformed", f"not emailmw's, inside a batch: {row[1]}", *row[2:])
        out.append((f"#{i}", row))
    return out


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
        self.suffixes: list[str] = []  # after an mbox key: "#i" for a batch's parts
        self.rows: list[_Row] = []

    def add(self, mailbox: str, key: str, row: _Row) -> None:
        self.mailboxes.append(mailbox)
        self.keys.append(key)
        self.rows.append(row)

    def table(self) -> pa.Table:
        """The rows as one table (LANDING_SCHEMA)."""
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
            if any(self.suffixes):
                keys = pc.binary_join_element_wise(keys, pa.array(self.suffixes, string), "")
        arrays = [pa.array([self.source] * count, string), mailboxes, keys]
        arrays += [
            pa.array(column, field.type)
            for column, field in zip(described, list(LANDING_SCHEMA)[3:-1], strict=True)
        ]
        arrays.append(offsets)
        return pa.Table.from_arrays(arrays, schema=LANDING_SCHEMA)


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

    def refuse(exc: OSError) -> None:
        raise ConfigError(
            f"cannot read {exc.filename}: {exc.strerror or exc} (check its permissions)",
            source=str(root),
        )

    for directory, subdirs, _ in os.walk(root, onerror=refuse):
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


# ----------------------------------------------------------------------------- units of work

#: One unit of landing work, as the driver lists it (:func:`list_units`) and an executor
#: lands it (:func:`land_units`): Maildir file names, a batch from one or more directories
#: (``groups``), or a byte range of an mbox file cut at a message boundary (``path``,
#: ``start``, ``end``). ``src`` is the source's digest, the ``src=`` directory Spark writes
#: its landed rows under.
UNIT_SCHEMA: Final = pa.schema(
    [
        ("src", pa.string()),
        ("kind", pa.string()),  # maildir | mbox
        ("source", pa.string()),  # the source's label
        (
            "groups",
            pa.list_(
                pa.struct(
                    [
                        ("directory", pa.string()),
                        ("mailbox", pa.string()),
                        ("names", pa.list_(pa.string())),
                    ]
                )
            ),
        ),
        ("path", pa.string()),
        ("mailbox", pa.string()),
        ("start", pa.int64()),
        ("end", pa.int64()),
    ]
)
#: the landed rows as the executors hand them to Spark: every landing column and ``src``
LANDED_SCHEMA: Final = LANDING_SCHEMA.append(pa.field("src", pa.string()))
# Files in a Maildir unit, bytes in an mbox unit: ~0.4 s of one core's parsing each, so
# that a task's fixed cost stays small against its work (measured at 200k Maildir files on
# two cores: landing took 17-19 s in units of 1,000 files, 5-8 s in units of 5,000 or
# more), and a cluster still gets several units per executor.
MAILDIR_UNIT_FILES: Final = 20_000
MBOX_UNIT_BYTES: Final = 32 << 20


def _maildir_units(source: Source, skipped: list[str]) -> Iterator[dict[str, Any]]:
    groups: list[dict[str, Any]] = []
    size = 0
    for maildir, mailbox in maildirs(source.path):
        for sub in ("cur", "new"):
            directory = str(maildir / sub)
            try:
                scanned = os.scandir(directory)
            except OSError as exc:
                raise ConfigError(
                    f"cannot list {directory}: {exc.strerror or exc} (check its permissions)",
                    source=source.label,
                ) from None
            with scanned as entries:
                while read := list(itertools.islice(entries, MAILDIR_UNIT_FILES - size)):
                    names = [entry.name for entry in read if entry.is_file()]
                    if not all(map(_utf8, names)):  # (not landed: a column holds text)
                        skipped += [os.path.join(directory, n) for n in names if not _utf8(n)]
                        names = [name for name in names if _utf8(name)]
                    if not names:
                        continue
                    groups.append({"directory": directory, "mailbox": mailbox, "names": names})
                    size += len(names)
                    if size >= MAILDIR_UNIT_FILES:
                        yield {"kind": "maildir", "groups": groups}
                        groups, size = [], 0
    if groups:
        yield {"kind": "maildir", "groups": groups}


def _utf8(name: str) -> bool:
    """Whether a file name is UTF-8 (``os`` gives other bytes as lone surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _mbox_units(source: Source, skipped: list[str]) -> Iterator[dict[str, Any]]:
    del skipped  # (an mbox's messages have no names)
    pieces = max(1, -(-source.path.stat().st_size // MBOX_UNIT_BYTES))
    for start, end in _mbox_ranges(source.path, pieces):
        yield {
            "kind": "mbox",
            "path": str(source.path),
            "mailbox": source.path.name,
            "start": start,
            "end": end,
        }


def list_units(sources: Iterable[Source], skipped: list[str] | None = None) -> pa.Table:
    """The units of work that land ``sources`` (UNIT_SCHEMA): the driver's share of the
    landing, a directory walk (``os.scandir``: 0.2 s at 200k files) and a few searches for
    mbox message boundaries; no email is read. A Maildir file whose name is not UTF-8 is
    left out, its path added to ``skipped`` (was: the whole run ended in a traceback)."""
    rows: list[dict[str, Any]] = []
    listed: set[str] = set()
    left_out: list[str] = [] if skipped is None else skipped
    for source in sources:
        if source.digest in listed:
            continue  # a source named twice (or by another path to it) lands once
        listed.add(source.digest)
        make = _maildir_units if source.kind == "maildir" else _mbox_units
        for unit in make(source, left_out):
            rows.append({"src": source.digest, "source": source.label, **unit})
    return pa.Table.from_pylist(rows, schema=UNIT_SCHEMA)


def land_unit(unit: dict[str, Any], keystore: str | None = None) -> pa.Table:
    """The landed rows (LANDING_SCHEMA) of one unit of :func:`list_units`: every email it
    names read and parsed with emailmw's wire format. A file or directory gone since the
    listing is skipped (moved or expunged meanwhile)."""
    if unit["kind"] == "maildir":
        return _land_files(unit["source"], unit["groups"], keystore)
    return _land_mbox_range(
        unit["source"], unit["path"], unit["mailbox"], unit["start"], unit["end"], keystore
    )


def land_numbered_units(
    batches: Iterable[pa.RecordBatch], units: Any, keystore: str | None = None
) -> Iterator[pa.RecordBatch]:
    """:func:`land_units` for tasks that carry unit numbers (``id``) of the table
    ``units`` holds (a Spark broadcast of :func:`list_units`' table)."""
    table: pa.Table = units.value
    for batch in batches:
        for number in batch.column("id").to_pylist():
            yield from land_units(table.slice(number, 1).to_batches(), keystore)


def land_units(
    batches: Iterable[pa.RecordBatch], keystore: str | None = None
) -> Iterator[pa.RecordBatch]:
    """What an executor runs (``DataFrame.mapInArrow``): units of :func:`list_units` in,
    their landed rows out (LANDED_SCHEMA), a batch per unit."""
    for batch in batches:
        for unit in batch.to_pylist():
            landed = land_unit(unit, keystore)
            src = pa.array([unit["src"]] * landed.num_rows, pa.string())
            yield from landed.append_column("src", src).to_batches()


def _land_files(source: str, groups: list[dict[str, Any]], keystore: str | None) -> pa.Table:
    columns = _Columns(source)
    unreadable: list[Unreadable] = []
    with _gc_paused():
        for mailbox, key, name_ns, raw in maildir_emails(groups, unreadable):
            for suffix, row in _rows(raw, name_ns, keystore):
                columns.add(mailbox, key + suffix, row)
        for mailbox, key, name_ns, reason in unreadable:  # a reject each, counted
            stamp, res = (name_ns, MICROSECOND_NS) if name_ns is not None else (None, None)
            columns.add(mailbox, key, ("unreadable", reason, *_NONE_9, stamp, res, 0,
                                       None, None, None, None, None))  # fmt: skip
        return columns.table()


#: (mailbox, key, the delivery time the store gives, why it could not be read)
Unreadable = tuple[str, str, int | None, str]


def maildir_emails(
    groups: list[dict[str, Any]], unreadable: list[Unreadable] | None = None
) -> Iterator[tuple[str, str, int | None, bytes]]:
    """The emails a Maildir unit names: (mailbox, key, the delivery time its file name
    gives, the raw bytes). A file or directory gone since the listing is skipped; one that
    cannot be read (permissions, an I/O error) is added to ``unreadable`` and skipped: no
    email stops the others."""
    for group in groups:
        mailbox = group["mailbox"]
        try:
            dir_fd = os.open(group["directory"], os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue  # removed since the listing, and its files with it
        except OSError as exc:
            for name in group["names"]:
                _unreadable(unreadable, mailbox, name, exc)
            continue
        try:
            for name in group["names"]:
                try:
                    raw = _read_file(name, dir_fd)
                except FileNotFoundError:
                    continue  # moved or expunged since the listing
                except OSError as exc:
                    _unreadable(unreadable, mailbox, name, exc)
                    continue
                yield mailbox, name.partition(":2,")[0], maildir_name_ns(name), raw
        finally:
            os.close(dir_fd)


def _unreadable(found: list[Unreadable] | None, mailbox: str, name: str, exc: OSError) -> None:
    if found is not None:
        reason = f"cannot be read: {exc.strerror or exc}"
        found.append((mailbox, name.partition(":2,")[0], maildir_name_ns(name), reason))


def unit_emails(
    unit: dict[str, Any], unreadable: list[Unreadable] | None = None
) -> Iterator[tuple[str, str, int | None, bytes]]:
    """The emails of one unit of :func:`list_units` as (mailbox, key, delivery time from
    the store or None, raw bytes): what other readers of an archive (``emailmw bag
    export``) share with the landing; files that cannot be read go to ``unreadable``."""
    if unit["kind"] == "maildir":
        yield from maildir_emails(unit["groups"], unreadable)
        return
    for offset, raw in mbox_emails(unit["path"], unit["start"], unit["end"]):
        yield unit["mailbox"], str(offset), None, bytes(raw)


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


def mbox_ranges_from(path: Path, start: int) -> list[tuple[int, int]]:
    """Byte ranges of an mbox from ``start`` (a message's beginning: where it ended when it
    was last landed) to its end, each starting at a ``From `` line, about
    :data:`MBOX_UNIT_BYTES` each."""
    size = path.stat().st_size
    if size <= start:
        return []
    pieces = max(1, -(-(size - start) // MBOX_UNIT_BYTES))
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        starts = [start]
        for i in range(1, pieces):
            found = m.find(b"\nFrom ", start + (size - start) * i // pieces)
            if found == -1:
                break
            if found + 1 > starts[-1]:
                starts.append(found + 1)
    return [(a, b) for a, b in zip(starts, [*starts[1:], size], strict=True) if b > a]


def _land_mbox_range(
    source: str, path: str, mailbox: str, start: int, end: int, keystore: str | None
) -> pa.Table:
    columns = _Columns(source, mailbox)
    offsets, rows, suffixes = columns.offsets, columns.rows, columns.suffixes
    with _gc_paused():
        last = b""
        for offset, raw in mbox_emails(path, start, end):
            last = raw
            for suffix, row in _rows(raw, None, keystore):
                offsets.append(offset)
                rows.append(row)
                suffixes.append(suffix)
        if rows and _cut_short(path, end, last):
            # the file ends inside its last message (a copy cut short): said as such, not
            # as whatever the rest of it happens to parse as
            offset = offsets[-1]
            while offsets and offsets[-1] == offset:
                offsets.pop(), rows.pop(), suffixes.pop()
            offsets.append(offset)
            suffixes.append("")
            rows.append(("malformed", "truncated: the mbox ends inside this message",
                         *_NONE_11, len(last), None, None, None, None, None))  # fmt: skip
        return columns.table()


def _cut_short(path: str, end: int, last: bytes) -> bool:
    """Whether the mbox ends at ``end`` inside a message: an mbox writer ends every
    message with a line break (and a blank line before the next ``From ``)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return False
    return end >= size and not last.endswith(b"\n")


def mbox_emails(path: str, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """The messages of an mbox between byte offsets ``start`` and ``end`` (a range of
    :func:`_mbox_ranges`): (the offset of its ``From `` line, its bytes, mboxrd quoting
    undone)."""
    if end <= start:  # an empty mbox (which mmap refuses): nothing
        return
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
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
                yield pos, raw
            pos = stop
