"""The wire format: pure build/parse, no transport."""

from __future__ import annotations

import contextlib
import string

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from emailmw import (
    Email,
    ForeignEmailError,
    Headers,
    InvalidHeaderError,
    InvalidNameError,
    MalformedEmailError,
    MessageTooLargeError,
    build_email,
    parse_email,
)
from emailmw._core.wire import make_reply, new_message_id, parse_head

# --------------------------------------------------------------------------- strategies

# Any Unicode text but lone surrogates (not encodable) ...
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=300)
# ... names additionally free of CR, LF and NUL.
names = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\r\n\x00"),
    min_size=1,
    max_size=200,
)
header_names = st.text(
    st.sampled_from([c for c in string.ascii_letters + string.digits + "-_.!#"]),
    min_size=1,
    max_size=30,
).filter(
    lambda n: (
        n.lower()
        not in {
            "from",
            "to",
            "cc",
            "bcc",
            "reply-to",
            "subject",
            "message-id",
            "in-reply-to",
            "references",
            "mime-version",
            "content-type",
            "content-transfer-encoding",
        }
    )
)
header_values = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\r\n\x00"), max_size=200
)
bodies = st.one_of(
    text,
    st.lists(
        st.sampled_from(["a", ".", "..", "\n", "\r\n", "\r", " ", "From ", "é", "x" * 1200])
    ).map("".join),
)
addresses = st.sampled_from(
    ["alice@example.test", "bob@example.test", "Robot <robot@example.test>"]
)
msgids = st.builds(lambda: new_message_id("alice@example.test"))


@settings(max_examples=300, deadline=None)
@given(
    subject=names,
    body=bodies,
    headers=st.dictionaries(header_names, header_values, max_size=6),
    from_=addresses,
    to=st.lists(addresses, min_size=1, max_size=3),
    cc=st.lists(addresses, max_size=2),
    message_id=st.one_of(st.none(), msgids),
    in_reply_to=st.one_of(st.none(), msgids),
)
def test_build_parse_round_trips_exactly(
    subject: str,
    body: str,
    headers: dict[str, str],
    from_: str,
    to: list[str],
    cc: list[str],
    message_id: str | None,
    in_reply_to: str | None,
) -> None:
    sent = Email(
        subject,
        body,
        from_,
        to,
        cc,
        headers=Headers(headers),
        message_id=message_id,
        in_reply_to=in_reply_to,
        references=(in_reply_to,) if in_reply_to else (),
    )
    assert parse_email(build_email(sent)) == sent


@settings(max_examples=200, deadline=None)
@given(
    subject=names,
    body=bodies,
    headers=st.dictionaries(header_names, header_values, max_size=6),
    cc=st.lists(addresses, max_size=2),
    in_reply_to=st.one_of(st.none(), msgids),
    lf=st.booleans(),
)
def test_parse_head_reads_every_header_as_parse_does(
    subject: str,
    body: str,
    headers: dict[str, str],
    cc: list[str],
    in_reply_to: str | None,
    lf: bool,
) -> None:
    """The archive pipeline reads stored mail with parse_head(): the same fields as parse()."""
    raw = build_email(
        Email(
            subject,
            body,
            "Robot <robot@example.test>",
            ["alice@example.test"],
            cc,
            headers=Headers(headers),
            message_id=new_message_id("robot@example.test"),
            in_reply_to=in_reply_to,
            references=(in_reply_to,) if in_reply_to else (),
        )
    )
    if lf:
        raw = raw.replace(b"\r\n", b"\n")
    parsed = parse_email(raw)
    head = parse_head(raw)
    assert head.subject == parsed.subject
    assert (head.from_, head.to, head.cc, head.bcc, head.reply_to) == (
        parsed.from_, parsed.to, parsed.cc, parsed.bcc, parsed.reply_to,
    )  # fmt: skip
    assert (head.message_id, head.in_reply_to, head.references) == (
        parsed.message_id, parsed.in_reply_to, parsed.references,
    )  # fmt: skip
    assert head.headers == parsed.headers
    assert list(head.headers.items()) == list(parsed.headers.items())
    assert head == parsed.replace(body="")  # every field, the body left unread


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"From: MAILER-DAEMON\r\n\r\nno subject\r\n", ForeignEmailError),
        (b"Subject: hi\r\nContent-Type: text/html\r\n\r\n<p>hi</p>\r\n", ForeignEmailError),
        (b"Subject: =?utf-8?q?a=0D=0Ab?=\r\n\r\nbody", MalformedEmailError),
        (b"no colon here\r\n\r\nbody", MalformedEmailError),
    ],
)
def test_parse_head_refuses_what_parse_refuses_for_its_headers(
    raw: bytes, error: type[Exception]
) -> None:
    with pytest.raises(error) as by_parse:
        parse_email(raw)
    with pytest.raises(error) as by_head:
        parse_head(raw)
    assert type(by_head.value) is type(by_parse.value)
    assert str(by_head.value) == str(by_parse.value)


def test_parse_head_leaves_the_body_alone() -> None:
    """A body parse() refuses (not UTF-8 here) does not stop the header read."""
    raw = b"Subject: t\r\n\r\n\xff\xfe not utf-8"
    with pytest.raises(MalformedEmailError):
        parse_email(raw)
    assert (parse_head(raw).subject, parse_head(raw).body) == ("t", "")


@settings(max_examples=100, deadline=None)
@given(subject=names, body=bodies)
def test_round_trip_survives_lf_storage(subject: str, body: str) -> None:
    """Maildir files and mbox archives store LF line endings; parsing them is exact too."""
    raw = build_email(Email(subject, body, "a@example.test", "b@example.test"))
    stored = raw.replace(b"\r\n", b"\n")
    assert parse_email(stored).body == body
    assert parse_email(stored).subject == subject


# --------------------------------------------------------------------------- specific cases


def test_plain_body_is_readable_on_the_wire() -> None:
    raw = build_email(Email("chatter", "data: hello\ncount: 3", "a@example.test", "b@example.test"))
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert b"Content-Transfer-Encoding: 7bit" in head
    assert payload == b"data: hello\r\ncount: 3\r\n"


def test_crlf_body_goes_base64_and_is_exact() -> None:
    body = "windows\r\nline\r\nends"
    raw = build_email(Email("t", body, "a@example.test", "b@example.test"))
    assert b"Content-Transfer-Encoding: base64" in raw
    assert parse_email(raw).body == body


def test_long_line_goes_base64_and_no_wire_line_exceeds_998() -> None:
    body = "z" * 5000
    raw = build_email(Email("t", body, "a@example.test", "b@example.test"))
    assert max(len(line) for line in raw.split(b"\r\n")) <= 998
    assert parse_email(raw).body == body


def test_non_ascii_subject_is_rfc2047_and_decodes_back() -> None:
    raw = build_email(Email("température/capteur 🚀", "b", "a@example.test", "b@example.test"))
    subject_line = next(line for line in raw.split(b"\r\n") if line.startswith(b"Subject:"))
    assert subject_line.startswith(b"Subject: =?utf-8?b?")
    assert raw.isascii() or b"Content-Transfer-Encoding: 8bit" in raw
    assert parse_email(raw).subject == "température/capteur 🚀"


def test_custom_headers_have_no_x_prefix_and_match_rmw_email() -> None:
    raw = build_email(
        Email(
            "topic",
            "b",
            "a@example.test",
            "b@example.test",
            headers={"Source-Timestamp": "1700000000000000000", "Publisher-GID": "1234"},
        )
    )
    assert b"\r\nSource-Timestamp: 1700000000000000000\r\n" in raw
    assert b"\r\nPublisher-GID: 1234\r\n" in raw


def test_parses_rmw_email_message() -> None:
    """What rmw_email's curl sender writes: no MIME headers, body followed by CRLF."""
    raw = (
        b"To: bob@example.test\r\nCc: \r\nBcc: \r\nSubject: /chatter\r\n"
        b"Source-Timestamp: 1611234567000000000\r\nPublisher-GID: 3141592653\r\n"
        b"\r\ndata: Hello World: 7\r\n"
    )
    email = parse_email(raw)
    assert email.subject == "/chatter"
    assert email.body == "data: Hello World: 7"
    assert email.cc == ()
    assert email.headers["Publisher-GID"] == "3141592653"


def test_parses_q_encoded_subject_from_a_mail_client() -> None:
    raw = b"Subject: =?ISO-8859-1?Q?caf=E9_cr=E8me?=\r\nFrom: x@example.test\r\n\r\nhi\r\n"
    assert parse_email(raw).subject == "café crème"


@pytest.mark.parametrize(
    "subject",
    [
        b"=?utf-8?b?YQ0KQmNjOiB2aWN0aW1AZXhhbXBsZS50ZXN0?=",  # "a\r\nBcc: victim@..."
        b"=?utf-8?q?a=0Ab?=",
        b"=?utf-8?q?a=00b?=",
    ],
)
def test_encoded_word_decoding_to_crlf_is_malformed(subject: bytes) -> None:
    raw = b"Subject: " + subject + b"\r\nFrom: x@example.test\r\n\r\nbody\r\n"
    with pytest.raises(MalformedEmailError, match="CR, LF or NUL"):
        parse_email(raw)


@pytest.mark.parametrize("name", ["", "a\rb", "a\nb", "nul\x00"])
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidNameError):
        build_email(Email(name, "b", "a@example.test", "b@example.test"))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Evil", "x\r\nBcc: victim@example.test"),
        ("Evil", "x\nb"),
        ("Bad Name", "v"),
        ("Bad:Name", "v"),
        ("Subject", "v"),
        ("content-type", "text/html"),
    ],
)
def test_unsafe_headers_are_refused(name: str, value: str) -> None:
    with pytest.raises(InvalidHeaderError):
        build_email(Email("t", "b", "a@example.test", "b@example.test", headers={name: value}))


def test_address_with_crlf_is_refused() -> None:
    with pytest.raises(InvalidHeaderError):
        build_email(Email("t", "b", "a@example.test", "b@example.test\r\nBcc: v@example.test"))


def test_size_limit_gives_a_clear_error() -> None:
    with pytest.raises(MessageTooLargeError, match="max-message-size"):
        build_email(Email("t", "x" * 101, "a@example.test", "b@example.test"), max_size=100)
    assert parse_email(build_email(Email("t", "x" * 100, "a@example.test", "b"), max_size=100))


def test_bcc_is_never_written() -> None:
    raw = build_email(Email("t", "b", "a@example.test", "b@example.test", bcc="c@example.test"))
    assert b"c@example.test" not in raw


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (
            b"Subject: hi\r\nContent-Type: multipart/alternative; boundary=x\r\n\r\n--x\r\n",
            "multipart",
        ),
        (b"Subject: hi\r\nContent-Type: text/html\r\n\r\n<p>hi</p>\r\n", "text/html"),
        (b"From: MAILER-DAEMON\r\n\r\nno subject\r\n", "no Subject"),
    ],
)
def test_foreign_mail_is_recognised(raw: bytes, why: str) -> None:
    with pytest.raises(ForeignEmailError, match=why):
        parse_email(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b" continuation first\r\n\r\nbody",
        b"no colon here\r\n\r\nbody",
        b"Subject: t\r\nContent-Transfer-Encoding: base64\r\n\r\n!!!not base64\xff",
        b"Subject: t\r\n\r\n\xff\xfe not utf-8",
    ],
)
def test_malformed_bytes_raise_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedEmailError):
        parse_email(raw)


_META = b"Source-Timestamp: 1\r\nPublisher-GID: 1\r\n"
_CHARSET = b"Subject: t\r\nContent-Type: text/plain; charset="


@pytest.mark.parametrize(
    ("raw", "why", "in_head"),
    [
        # a declared charset that is no charset: each raised UnicodeError or ValueError,
        # which stopped the polling thread on the same batch forever
        (_CHARSET + b"undefined\r\n\r\nabc", "charset", 0),
        (_CHARSET + b"punycode\r\n\r\nabc-9999999999", "charset", 0),
        (b"Subject: =?undefined?q?a?=\r\n\r\nabc", "charset", 1),
        (_CHARSET + b"utf\x00\r\n\r\nabc", "NUL", 1),
        (_CHARSET + b"base64\r\n\r\nabc", "charset", 0),
        # text emailmw would refuse to send: lone surrogates, CR/LF where a header is
        (_CHARSET + b"unicode_escape\r\n\r\n\\ud800", "charset", 0),
        (_CHARSET + b"utf-7\r\n\r\n+2AA-", "surrogate", 0),
        (b"Subject: =?utf-7?q?+2AA-?=\r\n\r\nabc", "surrogate", 1),
        (b"Subject: t\r\nX-Note: =?utf-8?q?a=0D=0Ab?=\r\n\r\nabc", "CR, LF", 1),
        (b"Subject: t\r\nReply-To: =?utf-8?q?a=0D=0Ab?= <a@b.test>\r\n\r\nabc", "CR, LF", 1),
        (b"Subject: t\r\nX-Note: a\x00b\r\n\r\nabc", "NUL", 1),
        # the standard library's address parser raised UnicodeEncodeError on this
        (b"Subject: t\r\nReply-To: \xff1(?b?quoted-printable\r\n\r\n", "address", 1),
    ],
)  # fmt: skip
def test_what_emailmw_would_not_send_is_malformed(raw: bytes, why: str, in_head: int) -> None:
    raw = raw.replace(b"\r\n\r\n", b"\r\n" + _META + b"\r\n", 1)
    with pytest.raises(MalformedEmailError, match=why):
        parse_email(raw)
    if in_head:  # a header's fault: parse_head (the archive pipeline's reader) agrees
        with pytest.raises(MalformedEmailError, match=why):
            parse_head(raw)


def test_mail_in_real_charsets_still_parses() -> None:
    for charset, body in (("iso-8859-1", "café"), ("windows-1252", "€uro"), ("koi8-r", "мир")):
        raw = (
            f"Subject: t\r\nContent-Type: text/plain; charset={charset}\r\n\r\n".encode()
            + body.encode(charset)
        )
        assert parse_email(raw).body == body
    assert parse_email(b"Subject: =?iso-8859-1?q?caf=E9?=\r\n\r\nx").subject == "café"


_RAW_PIECES = st.sampled_from(
    [
        b"Subject: ", b"From: ", b"To: ", b"Reply-To: ", b"Message-ID: ", b"In-Reply-To: ",
        b"References: ", b"Content-Type: text/plain; charset=", b"Content-Type: ",
        b"Content-Transfer-Encoding: ", b"Source-Timestamp: ", b"Publisher-GID: ",
        b"Client-GID: ", b"Request-Sequence-Number: ", b"=?", b"?=", b"?q?", b"?b?", b"utf-8",
        b"utf-7", b"punycode", b"undefined", b"unicode_escape", b"base64", b"quoted-printable",
        b"\r\n", b"\n", b"\r", b" ", b"\t", b":", b"<", b">", b"@", b'"', b"(", b")", b",",
        b"\x00", b"\xff", b"\xc3\xa9", b"a", b"1", b"9" * 25, b"=0D=0A", b"+2AA-", b"\\ud800",
    ]
)  # fmt: skip
ANY_BYTES = st.one_of(st.binary(max_size=500), st.lists(_RAW_PIECES, max_size=60).map(b"".join))


@settings(max_examples=1000, deadline=None)
@given(ANY_BYTES)
def test_any_bytes_parse_or_raise_malformed_never_anything_else(raw: bytes) -> None:
    for parse_ in (parse_email, parse_head):
        with contextlib.suppress(MalformedEmailError, ForeignEmailError):
            parse_(raw)


def test_reply_threads_on_message_id_and_uses_reply_to_else_from() -> None:
    request = Email(
        "add_two_ints",
        "a: 1",
        "client@example.test",
        "server@example.test",
        message_id="<r1@example.test>",
    )
    reply = make_reply(request, "sum: 3", from_="server@example.test")
    assert reply.in_reply_to == "<r1@example.test>"
    assert reply.references == ("<r1@example.test>",)
    assert reply.to == ("client@example.test",)
    assert reply.subject == "add_two_ints"
    with_reply_to = Email(
        "s",
        "b",
        "client@example.test",
        "x@example.test",
        reply_to="inbox@example.test",
        message_id="<r2@example.test>",
    )
    assert make_reply(with_reply_to, "x").to == ("inbox@example.test",)


def test_reply_needs_a_message_id() -> None:
    with pytest.raises(InvalidHeaderError, match="Message-ID"):
        make_reply(Email("s", "b", "a@example.test"), "x")


def test_message_ids_are_unique_and_use_the_sender_domain() -> None:
    ids = {new_message_id("alice@example.test") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("<") and i.endswith("@example.test>") for i in ids)


def test_topmost_received_header_is_kept() -> None:
    raw = (
        b"Received: from top by mail.example.test\r\n"
        b"Received: from bottom\r\n\tby somewhere\r\nSubject: t\r\n\r\nb\r\n"
    )
    assert parse_email(raw).headers["Received"] == "from top by mail.example.test"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["X-A", "x-a", "X-B", "Y", "y", "Received"]), st.integers(0, 9)),
        max_size=8,
    )
)
def test_the_first_of_repeated_headers_wins_whatever_its_case(
    extra: list[tuple[str, int]],
) -> None:
    raw = b"Subject: first\r\n" + b"".join(f"{n}: {v}\r\n".encode() for n, v in extra)
    raw += b"subject: second\r\n\r\nbody"
    headers = parse_email(raw).headers
    expected: dict[str, tuple[str, str]] = {}
    for name, value in extra:  # first occurrence wins, in first-seen order
        expected.setdefault(name.lower(), (name, str(value)))
    assert parse_email(raw).subject == "first"
    assert list(headers.items()) == list(expected.values())


def test_mbox_from_line_is_skipped() -> None:
    raw = (
        b"From alice@example.test Sun Nov 22 12:00:00 2026\nSubject: t\nFrom: a@example.test\n\nb\n"
    )
    email = parse_email(raw)
    assert (email.subject, email.body, email.from_) == ("t", "b", "a@example.test")


_HEADER_PIECES = st.sampled_from(
    [
        "Subject",
        "X-Y",
        ":",
        ": ",
        " ",
        "\t",
        "\r\n",
        "\n",
        "\r",
        "é",
        "\xff",
        "=?",
        "From ",
        "a",
        "",
    ]
)


@settings(max_examples=2000, deadline=None)
@given(st.lists(_HEADER_PIECES, max_size=16), st.booleans())
def test_header_block_fast_path_agrees_with_the_line_by_line_parser(
    pieces: list[str], latin1: bool
) -> None:
    """The one-pass path of parse_header_block is an optimisation: whatever it accepts, the
    line-by-line definition returns the same pairs, and they reject the same blocks."""
    from emailmw._core.wire import _parse_header_lines, parse_header_block

    block = "".join(pieces).encode("latin-1" if latin1 else "utf-8", "replace")
    assume(not block.startswith(b"From "))  # an envelope line: skipped before either path

    def run(parser: object) -> object:
        try:
            return parser(block)  # type: ignore[operator]
        except (MalformedEmailError, ForeignEmailError):
            return "malformed"

    assert run(parse_header_block) == run(_parse_header_lines)


def test_split_message_splits_at_the_first_empty_line_lf_or_crlf() -> None:
    """split_message (the common case takes one search) against its definition, on every
    string of up to 9 bytes made of CR, LF and one other byte: the header block ends at the
    first empty line, LF LF or CR LF CR LF, whichever starts first; a leading empty line
    means no headers; no empty line means no body."""
    import itertools

    from emailmw._core.wire import split_message

    def defined(raw: bytes) -> tuple[bytes, bytes]:
        crlf, lf = raw.find(b"\r\n\r\n"), raw.find(b"\n\n")
        if crlf != -1 and (lf == -1 or crlf < lf):
            return raw[:crlf], raw[crlf + 4 :]
        if lf != -1:
            return raw[:lf], raw[lf + 2 :]
        if raw.startswith((b"\r\n", b"\n")):
            return b"", raw.split(b"\n", 1)[1]
        return raw, b""

    checked = 0
    for length in range(10):
        for combo in itertools.product((b"\r", b"\n", b"a"), repeat=length):
            raw = b"".join(combo)
            assert split_message(raw) == defined(raw), raw
            checked += 1
    assert checked == sum(3**n for n in range(10))
