"""What an email carries: the one stage below every consumer of mail.

An email carries one message, the messages of a batch (``_packing``: a digest of the exact
emails), or a part of one message (``Part``/``Part-Of``), its body possibly compressed
(``Body-Encoding``) or encrypted. :func:`unpack` turns a stored email's bytes into the
messages it carries, each a :class:`Carried` with its place in its email, its exact bytes,
its parsed form and, when it cannot be used, its poison verdict and reason. The receiver,
every group member, the pipeline's landing, ``bag export`` and the command line read mail
through it, so that each sees the same messages in the same order with the same verdicts.
Part joining (:class:`~emailmw._core.packing.Reassembly`) and decompression
(:func:`decode_body`) follow, per message.

Pure: bytes in, objects out, no I/O, no logging (the caller logs, rate-limited, with what
it knows of where the email is). Total: any bytes unpack, never raise.

Verdicts. A plain email that is not emailmw's (``foreign``) is left alone; anything else
that cannot be used is ``poison``: quarantined by receivers, never deleted. A batch
carries only emailmw's messages, so a part of it that does not parse (cut inside its
headers, not emailmw's, a bad charset) is poison too, and stops none of the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .errors import ForeignEmailError, MalformedEmailError
from .packing import BATCH_COUNT_HEADER, batch_parts, decompress_body
from .types import Email, Headers
from .wire import DEFAULT_MAX_MESSAGE_SIZE, parse, parse_header_block, split_message

__all__ = [
    "Carried",
    "decode_body",
    "is_batch_head",
    "outer_fields",
    "split",
    "unpack",
]

_OUTER_MOST: Final = 65536


@dataclass(frozen=True, slots=True)
class Carried:
    """One message as its email carries it.

    ``index``: its place in the email (0-based); ``count``: how many messages the email
    carries when it is a batch (0: the email is the message itself); ``raw``: its exact
    bytes (a batch part's, else the email's); ``email``: parsed (None: unusable);
    ``verdict``: ``"ok"``, ``"foreign"`` (a plain email that is not emailmw's: left alone)
    or ``"poison"`` (quarantined, never deleted); ``reason``: why, in one line."""

    index: int
    count: int
    raw: bytes
    email: Email | None
    verdict: str = "ok"
    reason: str = ""

    @property
    def usable(self) -> bool:
        return self.email is not None

    @property
    def in_batch(self) -> bool:
        return self.count > 0

    def label(self) -> str:
        """How log lines name it after its email: ``" (part 3/50)"``, or nothing."""
        return f" (part {self.index + 1}/{self.count})" if self.count else ""


def _one(raw: bytes, index: int, count: int, max_size: int) -> Carried:
    try:
        email = parse(raw, max_size=max_size)
    except ForeignEmailError as exc:
        if count:  # a batch carries emailmw's only: what does not read as one is broken
            return Carried(index, count, raw, None, "poison", f"unreadable part: {exc}")
        return Carried(index, count, raw, None, "foreign", str(exc))
    except MalformedEmailError as exc:
        return Carried(index, count, raw, None, "poison", str(exc))
    except Exception as exc:  # noqa: BLE001 - no email may stop a receiver
        return Carried(index, count, raw, None, "poison", f"unparseable (a bug): {exc!r}")
    return Carried(index, count, raw, email)


def split(raw: bytes) -> tuple[list[bytes] | None, str]:
    """The exact bytes of the messages ``raw`` carries when it is a batch email (None when
    it is one message), and, when it says it is a batch and cannot be read as one, why
    (``([], reason)``). Never raises. :func:`unpack` parses what this gives; a consumer that
    reads only headers (the pipeline's landing) parses them its own way."""
    try:
        return batch_parts(raw), ""
    except MalformedEmailError as exc:
        return [], f"malformed batch: {exc}"
    except Exception as exc:  # noqa: BLE001 - no email may stop a receiver
        return [], f"unreadable batch (a bug): {exc!r}"


def unpack(raw: bytes, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> list[Carried]:
    """The messages ``raw`` carries, in order (at least one). Never raises: a batch that
    cannot be read as one is one poison item (``count`` 0); a part of a batch that cannot
    be parsed is one poison item among the others."""
    parts, reason = split(raw)
    if parts is None:
        return [_one(raw, 0, 0, max_size)]
    if reason:
        return [Carried(0, 0, raw, None, "poison", reason)]
    return [_one(part, index, len(parts), max_size) for index, part in enumerate(parts)]


def outer_fields(raw: bytes) -> dict[str, str]:
    """The header fields of the stored email itself (a batch's own, not its parts'), by
    lower-case name, each its **first** occurrence (the topmost ``Received:``: the
    delivery; the lower ones are earlier hops, down to the submission). Read leniently
    from at most the first 64 KiB; ``{}`` when there is no header block."""
    try:
        block, _ = split_message(raw[: _OUTER_MOST + 4] if len(raw) > _OUTER_MOST else raw)
        fields = parse_header_block(block)
    except MalformedEmailError:
        return {}
    out: dict[str, str] = {}
    for name, value in fields:
        out.setdefault(name.lower(), value)
    return out


def is_batch_head(fields: dict[str, str]) -> bool:
    """Whether header fields (:func:`outer_fields`) are a batch email's."""
    return BATCH_COUNT_HEADER.lower() in fields


def decode_body(email: Email, max_size: int) -> Email:
    """``email`` with its body as ``Body-Encoding`` says it is (and that header gone);
    ``email`` itself without one. :class:`~emailmw.MalformedEmailError` for a body that
    cannot be read (poison); :class:`~emailmw.EmailMWError` when this process lacks what
    reads it (another may: leave it)."""
    encoding = email.headers.get("Body-Encoding")
    if encoding is None:
        return email
    body = decompress_body(email.body, encoding, max_size)
    headers = Headers([(k, v) for k, v in email.headers.items() if k.lower() != "body-encoding"])
    return email.replace(body=body, headers=headers)
