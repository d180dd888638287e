"""Routing is a pure function of the email: tested without any transport."""

from __future__ import annotations

from emailmw import Email, Gid
from emailmw._protocol import (
    PublishRoute,
    Recipients,
    RequestRoute,
    ResponseRoute,
    Unroutable,
    classify,
    publish_email,
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
