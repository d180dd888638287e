"""The wire format: RFC 5322 bytes <-> :class:`Email`. Pure functions, no I/O.

Guarantees (tested with hypothesis in ``tests/test_wire.py``):

* ``parse(build(e)) == e`` for every valid email ``e`` except ``bcc``, which is never written
  into the message (Bcc recipients are only SMTP envelope recipients).
* Every email built is one the C++ ``rmw_email`` parser accepts (``docs/interop.md``): the
  ``To``, ``Cc``, ``Bcc``, ``In-Reply-To`` and ``References`` lines are always written, empty
  when there is nothing to say (``Bcc`` always empty).
* Subject and custom header values are written raw when that is safe and as RFC 2047 encoded
  words otherwise (non-ASCII, leading/trailing/multiple white space, ``=?``, long values);
  both decode back to the exact string.
* The body is the message string exactly. A body without CR or NUL whose lines fit in 998
  bytes goes as plain ``7bit``/``8bit`` text, line breaks as CRLF and one CRLF appended (what
  curl's SMTP upload adds to rmw_email's bodies, so its mail parses here and ours there); an
  empty body is nothing at all. Any other body goes as ``base64``, which keeps CRLF, bare CR,
  NUL and long lines (a C++ peer receives that base64 text undecoded).
* Building refuses CR, LF and NUL in any header value (header injection); parsing treats a
  Subject whose encoded words decode to CR or LF as malformed (CVE-2024-6923 class).
* Parsing accepts what building could have written and nothing else: any bytes either parse
  or raise :class:`MalformedEmailError` (or :class:`ForeignEmailError`), never another
  exception (property-tested with arbitrary bytes). Text is decoded only with a character
  set (``charset=`` of the body or of an encoded word) that is one: pseudo-codecs such as
  ``punycode``, ``unicode_escape`` or ``undefined`` are malformed, as is text that decodes to
  lone surrogates, a header value or address that decodes to CR, LF or NUL, a NUL in the
  header block.

Leading dots need nothing here: SMTP clients dot-stuff on the wire and servers unstuff.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import email.header
import email.utils
import functools
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Final

from .errors import (
    ForeignEmailError,
    InvalidHeaderError,
    InvalidNameError,
    MalformedEmailError,
    MessageTooLargeError,
)
from .types import Email, Headers

__all__ = [
    "envelope_recipients",
    "prepare_outgoing",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "HEADER_ACK_PUBLISHER_GID",
    "HEADER_ACK_REQUEST",
    "HEADER_ACK_SEQUENCE_NUMBER",
    "HEADER_ACK_SUBSCRIBER",
    "HEADER_CLIENT_GID",
    "HEADER_DELIVERY_COUNT",
    "HEADER_PUBLISHER_GID",
    "HEADER_PUBLISHER_SEQUENCE_NUMBER",
    "HEADER_REQUEST_SEQUENCE_NUMBER",
    "HEADER_SOURCE_TIMESTAMP",
    "build",
    "check",
    "format_date",
    "is_message_id",
    "make_reply",
    "new_message_id",
    "parse",
    "publisher_sequence",
    "parse_head",
    "parse_header_block",
    "split_message",
    "validate_header",
    "validate_name",
]

DEFAULT_MAX_MESSAGE_SIZE: Final = 10 * 1024 * 1024

# Wire-compatible with rmw_email's `email` package (no X- prefix, RFC 6648).
HEADER_SOURCE_TIMESTAMP: Final = "Source-Timestamp"
HEADER_PUBLISHER_GID: Final = "Publisher-GID"
HEADER_CLIENT_GID: Final = "Client-GID"
HEADER_REQUEST_SEQUENCE_NUMBER: Final = "Request-Sequence-Number"
# New in emailmw: per-publisher sequence number, from 0, to detect loss and reordering.
HEADER_PUBLISHER_SEQUENCE_NUMBER: Final = "Publisher-Sequence-Number"
# New in emailmw: the ROS type of a typed message (``std_msgs/msg/String``).
HEADER_MESSAGE_TYPE: Final = "Message-Type"
#: on a published message: the publisher asks for an acknowledgement
HEADER_ACK_REQUEST: Final = "Ack-Request"
#: on an acknowledgement: whose message it acknowledges, who acknowledges, how often it was
#: handed out
HEADER_ACK_PUBLISHER_GID: Final = "Ack-Publisher-GID"
HEADER_ACK_SEQUENCE_NUMBER: Final = "Ack-Sequence-Number"
#: set (unsigned, on the way) on an email a sender sends again not knowing whether the server
#: took it before (its spool, after a crash): a receiver flags it ``redelivered``, so that a
#: second copy is never a silent repeat
HEADER_RESENT: Final = "Emailmw-Resent"
HEADER_ACK_SUBSCRIBER: Final = "Ack-Subscriber"
HEADER_DELIVERY_COUNT: Final = "Delivery-Count"

# Headers with a field of their own in Email, or produced by the MIME layer here.
_FIELD_HEADERS: Final = frozenset(
    {
        "from",
        "to",
        "cc",
        "bcc",
        "reply-to",
        "subject",
        "message-id",
        "in-reply-to",
        "references",
    }
)
_MIME_HEADERS: Final = frozenset({"mime-version", "content-type", "content-transfer-encoding"})
_RESERVED_HEADERS: Final = _FIELD_HEADERS | _MIME_HEADERS

_HEADER_NAME_RE: Final = re.compile(r"[!-9;-~]+")
_MAX_RAW_HEADER_VALUE: Final = 900
_MAX_LINE_BYTES: Final = 998
# Raw bytes per encoded word: 45 bytes -> 60 base64 chars -> a 72-char "=?utf-8?b?...?=".
_WORD_BYTES: Final = 45
_ENCODED_WORD_RE: Final = re.compile(r"=\?([^?\s]+)\?([bBqQ])\?([^?\s]*)\?=")
_ONLY_ENCODED_WORDS_RE: Final = re.compile(
    r"=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=(?:[ \t]+=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=)*"
)
_MSGID_RE: Final = re.compile(r"<[^<>\s]+>")
# b"\r" as the byte's value: ``_CR in data`` is one memchr, ``b"\r" in data`` a general
# substring search
_CR: Final = 0x0D
# One unfolded header line: the name, then the value without surrounding blanks, possibly
# empty ("Cc: "). A non-empty value that ends in a blank does not match (the slower path
# strips it), so the value is the rest of the line without backtracking to its last character.
_HEADER_LINE_RE: Final = re.compile(r"(?m)^([!-9;-~]+):[ \t]*((?:[^\n]*(?<![ \t]))?)$")
# What a 7bit/8bit body cannot carry (RFC 2045 2.7, 2.8): NUL, and CR other than in CRLF.
# Every CR is in this set: a body's CRLF and LF must stay apart, so a CR forces base64.
_UNSAFE_BODY_CHARS_RE: Final = re.compile(r"[\x00\r]")
_UNSAFE_RAW_VALUE_RE: Final = re.compile(r"[^\x20-\x7e]|=\?|  |^ | $")


# ----------------------------------------------------------------------------- names, headers


def validate_name(name: str, what: str = "name") -> str:
    """Check a topic or service name; return it unchanged.

    Raises :class:`InvalidNameError` if it is not a non-empty ``str`` free of CR, LF and NUL.
    """
    if not isinstance(name, str):
        raise InvalidNameError(f"{what} must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidNameError(f"{what} must not be empty")
    if "\r" in name or "\n" in name or "\x00" in name:
        raise InvalidNameError(f"{what} must not contain CR, LF or NUL: {name!r}")
    if _has_surrogates(name):
        raise InvalidNameError(f"{what} is not valid Unicode (lone surrogate): {name!r}")
    return name


@functools.lru_cache(maxsize=1024)
def _header_name(name: str, allow_reserved: bool) -> str | None:
    """Why ``name`` cannot be a header's name (None: it can). Names are few: remembered."""
    if not _HEADER_NAME_RE.fullmatch(name):
        return f"invalid header name: {name!r}"
    if not allow_reserved and name.lower() in _RESERVED_HEADERS:
        return f"header {name!r} is set by emailmw and cannot be given here"
    return None


def validate_header(name: str, value: str, *, allow_reserved: bool = False) -> None:
    """Check one custom header; raise :class:`InvalidHeaderError` if it cannot go on the wire."""
    if not isinstance(name, str):
        raise InvalidHeaderError(f"invalid header name: {name!r}")
    wrong = _header_name(name, allow_reserved)
    if wrong is not None:
        raise InvalidHeaderError(wrong)
    if not isinstance(value, str):
        raise InvalidHeaderError(
            f"header {name!r}: value must be a str, got {type(value).__name__}"
        )
    if "\r" in value or "\n" in value or "\x00" in value:
        raise InvalidHeaderError(f"header {name!r}: value must not contain CR, LF or NUL")
    if _has_surrogates(value):
        raise InvalidHeaderError(f"header {name!r}: value is not valid Unicode")


def _has_surrogates(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def new_message_id(address: str = "") -> str:
    """A new globally unique ``<unique@domain>``, the domain taken from ``address``."""
    domain = address.rpartition("@")[2].strip(" <>") if "@" in address else ""
    if not domain or not _HEADER_NAME_RE.fullmatch(domain):
        domain = "emailmw.invalid"
    return f"<{uuid.uuid4().hex}@{domain}>"


def format_date(timestamp_ns: int) -> str:
    """RFC 5322 ``Date:`` value for a time in ns since the epoch."""
    return email.utils.formatdate(timestamp_ns / 1e9, usegmt=True)


def make_reply(
    original: Email,
    body: str,
    *,
    from_: str = "",
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
) -> Email:
    """The reply to ``original``: same Subject, addressed to its Reply-To (else its From).

    ``In-Reply-To`` is the original's Message-ID and ``References`` its References plus that
    Message-ID (RFC 5322 section 3.6.4), which for a request is just its Message-ID.
    """
    if not original.message_id:
        raise InvalidHeaderError("cannot reply to an email that has no Message-ID")
    to = original.reply_to or ((original.from_,) if original.from_ else ())
    if not to:
        raise InvalidHeaderError(
            f"cannot reply to {original.message_id}: it has neither Reply-To nor From"
        )
    return Email(
        subject=original.subject,
        body=body,
        from_=from_,
        to=to,
        headers=Headers(headers),
        in_reply_to=original.message_id,
        references=(*original.references, original.message_id),
    )


# ----------------------------------------------------------------------------- encoding


def prepare_outgoing(email_: Email, from_: str) -> Email:
    """Fill what a real email needs and the caller may have left out: From, Message-ID, Date."""
    sender = email_.from_ or from_
    headers = email_.headers
    if "Date" not in headers:
        headers = headers.merged({"Date": format_date(time.time_ns())})
    return email_.replace(
        from_=sender, headers=headers, message_id=email_.message_id or new_message_id(sender)
    )


def envelope_recipients(email_: Email) -> list[str]:
    """The SMTP RCPT TO addresses: To, Cc and Bcc without display names, deduplicated."""
    seen: dict[str, None] = {}
    for value in (*email_.to, *email_.cc, *email_.bcc):
        address = email.utils.parseaddr(value)[1] or value
        seen.setdefault(address, None)
    return list(seen)


def _encode_words(value: str) -> str:
    """RFC 2047 base64 encoded words, folded; never splits a character across words."""
    words: list[str] = []
    chunk = bytearray()
    for char in value:
        encoded = char.encode("utf-8")
        if len(chunk) + len(encoded) > _WORD_BYTES:
            words.append(base64.b64encode(chunk).decode("ascii"))
            chunk = bytearray()
        chunk += encoded
    if chunk or not words:
        words.append(base64.b64encode(chunk).decode("ascii"))
    return "\r\n ".join(f"=?utf-8?b?{word}?=" for word in words)


def _header_value(value: str) -> str:
    if len(value) > _MAX_RAW_HEADER_VALUE or _UNSAFE_RAW_VALUE_RE.search(value):
        return _encode_words(value)
    return value


def _address_list(name: str, addresses: tuple[str, ...]) -> str:
    rendered = []
    for address in addresses:
        validate_header(name, address, allow_reserved=True)
        if address.isascii():
            rendered.append(address)
        else:
            display, addr = email.utils.parseaddr(address)
            rendered.append(email.utils.formataddr((display, addr), charset="utf-8"))
    return ", ".join(rendered)


def _encode_body(body: str, max_size: int) -> tuple[str, bytes]:
    try:
        data = body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidHeaderError(f"body is not valid Unicode: {exc}") from exc
    if len(data) > max_size:
        raise MessageTooLargeError(
            f"message body is {len(data)} bytes, larger than max-message-size ({max_size})"
        )
    if not data:
        return "7bit", b""  # nothing after the blank line, as rmw_email writes an empty body
    plain = not _UNSAFE_BODY_CHARS_RE.search(body) and (
        len(data) <= _MAX_LINE_BYTES
        or all(len(line) <= _MAX_LINE_BYTES for line in data.split(b"\n"))
    )
    if plain:
        return ("7bit" if body.isascii() else "8bit"), data.replace(b"\n", b"\r\n") + b"\r\n"
    return "base64", base64.encodebytes(data).replace(b"\n", b"\r\n")


def build(email_: Email, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes:
    """Serialize ``email_`` to RFC 5322 bytes (CRLF line endings). Bcc is not written.

    Raises :class:`InvalidNameError` for a bad Subject, :class:`InvalidHeaderError` for an
    unsafe header and :class:`MessageTooLargeError` for a body over ``max_size`` bytes.
    """
    validate_name(email_.subject, "subject")
    lines: list[str] = []
    if email_.from_:
        lines.append(f"From: {_address_list('From', (email_.from_,))}")
    # To, Cc, Bcc, In-Reply-To and References are written even when empty ("Cc: "): the C++
    # rmw_email parser accepts an email only when all of them are there (docs/interop.md).
    # Bcc is never given a value: its recipients are SMTP envelope recipients only.
    lines.append(f"To: {_address_list('To', email_.to)}")
    lines.append(f"Cc: {_address_list('Cc', email_.cc)}")
    lines.append("Bcc: ")
    if email_.reply_to:
        lines.append(f"Reply-To: {_address_list('Reply-To', email_.reply_to)}")
    lines.append(f"Subject: {_header_value(email_.subject)}")
    if email_.message_id:
        _check_msgid("Message-ID", email_.message_id)
        lines.append(f"Message-ID: {email_.message_id}")
    if email_.in_reply_to:
        _check_msgid("In-Reply-To", email_.in_reply_to)
    lines.append(f"In-Reply-To: {email_.in_reply_to or ''}")
    for msgid in email_.references:
        _check_msgid("References", msgid)
    lines.append("References: " + "\r\n ".join(email_.references))
    for name, value in email_.headers.items():
        validate_header(name, value)
        lines.append(f"{name}: {_header_value(value)}")
    cte, payload = _encode_body(email_.body, max_size)
    lines.append("MIME-Version: 1.0")
    lines.append("Content-Type: text/plain; charset=utf-8")
    lines.append(f"Content-Transfer-Encoding: {cte}")
    head = "\r\n".join(lines).encode("utf-8") + b"\r\n\r\n"
    return head + payload


def check(email_: Email, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
    """Raise what :func:`build` would raise for ``email_``, without serializing it.

    Cheap enough for every message on the intraprocess path.
    """
    _check_envelope(email_.subject, email_.from_, email_.to, email_.cc, email_.bcc, email_.reply_to)
    for name, msgid in (("Message-ID", email_.message_id), ("In-Reply-To", email_.in_reply_to)):
        if msgid:
            _check_msgid(name, msgid)
    for msgid in email_.references:
        _check_msgid("References", msgid)
    for name, value in email_.headers.items():
        validate_header(name, value)
    body = email_.body
    if len(body) * 4 > max_size or _has_surrogates(body):
        _encode_body(body, max_size)


@functools.lru_cache(maxsize=512)
def _check_envelope(
    subject: str,
    from_: str,
    to: tuple[str, ...],
    cc: tuple[str, ...],
    bcc: tuple[str, ...],
    reply_to: tuple[str, ...],
) -> None:
    """The subject and the addresses, the same for every message of an entity: checked
    once each (a failed check is not remembered: it raises every time)."""
    validate_name(subject, "subject")
    for name, addresses in (
        ("From", (from_,)),
        ("To", to),
        ("Cc", cc),
        ("Bcc", bcc),
        ("Reply-To", reply_to),
    ):
        for address in addresses:
            validate_header(name, address, allow_reserved=True)


def is_message_id(value: str | None) -> bool:
    """True when ``value`` is a Message-ID the builder accepts (``<id@domain>``)."""
    return value is not None and _MSGID_RE.fullmatch(value) is not None


def _check_msgid(name: str, msgid: str) -> None:
    if not _MSGID_RE.fullmatch(msgid):
        raise InvalidHeaderError(f"{name} must look like <id@domain>: {msgid!r}")


# ----------------------------------------------------------------------------- parsing


def split_message(raw: bytes) -> tuple[bytes, bytes]:
    """Split raw message bytes into (header block, body) at the first empty line."""
    block, blank, body = raw.partition(b"\n\n")
    if blank and _CR not in block:
        return block, body  # LF line endings (stored mail): one search
    # an empty CRLF line first: one that starts before the first LF LF (they may overlap)
    crlf = raw.find(b"\r\n\r\n", 0, len(block) + 3 if blank else len(raw))
    if crlf != -1:
        return raw[:crlf], raw[crlf + 4 :]
    if blank:
        return block, body
    if raw.startswith((b"\r\n", b"\n")):
        return b"", raw.split(b"\n", 1)[1]
    return raw, b""


def _decode_header_bytes(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def parse_header_block(block: bytes) -> list[tuple[str, str]]:
    """Unfold and split a header block into ``(name, raw value)`` pairs, in order.

    Values are stripped of surrounding white space but not RFC 2047-decoded. A leading mbox
    ``From `` envelope line is skipped. Raises :class:`MalformedEmailError` on a line that
    is neither a header nor a continuation.

    The common case (a UTF-8 block without empty lines) is handled on the decoded text in
    one pass; anything else takes the line-by-line path, which defines the result.
    """
    if block.startswith(b"From "):
        newline = block.find(b"\n")
        block = block[newline + 1 :] if newline != -1 else b""
    lf_block = block
    if _CR in block:
        lf_block = block.replace(b"\r\n", b"\n")
        if lf_block.endswith(b"\r"):
            lf_block = lf_block[:-1]
    try:
        text = lf_block.decode("utf-8")
    except UnicodeDecodeError:
        return _parse_header_lines(block)
    pairs: list[tuple[str, str]] = _HEADER_LINE_RE.findall(text)
    if len(pairs) == text.count("\n") + 1:
        return pairs  # every line a plain "Name: value" line (the usual case)
    if text[:1] in (" ", "\t", "\n") or "\n\n" in text or text.endswith("\n") or "\r" in text:
        return _parse_header_lines(block)
    headers: list[tuple[str, str]] = []
    name: str | None = None
    value = ""
    for line in text.split("\n") if text else ():
        if line[:1] in (" ", "\t"):
            value += line  # a continuation: never first, the check above saw to that
            continue
        if name is not None:
            headers.append((name, value.strip(" \t")))
        raw_name, colon, value = line.partition(":")
        if not colon or not raw_name:
            raise MalformedEmailError(f"not a header line: {line[:60].encode()!r}")
        if not raw_name.isascii():
            raw_name = raw_name.encode().decode("ascii", "replace")
        name = raw_name.strip()
    if name is not None:
        headers.append((name, value.strip(" \t")))
    return headers


def _parse_header_lines(block: bytes) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    lines = block.split(b"\n")
    name: str | None = None
    parts: list[bytes] = []
    for raw_line in lines:
        line = raw_line[:-1] if raw_line.endswith(b"\r") else raw_line
        if line[:1] in (b" ", b"\t"):
            if name is None:
                raise MalformedEmailError("header block starts with a continuation line")
            parts.append(line)
            continue
        if name is not None:
            headers.append((name, _decode_header_bytes(b"".join(parts)).strip(" \t")))
        if not line:
            name = None
            continue
        colon = line.find(b":")
        if colon <= 0:
            raise MalformedEmailError(f"not a header line: {line[:60]!r}")
        name = line[:colon].decode("ascii", "replace").strip()
        parts = [line[colon + 1 :]]
    if name is not None:
        headers.append((name, _decode_header_bytes(b"".join(parts)).strip(" \t")))
    return headers


def _decode_words(value: str) -> str:
    """Decode RFC 2047 encoded words; exact for what :func:`_encode_words` wrote."""
    if "=?" not in value:
        return value
    if _ONLY_ENCODED_WORDS_RE.fullmatch(value):
        out: list[str] = []
        charset = None
        pending = bytearray()
        for match in _ENCODED_WORD_RE.finditer(value):
            word_charset = match.group(1).lower().partition("*")[0]
            if charset is not None and word_charset != charset:
                out.append(_bytes_to_str(bytes(pending), charset))
                pending = bytearray()
            charset = word_charset
            pending += _decode_word_payload(match.group(2), match.group(3))
        out.append(_bytes_to_str(bytes(pending), charset or "utf-8"))
        return "".join(out)
    try:
        decoded = str(email.header.make_header(email.header.decode_header(value)))
    except Exception:  # noqa: BLE001 - the stdlib's header decoding raises many kinds
        return value  # words mixed with text that do not decode: the value as it stands
    return value if _has_surrogates(decoded) else decoded


def _decode_word_payload(encoding: str, payload: str) -> bytes:
    try:
        if encoding in "bB":
            return base64.b64decode(payload + "=" * (-len(payload) % 4))
        return binascii.a2b_qp(payload.encode("ascii"), header=True)
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise MalformedEmailError(f"bad encoded word: {payload[:40]!r}") from exc


# Codecs Python knows that are not character sets a mail can declare: decoding with them
# either fails in ways a charset cannot (UnicodeError from 'undefined') or turns text into
# something else (escape sequences into lone surrogates, punycode's quadratic decoder).
_NOT_CHARSETS: Final = frozenset(
    {"punycode", "idna", "unicode-escape", "raw-unicode-escape", "undefined", "charmap"}
)


@functools.lru_cache(maxsize=256)
def _codec(charset: str) -> str:
    """The codec for a declared charset; :class:`MalformedEmailError` for one that is not a
    character set (unknown, a bytes transform such as ``base64``, a pseudo-codec)."""
    try:
        info = codecs.lookup(charset)
    except (LookupError, ValueError, TypeError) as exc:  # ValueError: "utf\0"
        raise MalformedEmailError(f"unknown charset {charset[:40]!r}") from exc
    if not info._is_text_encoding or info.name in _NOT_CHARSETS:
        raise MalformedEmailError(f"charset {charset[:40]!r} is not a character set")
    return info.name


def _decode_text(data: bytes, charset: str, what: str) -> str:
    """``data`` decoded with the declared ``charset``, as text emailmw could have sent:
    :class:`MalformedEmailError` when the charset is not one or the bytes are not valid in it."""
    codec = _codec(charset)
    try:
        text = data.decode(codec)
    except (UnicodeError, ValueError, TypeError) as exc:
        raise MalformedEmailError(f"{what} is not valid {charset[:40]}") from exc
    if codec != "utf-8" and not text.isascii() and _has_surrogates(text):
        raise MalformedEmailError(f"{what} decodes to lone surrogates ({charset[:40]})")
    return text


def _bytes_to_str(data: bytes, charset: str) -> str:
    return _decode_text(data, charset, "encoded word")


@functools.lru_cache(maxsize=1024)
def _addresses(value: str) -> tuple[str, ...]:
    """An address header's addresses; :class:`MalformedEmailError` for one that the builder
    would refuse (a display name that decodes to CR, LF or NUL, or one the standard library
    cannot read)."""
    if value.isascii() and '"' not in value and "(" not in value and "=?" not in value:
        return tuple(part.strip() for part in value.split(",") if part.strip())
    try:
        pairs = email.utils.getaddresses([value])
        found = tuple(
            email.utils.formataddr((_decode_words(display), addr)) if display else addr
            for display, addr in pairs
            if addr or display
        )
    except MalformedEmailError:
        raise
    except Exception as exc:
        raise MalformedEmailError(f"unreadable address list: {value[:60]!r}") from exc
    for address in found:
        if "\r" in address or "\n" in address or "\x00" in address or _has_surrogates(address):
            raise MalformedEmailError(f"address decodes to CR, LF or NUL: {address[:60]!r}")
    return found


@functools.lru_cache(maxsize=256)
def _content_type(value: str) -> tuple[str, str]:
    main, _, params = value.partition(";")
    charset = "utf-8"
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip('"').lower() or "utf-8"
    return main.strip().lower(), charset


def _decode_body(payload: bytes, cte: str, charset: str, max_size: int) -> str:
    if cte == "base64":
        try:
            data = base64.b64decode(payload, validate=False)
        except (binascii.Error, ValueError) as exc:
            raise MalformedEmailError("body is not valid base64") from exc
    else:
        if cte == "quoted-printable":
            payload = binascii.a2b_qp(payload)
        elif cte not in ("", "7bit", "8bit", "binary"):
            raise ForeignEmailError(f"unsupported Content-Transfer-Encoding: {cte}")
        data = payload.replace(b"\r\n", b"\n")
        if data.endswith(b"\n"):
            data = data[:-1]
    if len(data) > max_size:
        raise MalformedEmailError(f"body of {len(data)} bytes exceeds max-message-size")
    if charset in ("us-ascii", "ascii"):
        charset = "utf-8"
    return _decode_text(data, charset, "body")


def parse_head(raw: bytes) -> Email:
    """The header block of RFC 5322 bytes, read and checked exactly as :func:`parse` reads
    and checks it (the same errors for the same headers), as an :class:`Email` whose
    ``body`` is left unread (``""``): the body is neither decoded nor checked. For readers
    that need no body (the archive pipeline reads millions of stored emails)."""
    head = _parse_head(raw)[0]
    return Email(head[0], "", *head[1:])


#: an email's header fields as :func:`_parse_head` reads them: :class:`Email`'s fields
#: but ``body``, in their order (``Email(head[0], body, *head[1:])``)
_HeadFields = tuple[
    str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...], Headers,
    str | None, str | None, tuple[str, ...],
]  # fmt: skip


def _parse_head(raw: bytes) -> tuple[_HeadFields, bytes, str, str]:
    """(the header fields, undecoded body, content-transfer-encoding, charset)."""
    block, payload = split_message(raw)
    if 0 in block:  # one memchr; the builder never writes a NUL into a header
        raise MalformedEmailError("NUL byte in the header block")
    pairs = parse_header_block(block)
    fields = {pair[0].lower(): pair for pair in pairs}
    if len(fields) != len(pairs):  # a repeated header: the first occurrence wins
        fields = {}
        for pair in pairs:
            fields.setdefault(pair[0].lower(), pair)
    take = fields.pop
    subject: str | None = None
    if (item := take("subject", None)) is not None:
        subject = _decode_words(item[1])
    from_ = ", ".join(_addresses(item[1])) if (item := take("from", None)) else ""
    to = _addresses(item[1]) if (item := take("to", None)) else ()
    cc = _addresses(item[1]) if (item := take("cc", None)) else ()
    bcc = _addresses(item[1]) if (item := take("bcc", None)) else ()
    reply_to = _addresses(item[1]) if (item := take("reply-to", None)) else ()
    message_id = (item[1] or None) if (item := take("message-id", None)) else None
    in_reply_to = None
    if item := take("in-reply-to", None):
        found = _MSGID_RE.search(item[1])
        in_reply_to = found.group(0) if found else (item[1] or None)
    references = tuple(_MSGID_RE.findall(item[1])) if (item := take("references", None)) else ()
    content_type, charset = "text/plain", "utf-8"
    if item := take("content-type", None):
        content_type, charset = _content_type(item[1])
    cte = item[1].strip().lower() if (item := take("content-transfer-encoding", None)) else ""
    take("mime-version", None)
    for lower, (name, value) in fields.items():  # what is left: the extra headers
        if "=?" in value:
            decoded = _decode_words(value)
            if "\r" in decoded or "\n" in decoded or "\x00" in decoded:
                raise MalformedEmailError(f"header {name[:40]!r} decodes to CR, LF or NUL")
            fields[lower] = (name, decoded)
    if subject is None:
        raise ForeignEmailError("no Subject header")
    if "\r" in subject or "\n" in subject or "\x00" in subject:
        raise MalformedEmailError("Subject decodes to CR, LF or NUL (header injection)")
    if not subject.isascii() and _has_surrogates(subject):
        raise MalformedEmailError("Subject decodes to lone surrogates")
    if content_type != "text/plain":
        raise ForeignEmailError(f"not a text/plain email: {content_type}")
    head: _HeadFields = (
        subject, from_, to, cc, bcc, reply_to, Headers.from_folded(fields), message_id,
        in_reply_to, references,
    )  # fmt: skip
    return head, payload, cte, charset


def parse(raw: bytes, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> Email:
    """Parse RFC 5322 bytes (CRLF or LF line endings) into an :class:`Email`.

    Raises :class:`ForeignEmailError` for mail emailmw does not carry (multipart, non-text
    bodies, no Subject) and :class:`MalformedEmailError` for bytes that are not a valid email
    or that try header injection through encoded words.
    """
    head, payload, cte, charset = _parse_head(raw)
    return Email(head[0], _decode_body(payload, cte, charset, max_size), *head[1:])


def publisher_sequence(gid: str | None, seq: str | None) -> tuple[str, int]:
    """A published message's publisher and sequence number from its ``Publisher-GID`` and
    ``Publisher-Sequence-Number`` values: ``('', -1)`` when either is absent or not what a
    publisher writes (a GID of at most 100 characters; a number of at most 19 digits). The
    one rule of the readers that order or batch by publisher (a stateful group, the
    outbox's batch header). Pure."""
    gid, seq = (gid or "").strip(), (seq or "").strip()
    if not gid or len(gid) > 100 or not seq.isdigit() or len(seq) > 19:
        return "", -1
    return gid, int(seq)
