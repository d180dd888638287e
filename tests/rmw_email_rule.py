"""The C++ ``rmw_email`` receiver's acceptance rule, stated in Python.

A transcription of ``email/src/email/response_utils.cpp`` (christophebedard/rmw_email):
what its ``get_email_data_from_response`` does with the bytes an IMAP FETCH of
``INBOX/;UID=n`` returns. ``std::regex`` is ECMAScript, whose ``.`` matches neither LF nor
CR: ``[^\\r\\n]`` below. Nothing is decoded: no RFC 2047 word, no transfer encoding.

* Headers: every line (``getline`` splits at LF, the body's lines too) searched, unanchored,
  for ``([a-zA-Z\\-]+): (.*)\\r``; names are case-sensitive, the first occurrence wins
  (``std::map::insert``).
* Accepted only when ``From``, ``In-Reply-To``, ``Message-ID``, ``Subject``, ``To``, ``Cc``
  and ``Bcc`` are all there (an empty value is fine, the blank after the colon is needed)
  and an empty line separates the header block from a body.
* The body is everything after the first empty line, up to a CR that is not part of CRLF.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADER = re.compile(rb"([a-zA-Z\-]+): ([^\r\n]*)\r")
_BODY = re.compile(rb"(?:\r?\n){2}((?:[^\r\n]*(?:\r?\n)?)*)")
REQUIRED = ("From", "In-Reply-To", "Message-ID", "Subject", "To", "Cc", "Bcc")


@dataclass(frozen=True)
class CppEmail:
    """What the C++ side holds after parsing: raw header values and body bytes."""

    subject: bytes
    body: bytes
    message_id: bytes
    in_reply_to: bytes
    from_: bytes
    headers: dict[bytes, bytes]


def cpp_headers(raw: bytes) -> dict[bytes, bytes]:
    headers: dict[bytes, bytes] = {}
    for line in raw.split(b"\n"):
        found = _HEADER.search(line)
        if found:
            headers.setdefault(found.group(1), found.group(2))
    return headers


def missing_headers(raw: bytes) -> list[str]:
    """The required headers the C++ parser would not find in ``raw``."""
    headers = cpp_headers(raw)
    return [name for name in REQUIRED if name.encode() not in headers]


def cpp_parse(raw: bytes) -> CppEmail | None:
    """What the C++ receiver makes of ``raw``; None where it rejects the email (and, as its
    receiver does, would fetch the same UID again and again)."""
    headers = cpp_headers(raw)
    body = _BODY.search(raw)
    if missing_headers(raw) or body is None:
        return None
    return CppEmail(
        subject=headers[b"Subject"],
        body=body.group(1),
        message_id=headers[b"Message-ID"],
        in_reply_to=headers[b"In-Reply-To"],
        from_=headers[b"From"],
        headers=headers,
    )


def cpp_payload(
    subject: str, body: str, to: str, headers: dict[str, str], reply_ref: str | None = None
) -> bytes:
    """What ``payload_utils.cpp``'s ``build_payload`` writes (curl then adds the CRLF that
    ends a body not already ending in one)."""
    extra = "".join(f"{key}: {value}\r\n" for key, value in sorted(headers.items()))
    ref = reply_ref or ""
    data = (
        f"{extra}In-Reply-To: {ref}\r\nReferences: {ref}\r\n"
        f"To: {to}\r\nCc: \r\nBcc: \r\nSubject: {subject}\r\n\r\n{body}"
    ).encode()
    return data if data.endswith(b"\r\n") else data + b"\r\n"
