"""Several messages in one email (a batch), and one message in several emails (parts):
pure functions and a state machine, no I/O.

A batch is a standard MIME digest any mail tool shows: ``multipart/digest`` whose parts
are ``message/rfc822``, each part the exact email emailmw would have sent alone (its own
Subject, metadata headers, Message-ID and signature). The outer email only carries them:
it has a ``Batch-Count`` header (how many parts), a Subject saying what it is, and no
metadata of its own. Unpacking gives back exactly the emails that went in, so routing,
QoS, security (each part verified on its own), acknowledgements, groups, the pipeline and
bags all see individual messages (``docs/batching.md``).

Guarantees (``tests/test_packing.py``): ``batch_parts(build_batch(raws, ...)) == raws``
(line endings as CRLF, as SMTP carries them); any bytes either unpack, or are not a batch
(None), or raise :class:`~emailmw.MalformedEmailError`, never another exception.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, Generic, NamedTuple, TypeVar

from .errors import EmailMWError, InvalidArgumentError, MalformedEmailError
from .types import Email, Headers
from .wire import HEADER_RESENT, format_date, parse_header_block, split_message

__all__ = [
    "BATCH_COUNT_HEADER",
    "BODY_ENCODING_HEADER",
    "COMPRESS_WHEN_READ_HEADER",
    "PART_DIGEST_HEADER",
    "PART_HEADER",
    "PART_OF_HEADER",
    "PartOf",
    "PieceDigest",
    "Reassembly",
    "ZSTD",
    "batch_parts",
    "build_batch",
    "compress_body",
    "decompress_body",
    "decompress_pieces",
    "grow",
    "is_batch",
    "join_parts",
    "part_of",
    "split_email",
]

BATCH_COUNT_HEADER: Final = "Batch-Count"
_BOUNDARY_RE: Final = re.compile(r'boundary\s*=\s*"?([^";\s]+)"?', re.I)
_MAX_PARTS: Final = 100_000


def build_batch(
    raws: Sequence[bytes],
    *,
    from_: str,
    to: Sequence[str],
    message_id: str,
    timestamp_ns: int,
    subjects: Sequence[str] = (),
    headers: Sequence[tuple[str, str]] = (),
) -> bytes:
    """The batch email carrying ``raws`` (each an email as :func:`~emailmw._core.wire.build`
    makes it, CRLF line endings), from ``from_`` to ``to`` (the envelope recipients every
    part shares). Its Subject names the parts' ``subjects`` (each once, printable ASCII
    ones, up to 800 characters), so that a search of the mailbox by Subject
    (``history``: ``transient_local``, the graph) finds the batch, and unpacks it.
    ``headers``: more fields of its own (what a group member reads before it claims it:
    the first part's Source-Timestamp, the parts' Route-To), each checked as a header must
    be (no CR, LF or NUL)."""
    for name, value in headers:
        if any(c in name + value for c in "\r\n\0") or not name.isascii() or ":" in name:
            raise InvalidArgumentError(f"a batch header cannot carry {name!r}")
    if not raws:
        raise InvalidArgumentError("a batch needs at least one email")
    named = ""
    for subject in dict.fromkeys(subjects):
        if subject.isascii() and subject.isprintable() and len(named) + len(subject) < 800:
            named += f" {subject}"
    boundary = f"=_emailmw_{uuid.uuid4().hex}"
    while any(boundary.encode() in raw for raw in raws):  # (a 2^-122 chance)
        boundary = f"=_emailmw_{uuid.uuid4().hex}"
    head = (
        f"From: {from_}\r\n"
        f"To: {', '.join(to)}\r\n"
        f"Subject: emailmw batch of {len(raws)}:{named}\r\n"
        f"Message-ID: {message_id}\r\n"
        f"Date: {format_date(timestamp_ns)}\r\n"
        "MIME-Version: 1.0\r\n"
        f'Content-Type: multipart/digest; boundary="{boundary}"\r\n'
        f"{BATCH_COUNT_HEADER}: {len(raws)}\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in headers)
        + "\r\n"
        f"A batch of {len(raws)} emailmw messages, each an attached email.\r\n"
    ).encode()
    delimiter = f"\r\n--{boundary}\r\nContent-Type: message/rfc822\r\n\r\n".encode()
    parts = [head]
    for raw in raws:
        parts.append(delimiter)
        parts.append(raw[:-2] if raw.endswith(b"\r\n") else raw)
    parts.append(f"\r\n--{boundary}--\r\n".encode())
    return b"".join(parts)


def is_batch(raw: bytes) -> bool:
    """Whether ``raw`` says it is a batch (a ``Batch-Count`` header in its header block):
    a quick look, without reading the header block fully."""
    end = raw.find(b"\n\n", 0, 65536)
    block = raw[: end if end != -1 else 65536].lower()
    return b"\nbatch-count:" in block or block.startswith(b"batch-count:")


def batch_parts(raw: bytes) -> list[bytes] | None:
    """The emails a batch carries (CRLF line endings), in order; None when ``raw`` is not
    a batch. :class:`~emailmw.MalformedEmailError` when it says it is one and is not
    readable as one (no boundary, no parts, a part that is not ``message/rfc822``, fewer or
    more parts than ``Batch-Count`` says): a broken part inside is the reader's to find."""
    if not is_batch(raw):
        return None
    block, body = split_message(raw)
    fields = {name.lower(): value for name, value in parse_header_block(block)}
    if BATCH_COUNT_HEADER.lower() not in fields:
        return None
    try:
        count = int(fields[BATCH_COUNT_HEADER.lower()].strip())
    except ValueError:
        raise MalformedEmailError("batch: Batch-Count is not a number") from None
    content_type = fields.get("content-type", "")
    if not content_type.lower().startswith("multipart/digest"):
        raise MalformedEmailError("batch: not multipart/digest")
    found = _BOUNDARY_RE.search(content_type)
    if found is None:
        raise MalformedEmailError("batch: no boundary")
    if not 0 < count <= _MAX_PARTS:
        raise MalformedEmailError(f"batch: Batch-Count {count} out of range")
    body = body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    delimiter = b"\r\n--" + found.group(1).encode()
    chunks = (b"\r\n" + body).split(delimiter)
    parts: list[bytes] = []
    closed = False
    for chunk in chunks[1:]:
        if chunk.startswith(b"--"):
            closed = True
            break
        line_end = chunk.find(b"\r\n")
        if line_end == -1 or chunk[:line_end].strip():
            raise MalformedEmailError("batch: a delimiter line with text after it")
        part = chunk[line_end + 2 :]
        head_end = part.find(b"\r\n\r\n") if not part.startswith(b"\r\n") else -2
        if head_end == -1:
            raise MalformedEmailError("batch: a part without a header block")
        headers = parse_header_block(part[: max(head_end, 0)]) if head_end > 0 else []
        kinds = [v.split(";")[0].strip().lower() for k, v in headers if k.lower() == "content-type"]
        if kinds and kinds[0] != "message/rfc822":
            raise MalformedEmailError(f"batch: a part of type {kinds[0][:40]}")
        parts.append(part[head_end + 4 :] + b"\r\n")
    if not closed:
        raise MalformedEmailError("batch: no closing delimiter (cut short?)")
    if len(parts) != count:
        raise MalformedEmailError(f"batch: {len(parts)} parts where Batch-Count says {count}")
    return parts


# ------------------------------------------------------ one message, several emails (parts)

PART_HEADER: Final = "Part"
PART_OF_HEADER: Final = "Part-Of"
#: the whole message's body digest, in each of its parts: ``sha256=HEX`` of its UTF-8 bytes
PART_DIGEST_HEADER: Final = "Part-Digest"
_PART_HEADERS: Final = frozenset(h.lower() for h in (PART_HEADER, PART_OF_HEADER,
                                                     PART_DIGEST_HEADER))  # fmt: skip
BODY_ENCODING_HEADER: Final = "Body-Encoding"
#: on an email inside a sender only, never on the wire: the body is to be compressed
#: (its value, ``zstd``) once its readers said they read it (a message in parts that
#: waited for its readers: ``docs/batching.md``); the splitting sender removes it
COMPRESS_WHEN_READ_HEADER: Final = "Emailmw-Compress-When-Read"


def _chunks(data: bytes, chunk_bytes: int) -> list[str]:
    """UTF-8 ``data`` cut into pieces of at most ``chunk_bytes`` bytes, never inside a
    character."""
    pieces = []
    start = 0
    while start < len(data):
        end = min(start + chunk_bytes, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # a continuation byte
            end -= 1
        pieces.append(data[start:end].decode("utf-8", "surrogatepass"))
        start = end
    return pieces


def split_email(email_: Email, chunk_bytes: int) -> list[Email]:
    """``email_`` (its ``message_id`` set) as several emails, each carrying at most
    ``chunk_bytes`` UTF-8 bytes of its body (cut between characters), with every header of
    the original, ``Part: i/N``, ``Part-Of:`` the original's Message-ID and
    ``Part-Digest:`` its body's digest (what binds each part to its whole: a signed part
    names them), and a random Message-ID of its own (nobody can take a part's ID before
    it is sent). A body that fits is the email itself, alone."""
    if email_.message_id is None:
        raise InvalidArgumentError("a message split into parts needs its Message-ID")
    if chunk_bytes < 4:
        raise InvalidArgumentError("chunk_bytes must be at least 4 (one character)")
    if len(email_.body) * 4 <= chunk_bytes or len(email_.body.encode()) <= chunk_bytes:
        return [email_]
    data = email_.body.encode("utf-8", "surrogatepass")
    digest = f"sha256={hashlib.sha256(data).hexdigest()}"
    pieces = _chunks(data, chunk_bytes)
    del data
    total = len(pieces)
    domain = email_.message_id.strip("<>").partition("@")[2] or "emailmw.invalid"
    parts = []
    for index in range(total):
        headers = Headers(
            [*email_.headers.items(), (PART_HEADER, f"{index + 1}/{total}"),
             (PART_OF_HEADER, email_.message_id), (PART_DIGEST_HEADER, digest)]
        )  # fmt: skip
        parts.append(
            email_.replace(
                body=pieces[index], headers=headers, message_id=f"<{uuid.uuid4().hex}@{domain}>"
            )
        )
    return parts


class PieceDigest:
    """The digest of a body read in pieces (UTF-8 text), for :data:`PART_DIGEST_HEADER`:
    :meth:`feed` passes the pieces on as it hashes them; :meth:`matches` then says whether
    they make the body the parts named (True when they named none: a sender before
    digests). Not thread-safe."""

    def __init__(self, expected: str | None) -> None:
        self.expected = expected
        self._hash = hashlib.sha256()

    def feed(self, pieces: Iterable[str]) -> Iterator[str]:
        for piece in pieces:
            self._hash.update(piece.encode("utf-8", "surrogatepass"))
            yield piece

    def matches(self) -> bool:
        return self.expected is None or self.expected == f"sha256={self._hash.hexdigest()}"

    @classmethod
    def of(cls, body: str, expected: str | None) -> bool:
        """Whether ``body`` (whole) is the one ``expected`` names."""
        digest = cls(expected)
        for _ in digest.feed((body,)):
            pass
        return digest.matches()


class PartOf(NamedTuple):
    """What a part says of itself: which message, its number (1-based) of ``total``."""

    message_id: str
    number: int
    total: int


def part_of(email_: Email) -> PartOf | None:
    """The part an email is (None: a whole message). A ``Part`` header that does not read
    as ``i/N`` with 1 <= i <= N <= 100,000, or without ``Part-Of``, is
    :class:`~emailmw.MalformedEmailError`."""
    value = email_.headers.get(PART_HEADER)
    if value is None:
        return None
    of = email_.headers.get(PART_OF_HEADER)
    number, _, total = value.partition("/")
    try:
        found = PartOf(of or "", int(number), int(total))
    except ValueError:
        raise MalformedEmailError(f"Part header {value[:40]!r} is not i/N") from None
    if not of or not 1 <= found.number <= found.total <= _MAX_PARTS:
        raise MalformedEmailError(f"Part header {value[:40]!r} out of range, or no Part-Of")
    return found


def join_parts(parts: Sequence[Email]) -> Email:
    """The message the parts (all of them, in order) were split from: their bodies joined,
    the headers of the first without ``Part``/``Part-Of``/``Part-Digest`` (and
    ``Emailmw-Resent`` when any part carries it: a repeat is flagged), the original
    Message-ID. (:class:`PieceDigest` checks the body against the digest.)"""
    first = parts[0]
    found = part_of(first)
    assert found is not None
    headers = Headers([(k, v) for k, v in first.headers.items() if k.lower() not in _PART_HEADERS])
    resent = next((r for p in parts if (r := p.headers.get(HEADER_RESENT)) is not None), None)
    if resent is not None and headers.get(HEADER_RESENT) is None:
        # a part its sender sent again (its spool, after a crash): the message may be a repeat
        headers = Headers([(HEADER_RESENT, resent), *headers.items()])
    return first.replace(
        body="".join(part.body for part in parts), headers=headers, message_id=found.message_id
    )


T = TypeVar("T")


class Reassembly(Generic[T]):
    """Parts waiting for the rest of their message: a state machine, no I/O, no clock of
    its own (``now`` is given). :meth:`offer` a part with what the caller holds for it;
    when its message is complete, the held items come back in part order. A message still
    incomplete ``timeout`` seconds after its first part is given up by :meth:`expired`
    (the caller reports it and leaves its parts where they are). A part offered twice
    (the same number) is returned as a duplicate. Parts of one message must agree on its
    total and come from one ``origin`` (the identity that signed them): a part that does
    not is refused. A message given up whose ID another origin's message had, joined
    (:meth:`joined`), is ``foreign`` in :meth:`expired`: parts naming a message their
    signer did not send. Not thread-safe (one polling thread)."""

    #: how many joined messages' origins it remembers
    JOINED_KEPT: Final = 4096

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._waiting: dict[tuple[str, str], tuple[float, int, dict[int, T]]] = {}
        self._joined: dict[str, set[str]] = {}  # Message-ID -> origins joined, oldest first

    def __len__(self) -> int:
        return len(self._waiting)

    def offer(self, part: PartOf, origin: str, item: T, now: float) -> tuple[str, list[T]]:
        """``("held", [])``, ``("complete", items in order)``, ``("duplicate", [item])``
        or ``("refused", [item])`` (its total disagrees with the parts before it)."""
        key = (part.message_id, origin)
        _, total, held = self._waiting.setdefault(key, (now, part.total, {}))
        if total != part.total:
            return "refused", [item]
        if part.number in held:
            return "duplicate", [item]
        held[part.number] = item
        if len(held) < total:
            return "held", []
        del self._waiting[key]
        return "complete", [held[number] for number in range(1, total + 1)]

    def held(self, part: PartOf, origin: str) -> T | None:
        """The item held for ``part`` (of ``origin``'s message), if any."""
        found = self._waiting.get((part.message_id, origin))
        return None if found is None else found[2].get(part.number)

    def replace(self, part: PartOf, origin: str, item: T) -> None:
        """Hold ``item`` for ``part`` instead of what was (a copy whose claim was lost:
        the part came again, to this receiver)."""
        found = self._waiting.get((part.message_id, origin))
        if found is not None:
            found[2][part.number] = item

    def joined(self, message_id: str, origin: str) -> None:
        """``origin``'s message ``message_id`` was joined whole (its body the one its
        parts name): parts of that ID from other origins that never complete are foreign."""
        self._joined.setdefault(message_id, set()).add(origin)
        while len(self._joined) > self.JOINED_KEPT:
            del self._joined[next(iter(self._joined))]

    def expired(self, now: float) -> list[tuple[str, int, list[int], list[T], bool]]:
        """Messages given up: (Message-ID, total, the numbers that came, their items,
        whether they are foreign: another origin's message of that ID was joined)."""
        out = []
        for key, (started, total, held) in list(self._waiting.items()):
            if now - started >= self.timeout:
                del self._waiting[key]
                foreign = bool(self._joined.get(key[0], set()) - {key[1]})
                out.append((key[0], total, sorted(held), [held[n] for n in sorted(held)], foreign))
        return out


# ------------------------------------------------------------------------- compressed bodies

ZSTD: Final = "zstd"


def _zstandard() -> Any:
    try:
        import zstandard
    except ImportError:
        raise EmailMWError(
            "a zstd-compressed message needs the zstandard package: pip install "
            "'emailmw[compress]' (or zstandard)"
        ) from None
    return zstandard


def compress_body(text: str) -> str:
    """``text`` compressed with zstd, as base64 text (what ``Body-Encoding: zstd`` says)."""
    raw = _zstandard().ZstdCompressor(level=3).compress(text.encode("utf-8", "surrogatepass"))
    return base64.b64encode(raw).decode("ascii")


def decompress_body(text: str, encoding: str, max_size: int) -> str:
    """The body ``Body-Encoding: encoding`` says ``text`` is; at most ``max_size`` bytes
    (:class:`~emailmw.MalformedEmailError` for one larger, unreadable, or of an encoding
    emailmw does not know; :class:`~emailmw.EmailMWError` when zstandard is missing)."""
    if encoding.strip().lower() != ZSTD:
        raise MalformedEmailError(f"unknown Body-Encoding {encoding[:40]!r}")
    zstandard = _zstandard()
    try:
        raw = base64.b64decode(text, validate=True)
        data = zstandard.ZstdDecompressor().decompress(raw, max_output_size=max_size)
    except (ValueError, zstandard.ZstdError) as exc:
        raise MalformedEmailError(f"zstd body unreadable: {exc}") from exc
    if len(data) > max_size:
        raise MalformedEmailError(f"zstd body of {len(data)} bytes exceeds max-message-size")
    try:
        return str(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise MalformedEmailError("zstd body is not UTF-8") from exc


def grow(pieces: Iterable[str]) -> str:
    """The pieces joined, without holding them all and the result at once: the text grows
    in place as each piece comes (CPython resizes a string only this function holds
    without copying it; a large one by ``mremap``), so joining a message from its parts
    costs the message and one piece, not twice the message."""
    text = ""
    for piece in pieces:
        text += piece
    return text


def _b64_chunks(pieces: Iterable[str]) -> Iterator[bytes]:
    """Base64 text in pieces (line breaks anywhere) decoded piece by piece."""
    rest = ""
    for piece in pieces:
        text = rest + "".join(piece.split())
        cut = len(text) - len(text) % 4
        rest = text[cut:]
        if cut:
            yield base64.b64decode(text[:cut], validate=True)
    if rest:
        yield base64.b64decode(rest, validate=True)


class _Chunks:
    """A ``read(n)`` over byte chunks (what zstandard's streaming reader takes)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        if size < 0:
            size = len(self._buffer)
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out


def decompress_pieces(pieces: Iterable[str], encoding: str, max_size: int) -> str:
    """:func:`decompress_body` of the text ``pieces`` make, streamed: base64 decoded,
    decompressed a MiB at a time and decoded into a text that grows in place (the message
    and a MiB in memory, not three copies of it). At most ``max_size`` bytes; the same
    errors."""
    if encoding.strip().lower() != ZSTD:
        raise MalformedEmailError(f"unknown Body-Encoding {encoding[:40]!r}")
    zstandard = _zstandard()
    reader = zstandard.ZstdDecompressor().read_to_iter(
        _Chunks(_b64_chunks(pieces)), read_size=1 << 16, write_size=1 << 20
    )
    decoder = codecs.getincrementaldecoder("utf-8")()
    text = ""
    size = 0
    try:
        for data in reader:
            size += len(data)
            if size > max_size:
                raise MalformedEmailError(
                    f"zstd body of more than {max_size} bytes exceeds max-message-size"
                )
            text += decoder.decode(data)
        text += decoder.decode(b"", final=True)
    except MalformedEmailError:
        raise
    except UnicodeDecodeError as exc:
        raise MalformedEmailError("zstd body is not UTF-8") from exc
    except (ValueError, zstandard.ZstdError) as exc:
        raise MalformedEmailError(f"zstd body unreadable: {exc}") from exc
    return text
