"""Routing is a pure function of the email: tested without any transport."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from emailmw import Email, Gid, Headers
from emailmw._core.protocol import (
    PublishRoute,
    Recipients,
    RequestRoute,
    ResponseRoute,
    Unroutable,
    classify,
    publish_email,
    read_metadata,
    request_email,
    response_email,
)

R = Recipients("a@example.test", ("b@example.test",))


def test_publish_email_routes_to_its_topic_with_info() -> None:
    email = publish_email(
        "chatter", "hi", recipients=R, gid=Gid(7), sequence_number=3, timestamp_ns=11
    )
    route = classify(email, received_timestamp=22)
    assert route == PublishRoute("chatter", route.info)  # type: ignore[union-attr]
    assert isinstance(route, PublishRoute)
    assert (route.info.source_timestamp, route.info.received_timestamp) == (11, 22)
    assert (route.info.publisher_gid, route.info.sequence_number) == (Gid(7), 3)


def test_request_and_response_route_by_subject_and_in_reply_to() -> None:
    request = request_email(
        "add", "1 2", recipients=R, client_gid=Gid(9), sequence_number=4, timestamp_ns=1
    ).with_message_id("<q@example.test>")
    route = classify(request, 2)
    assert isinstance(route, RequestRoute)
    assert (route.service, route.info.client_gid, route.info.sequence_number) == ("add", Gid(9), 4)

    response = response_email(request, "3", from_="b@example.test", timestamp_ns=5)
    route = classify(response, 6)
    assert isinstance(route, ResponseRoute)
    assert route.info.client_gid == Gid(9)
    assert route.info.sequence_number == 4
    assert response.in_reply_to == "<q@example.test>"
    assert response.to == ("a@example.test",)


def test_rmw_email_publish_without_sequence_number_is_routed() -> None:
    email = Email("/chatter", "x", headers={"Source-Timestamp": "5", "Publisher-GID": "77"})
    route = classify(email, 6)
    assert isinstance(route, PublishRoute)
    assert route.info.sequence_number is None


def test_foreign_mail_is_unroutable_not_malformed() -> None:
    route = classify(Email("Lunch?", "see you at noon", "person@example.test"), 1)
    assert route == Unroutable("no emailmw metadata headers", malformed=False)


def test_broken_metadata_is_unroutable_and_malformed() -> None:
    for headers in (
        {"Publisher-GID": "7"},  # no Source-Timestamp
        {"Publisher-GID": "seven", "Source-Timestamp": "1"},
        {"Publisher-GID": "7", "Source-Timestamp": "-1"},
        {"Client-GID": "7", "Source-Timestamp": "1"},  # no Request-Sequence-Number
    ):
        route = classify(Email("t", "b", headers=headers), 1)
        assert isinstance(route, Unroutable)
        assert route.malformed, headers


def test_numbers_past_int64_are_malformed() -> None:
    # what rmw_email and emailmw send are int64 nanoseconds and sequence numbers
    for name in ("Source-Timestamp", "Publisher-Sequence-Number"):
        headers = {"Publisher-GID": "7", "Source-Timestamp": "1", name: str(2**63)}
        route = classify(Email("t", "b", headers=headers), 1)
        assert isinstance(route, Unroutable)
        assert route.malformed
        assert name in route.reason
    headers = {"Publisher-GID": "7", "Source-Timestamp": str(2**63 - 1)}
    assert isinstance(classify(Email("t", "b", headers=headers), 1), PublishRoute)


def test_an_unanswerable_request_or_an_empty_subject_is_malformed() -> None:
    # a request must say where its response goes; building the reply would fail otherwise
    request = {"Client-GID": "7", "Source-Timestamp": "1", "Request-Sequence-Number": "0"}
    route = classify(Email("add", "1 2", headers=request), 1)
    assert isinstance(route, Unroutable)
    assert route.malformed
    answerable = Email("add", "1 2", "c@example.test", headers=request, message_id="<q@c.test>")
    assert isinstance(classify(answerable, 1), RequestRoute)
    for broken in ("no-brackets@c.test", "<two words@c.test>", None):
        route = classify(answerable.replace(message_id=broken), 1)
        assert isinstance(route, Unroutable)
        assert route.malformed
        assert "Message-ID" in route.reason
    publish = {"Publisher-GID": "7", "Source-Timestamp": "1"}
    route = classify(Email("", "b", headers=publish), 1)
    assert isinstance(route, Unroutable)
    assert route.malformed


def test_redelivered_goes_into_the_info() -> None:
    email = Email("t", "b", headers={"Publisher-GID": "7", "Source-Timestamp": "1"})
    for flag in (False, True):
        route = classify(email, 1, redelivered=flag)
        assert isinstance(route, PublishRoute)
        assert route.info.redelivered is flag


def test_a_gid_past_uint32_is_malformed() -> None:
    route = classify(
        Email("t", "b", headers={"Publisher-GID": "4294967296", "Source-Timestamp": "1"}), 1
    )
    assert route == Unroutable("Publisher-GID is not a GID: '4294967296'", malformed=True)


_VALUES = st.sampled_from(
    [
        "0",
        "7",
        " 12 ",
        "4294967295",
        "4294967296",
        "9223372036854775807",
        "9223372036854775808",
        "1" + "0" * 40,
        "",
        "seven",
        "-1",
        "\u0661",
    ]
)
_METADATA = (
    "Source-Timestamp",
    "Publisher-GID",
    "Publisher-Sequence-Number",
    "Client-GID",
    "Request-Sequence-Number",
)
# each metadata header present or not, any case, then repeats and strangers in any order
_HEADER_SETS = st.tuples(
    st.lists(
        st.tuples(st.sampled_from(_METADATA), _VALUES, st.booleans()),
        max_size=len(_METADATA),
        unique_by=lambda item: item[0],
    ),
    st.lists(st.tuples(st.sampled_from([*_METADATA, "Message-Type", "X-Other"]), _VALUES)),
).map(lambda drawn: [(n.lower() if low else n, v) for n, v, low in drawn[0]] + list(drawn[1]))


def _oracle(pairs: list[tuple[str, str]]) -> str | tuple[bool, int, int, int | None]:
    """The metadata rules, restated: "foreign", "malformed" or the values."""
    first: dict[str, str] = {}
    for name, value in pairs:
        first.setdefault(name.lower(), value)

    def number(name: str, bound: int = 2**63 - 1) -> int | None:
        text = first.get(name.lower())
        if text is None:
            return None
        text = text.strip()
        if not (text.isascii() and text.isdigit()) or int(text) > bound:
            raise ValueError(name)
        return int(text)

    service = "client-gid" in first
    if not service and "publisher-gid" not in first:
        return "foreign"
    try:
        source = number("Source-Timestamp")
        gid = number("Client-GID" if service else "Publisher-GID", 2**32 - 1)
        seq = number("Request-Sequence-Number" if service else "Publisher-Sequence-Number")
    except ValueError:
        return "malformed"
    if source is None or gid is None or (service and seq is None):
        return "malformed"
    return service, source, gid, seq


@given(_HEADER_SETS, st.booleans())
def test_read_metadata_and_classify_follow_the_metadata_rules(
    pairs: list[tuple[str, str]], reply: bool
) -> None:
    """The archive pipeline calls read_metadata() where the transport calls classify(): both
    give the same verdict and values on any mix of metadata headers (the first of repeated
    headers wins, whatever its case)."""
    email = Email(
        "/t",
        "b",
        "a@example.test",
        message_id="<m@example.test>",
        headers=Headers(pairs),
        in_reply_to="<q@x>" if reply else None,
    )
    want = _oracle(pairs)
    route = classify(email, 3)
    metadata = read_metadata(email.headers)
    if isinstance(want, str):
        assert isinstance(route, Unroutable)
        assert route.malformed == (want == "malformed")
        assert metadata == route
        return
    assert metadata == want
    service, source, gid, seq = want
    if not service:
        assert isinstance(route, PublishRoute)
        info = route.info
        assert (info.source_timestamp, info.publisher_gid.value, info.sequence_number) == (
            source,
            gid,
            seq,
        )
    else:
        assert isinstance(route, ResponseRoute if reply else RequestRoute)
        assert (route.info.source_timestamp, route.info.client_gid.value) == (source, gid)
        assert route.info.sequence_number == seq
