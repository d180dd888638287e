"""The addressing core under Stem, YMP and floctrl (docs/addressing.md): every rule of
each seed as a table, on pure functions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emailmw._core.addressing import (
    Address,
    Deliver,
    Drop,
    Envelope,
    Forward,
    decide,
    floctrl_recipients,
    read_envelope,
    stem_methods,
)
from emailmw._core.payloads import YmpAnswer, YmpRequest, read_ymp, read_ymp_packet

# ----------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cell", Address("cell")),
        ("hub:cell", Address("cell", "hub")),
        ("hub:cell:target", Address("cell", "hub", "target")),
        ("hub/cell/target", Address("cell", "hub", "target")),
        ("hub@cell", Address("cell", "hub")),
        ("hub-cell-target", Address("cell", "hub", "target")),
        (":cell:target", Address("cell", "", "target")),
        ("orch:*", Address("*", "orch")),
        ("a:b/c", "mixes delimiters"),
        ("a::c", "name '' is empty"),
        ("", "name '' is empty"),
        ("a:b:c:d", "more than hub, cell and target"),
        ("hub:ce*ll", "'*' stands only as a whole part"),
        ("hub:cell:*", "wildcards stand only for hubs and names"),
        ("hub:ce ll", "white space"),
    ],
)
def test_stem_address_strings(text: str, expected: Address | str) -> None:
    found = Address.parse_stem(text)
    if isinstance(expected, str):
        assert isinstance(found, str)
        assert expected in found
    else:
        assert found == expected


PART = st.text(
    alphabet=st.characters(
        min_codepoint=0x21, blacklist_characters="*", blacklist_categories=("Cs", "Z", "C")
    ),
    min_size=1,
    max_size=12,
)


@given(name=PART, hub=st.one_of(st.just(""), PART), target=st.one_of(st.just(""), PART))
def test_the_header_form_round_trips_any_parts(name: str, hub: str, target: str) -> None:
    address = Address.make(name, hub, target)
    assert isinstance(address, Address)
    assert Address.from_header(address.header()) == address


def test_an_envelope_round_trips_through_headers_and_broken_ones_say_why() -> None:
    envelope = Envelope(Address("cell", "h2", "t"), Address("me", "h1"), "stem",
                        reply=Address("inbox", "h1"))  # fmt: skip
    headers = dict(envelope.headers())
    assert read_envelope(headers) == Envelope(
        envelope.to, envelope.from_, "stem", envelope.reply, envelope.from_, 0
    )
    assert read_envelope({}) is None  # not a routed message
    for change, reason in (
        ({"Route-From": None}, "no Route-From"),
        ({"Route-Hops": "-1"}, "Route-Hops"),
        ({"Route-Face": "SMTP mail"}, "Route-Face"),
        ({"Route-To": "a:b"}, "not an address"),
        ({"Route-To": "h::t"}, "name '' is empty"),
    ):
        broken = {k: v for k, v in {**headers, **change}.items() if v is not None}
        found = read_envelope(broken)
        assert isinstance(found, str)
        assert reason in found
    forwarded = envelope.forwarded(Address("x", "h3"))
    assert (forwarded.hops, forwarded.orig, forwarded.to) == (1, envelope.from_, Address("x", "h3"))


# ----------------------------------------------------------------------------- Stem delivery

ENDPOINTS = {("cell", ""), ("cell2", "t")}
ROUTES = {"h2": "gateway@h1.test", "DEFAULT": "default@h1.test"}


def _decide(to: str, *, hops: int = 0, via_gateway: bool = False, routes: Any = ROUTES) -> Any:
    address = Address.parse_stem(to)
    assert isinstance(address, Address)
    envelope = Envelope(address, Address("sender", "h0"), "stem", hops=hops)
    return decide(envelope, "h1", lambda n, t: (n, t) in ENDPOINTS, routes,
                  via_gateway=via_gateway)  # fmt: skip


@pytest.mark.parametrize(
    ("to", "kw", "expected"),
    [
        # phase 1: which hub
        (
            "h2:cell",
            {},
            Forward(
                "gateway@h1.test",
                Envelope(
                    Address("cell", "h2"),
                    Address("sender", "h0"),
                    "stem",
                    None,
                    Address("sender", "h0"),
                    1,
                ),
            ),
        ),
        ("h3:cell", {}, Drop("no route to hub 'h3'")),
        ("h1:cell", {}, Deliver("cell", "")),
        ("cell", {}, Deliver("cell", "")),
        # no hub and an unknown cell: the DEFAULT portal, unless it came through a gateway
        ("nowhere", {}, "forward-default"),
        ("nowhere", {"via_gateway": True}, Drop("no endpoint 'nowhere' on hub 'h1'")),
        ("nowhere", {"routes": {}}, Drop("no endpoint 'nowhere' on hub 'h1'")),
        # a hub named and the cell missing: an addressing error, never DEFAULT
        ("h1:nowhere", {}, Drop("no endpoint 'nowhere' on hub 'h1'")),
        # phase 2: cell and target, then the cell alone
        (":cell2:t", {}, Deliver("cell2", "t")),
        ("h1:cell:x", {}, Deliver("cell", "")),
        ("h1:cell2:x", {}, Drop("no endpoint 'cell2' (target 'x') on hub 'h1'")),
        # loops end
        ("h2:cell", {"hops": 8}, Drop("hop limit: 8 gateways passed (a routing loop?)")),
    ],
)
def test_stem_delivery_phases(to: str, kw: dict[str, Any], expected: Any) -> None:
    found = _decide(to, **kw)
    if expected == "forward-default":
        assert isinstance(found, Forward)
        assert (found.next_hop, found.envelope.hops) == ("default@h1.test", 1)
    else:
        assert found == expected


@pytest.mark.parametrize(
    ("type_", "cmd", "methods"),
    [
        ("cmd", "status", ("status_cmd", "msg_in")),
        ("data", None, ("data_in", "msg_in")),
        ("response", None, ("response_in", "msg_in")),
        ("foo", None, ("foo_in", "msg_in")),
    ],
)
def test_stem_delivery_methods(type_: str, cmd: str | None, methods: tuple[str, str]) -> None:
    assert stem_methods(type_, cmd) == methods


# ----------------------------------------------------------------------------- floctrl

ORCHESTRAS = {"a": ["n1", "n2"], "b": ["m1", "m2"], "c": ["k1"]}
EVERYONE = ["/a/n1", "/a/n2", "/a", "/b/m1", "/b/m2", "/b", "/c/k1", "/c"]
TABLE = {
    # address: who receives it (one copy each), for a sender node /a/n1 and supernode /a
    "/a/n1": (["/a/n1"], ["/a/n1"]),
    "/a/n2": (["/a/n2"], ["/a/n2"]),
    "/b/m1": (["/b/m1"], ["/b/m1"]),
    "/a": (["/a"], ["/a"]),
    "/b": (["/b"], ["/b"]),
    "/a/*": (["/a/n1", "/a/n2", "/a"], ["/a/n1", "/a/n2", "/a"]),
    "/b/*": (["/b/m1", "/b/m2", "/b"], ["/b/m1", "/b/m2", "/b"]),
    "/*": (["/a", "/b", "/c"], ["/a", "/b", "/c"]),
    "/*/*": (EVERYONE, EVERYONE),
}


@pytest.mark.parametrize("address", sorted(TABLE))
@pytest.mark.parametrize("sender", ["/a/n1", "/a"])
def test_floctrl_delivery_table(address: str, sender: str) -> None:
    """Every address form from a node and from a supernode, local and remote: exactly
    who receives, one copy each (a sender that matches gets its own copy)."""
    expected = TABLE[address][0 if sender == "/a/n1" else 1]
    found = floctrl_recipients(ORCHESTRAS, sender, address)
    assert not isinstance(found, str)
    assert dict(found) == dict.fromkeys(expected, 1)


def test_floctrl_from_a_remote_node_and_to_a_lone_node() -> None:
    found = floctrl_recipients(ORCHESTRAS, "/c/k1", "/*/*")
    assert not isinstance(found, str)
    assert dict(found) == dict.fromkeys(EVERYONE, 1)
    found = floctrl_recipients(ORCHESTRAS, "/c/k1", "/c/*")
    assert not isinstance(found, str)
    assert dict(found) == {"/c/k1": 1, "/c": 1}


@pytest.mark.parametrize("address", ["", "a/b", "/", "//x", "/a/", "/*/x", "/a/b/c", "*"])
def test_floctrl_addresses_with_empty_or_extra_parts_are_refused(address: str) -> None:
    found = floctrl_recipients(ORCHESTRAS, "/a/n1", address)
    assert isinstance(found, str)
    assert "not a floctrl address" in found


# ----------------------------------------------------------------------------- YMP

REQUEST = {
    "sender": {"host": "host1.example.com", "protocol": "example", "service": "form"},
    "id": "0123456789",
    "host": "host2.example.com",
    "protocol": "example",
    "service": "repository",
    "action": "post example",
    "payload": {"text": "example text"},
}
ANSWER = {  # the spec's own example: no action
    "sender": {"host": "host2.example.com", "protocol": "example", "service": "repository"},
    "id": "abcdefghij",
    "reply-to": "0123456789",
    "host": "host1.example.com",
    "protocol": "example",
    "service": "form",
    "payload": {"status": "ok"},
}


def test_the_spec_examples_are_valid() -> None:
    request = read_ymp(REQUEST)
    assert isinstance(request, YmpRequest)
    assert (request.host, request.service, request.action) == (
        "host2.example.com", "repository", "post example")  # fmt: skip
    answer = read_ymp(ANSWER)
    assert isinstance(answer, YmpAnswer)
    assert (answer.reply_to, answer.action) == ("0123456789", None)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"extra": 1}, "unexpected property: extra"),
        ({"id": None}, "missing MUST property: id"),
        ({"action": None}, "missing MUST property: action"),
        ({"payload": "text"}, "payload must be an object"),
        ({"sender": {"host": "h", "protocol": "p"}}, "exactly host, protocol and service"),
        ({"sender": {"host": "h", "protocol": "p", "service": "s", "x": 1}}, "exactly"),
        ({"host": ""}, "host must be a non-empty string"),
        ({"service": 3}, "service must be a non-empty string"),
    ],
)
def test_a_ymp_request_is_validated_strictly(change: dict[str, Any], reason: str) -> None:
    message = {k: v for k, v in {**REQUEST, **change}.items() if v is not None}
    found = read_ymp(message)
    assert isinstance(found, str)
    assert reason in found


def test_packets_carry_several_messages_and_one_bad_one_refuses_the_packet() -> None:
    found = read_ymp_packet(json.dumps({"messages": [REQUEST, ANSWER]}))
    assert [type(m) for m in found] == [YmpRequest, YmpAnswer]
    bad = read_ymp_packet(json.dumps({"messages": [REQUEST, {**ANSWER, "x": 1}]}))
    assert bad == "messages[1]: unexpected property: x"
    assert read_ymp_packet("{not json").startswith("not JSON")  # type: ignore[union-attr]
    assert read_ymp_packet('{"messages": []}') == "a packet's messages must be a non-empty list"
    assert read_ymp_packet("[1]") == "a YMP message is a JSON object, not list"


# ----------------------------------------------------------------------------- on the wire


def test_a_routed_message_survives_the_wire_and_classifies_as_routed() -> None:
    from emailmw._core.protocol import RoutedRoute, Unroutable, classify, routed_email
    from emailmw._core.wire import build, parse

    envelope = Envelope(Address("cell", "h2", "t"), Address("me", "h1"), "stem")
    email = routed_email(
        envelope, "cell", '{"type": "data"}', to="h2@example.test", from_="h1@example.test",
        timestamp_ns=123,
    ).with_message_id("<a@b>")  # fmt: skip
    route = classify(parse(build(email)), 456)
    assert isinstance(route, RoutedRoute)
    assert route.envelope == Envelope(envelope.to, envelope.from_, "stem", None, envelope.from_)
    assert (route.info.source_timestamp, route.info.received_timestamp) == (123, 456)
    for name, value in (("Route-Hops", "x"), ("Source-Timestamp", "later"), ("Route-To", "::")):
        broken = email.replace(headers=email.headers.merged({name: value}))
        found = classify(broken, 0)
        assert isinstance(found, Unroutable)
        assert found.malformed
    plain = email.replace(headers=[(k, v) for k, v in email.headers.items()
                                   if not k.startswith("Route-")])  # fmt: skip
    assert classify(plain, 0) == Unroutable("no emailmw metadata headers")


def test_an_unknown_face_is_refused_with_its_reason_never_another_face_s_rules() -> None:
    """A Route-Face no face registered is an email emailmw cannot route (poison, with the
    reason naming the faces), and the grants it needs are none a signer can have (was: an
    unknown face fell into floctrl's grant rules)."""
    from emailmw._core.faces import face_names
    from emailmw._core.protocol import classify
    from emailmw._core.types import Email
    from emailmw._security import routed_grants

    assert face_names() == ("floctrl", "stem", "ymp")
    envelope = Envelope(Address("node", "h2"), Address("me", "h1"), "smtp")
    email = Email("floctrl work", '{"id": 1}', "a@x", ("b@x",),
                  headers={**dict(envelope.headers()), "Source-Timestamp": "1"})  # fmt: skip
    route = classify(email, 0)
    assert "Route-Face 'smtp' is not one of floctrl, stem, ymp" in str(route)
    assert routed_grants(envelope, '{"id": 1}', "h2") == (
        "Route-Face 'smtp' is not one of floctrl, stem, ymp"
    )


def test_a_face_endpoint_names_a_registered_face() -> None:
    from emailmw._core.errors import RoutingError
    from emailmw._delivery.routing import FaceEndpoint

    with pytest.raises(RoutingError, match="Route-Face 'pigeon' is not one of"):

        class Pigeon(FaceEndpoint[str]):  # a new face must be registered first
            face = "pigeon"
