"""emailmw's outgoing mail against the C++ rmw_email parser's acceptance rule
(``tests/rmw_email_rule.py``), and the C++ sender's mail against emailmw's parser.
What crosses and what does not is in ``docs/interop.md``."""

from __future__ import annotations

import pytest

from emailmw._core.protocol import Recipients, publish_email, request_email, response_email
from emailmw._core.types import Gid
from emailmw._core.wire import build, new_message_id, parse, prepare_outgoing

from .rmw_email_rule import cpp_parse, cpp_payload, missing_headers

NODE = "node@example.test"
PEER = "cpp@example.test"
BODIES = {
    "empty": "",
    "one line": "data: hello",
    "multi-line": "a: 1\nb:\n  - 2\n  - 3\n",
    "non-ASCII": "data: température 🚀 ünïcode",
    "control characters": "tab\there, form\x0cfeed, escape \x1b[0m, DEL \x7f",
    "a dot line": "first\n.\nlast",
}


def wire(email: object) -> bytes:
    """The bytes a transport submits for ``email`` (the outbox's two steps)."""
    return build(prepare_outgoing(email, NODE))  # type: ignore[arg-type]


def kinds(body: str) -> dict[str, bytes]:
    recipients = Recipients(from_=NODE, to=(PEER,))
    publish = publish_email(
        "/chatter", body, recipients=recipients, gid=Gid(7), sequence_number=1, timestamp_ns=1
    )
    request = prepare_outgoing(
        request_email(
            "/add_two_ints", body, recipients=recipients, client_gid=Gid(8),
            sequence_number=2, timestamp_ns=2,
        ),
        NODE,
    )  # fmt: skip
    response = response_email(request, body, from_=PEER, timestamp_ns=3)
    bcc_only = publish_email(
        "/chatter", body, recipients=Recipients(from_=NODE, bcc=(PEER,)), gid=Gid(7),
        sequence_number=1, timestamp_ns=1,
    )  # fmt: skip
    return {
        "publish": wire(publish),
        "request": wire(request),
        "response": wire(response),
        "publish to Bcc only": wire(bcc_only),
    }


def cpp_body(body: str) -> bytes:
    """What a C++ peer holds for an emailmw body that crosses: line breaks as CRLF and the
    CRLF curl adds after a C++ body too; an empty body is empty, as C++ to C++."""
    return (body.replace("\n", "\r\n") + "\r\n").encode() if body else b""


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_every_kind_of_email_emailmw_builds_is_accepted_by_the_cpp_parser(body: str) -> None:
    for kind, raw in kinds(body).items():
        assert missing_headers(raw) == [], kind
        seen = cpp_parse(raw)
        assert seen is not None, kind
        assert seen.body == cpp_body(body), kind
        assert b"Content-Transfer-Encoding: base64" not in raw, kind
        # and emailmw still reads its own mail exactly
        assert parse(raw).body == body, kind


def test_what_the_cpp_parser_reads_from_emailmw_mail() -> None:
    emails = kinds("data: 1")
    publish = cpp_parse(emails["publish"])
    request = cpp_parse(emails["request"])
    response = cpp_parse(emails["response"])
    assert publish is not None
    assert request is not None
    assert response is not None
    assert publish.subject == b"/chatter"
    assert publish.headers[b"Publisher-GID"] == b"7"
    assert publish.headers[b"Source-Timestamp"] == b"1"
    assert publish.in_reply_to == b""
    assert request.headers[b"Client-GID"] == b"8"
    assert request.headers[b"Request-Sequence-Number"] == b"2"
    # the C++ client matches a response by In-Reply-To = its request's Message-ID
    assert response.in_reply_to == request.message_id
    assert response.headers[b"Client-GID"] == b"8"
    assert response.headers[b"Request-Sequence-Number"] == b"2"
    # the C++ server replies To the request's From
    assert request.from_ == NODE.encode()


def test_bcc_recipients_are_never_written_into_the_message() -> None:
    raw = kinds("x")["publish to Bcc only"]
    assert b"\r\nBcc: \r\n" in raw
    assert PEER.encode() not in raw


@pytest.mark.parametrize(
    "body",
    ["windows\r\nline ends", "bare\rCR", "NUL\x00byte", "x" * 999],
    ids=["CRLF", "bare CR", "NUL", "a line over 998 bytes"],
)
def test_bodies_that_cannot_cross_go_base64_and_arrive_as_base64_text(body: str) -> None:
    """SMTP cannot carry these as text (docs/interop.md): emailmw sends base64, which it
    decodes and the C++ parser, which decodes no transfer encoding, hands over as it is."""
    raw = kinds(body)["publish"]
    assert b"Content-Transfer-Encoding: base64" in raw
    assert parse(raw).body == body
    seen = cpp_parse(raw)
    assert seen is not None
    assert seen.body != cpp_body(body)


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_cpp_mail_is_read_by_emailmw(body: str) -> None:
    """The other direction: what the C++ sender writes (no From or Message-ID: the server
    adds them), publish and response, reaches emailmw with the same body, except that a C++
    body ending in a line break loses that one: curl ends every other body with the CRLF
    emailmw removes, so the two cannot be told apart."""
    expected = body[:-1] if body.endswith("\n") else body
    publish = cpp_payload(
        "/chatter", body.replace("\n", "\r\n"), NODE,
        {"Source-Timestamp": "5", "Publisher-GID": "9"},
    )  # fmt: skip
    email = parse(publish)
    assert email.subject == "/chatter"
    assert email.body == expected
    assert email.headers["Publisher-GID"] == "9"
    request_id = new_message_id(NODE)
    response = parse(
        cpp_payload(
            "/add_two_ints", body.replace("\n", "\r\n"), NODE,
            {"Client-GID": "8", "Request-Sequence-Number": "2", "Source-Timestamp": "6"},
            reply_ref=request_id,
        )
    )  # fmt: skip
    assert response.in_reply_to == request_id
    assert response.body == expected
