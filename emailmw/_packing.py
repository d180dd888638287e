"""Several messages in one email (a batch): pure functions, no I/O.

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

import re
import uuid
from collections.abc import Sequence
from typing import Final

from ._exceptions import MalformedEmailError
from ._wire import format_date, parse_header_block, split_message

__all__ = ["BATCH_COUNT_HEADER", "batch_parts", "build_batch", "is_batch"]

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
) -> bytes:
    """The batch email carrying ``raws`` (each an email as :func:`~emailmw._wire.build`
    makes it, CRLF line endings), from ``from_`` to ``to`` (the envelope recipients every
    part shares). Its Subject names the parts' ``subjects`` (each once, printable ASCII
    ones, up to 800 characters), so that a search of the mailbox by Subject
    (``history``: ``transient_local``, the graph) finds the batch, and unpacks it."""
    if not raws:
        raise ValueError("a batch needs at least one email")
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
        "\r\n"
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
    block = raw[: raw.find(b"\n\n") if b"\n\n" in raw[:65536] else 65536]
    return b"\nbatch-count:" in block.lower() or block.lower().startswith(b"batch-count:")


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
