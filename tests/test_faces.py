"""The Stem, YMP and floctrl faces and the gateway over the routing core, on the
intraprocess network: every rule of the seeds, table-driven where it is a table.
(The same scenarios over real mail servers: tests/email/test_routing_servers.py.)"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import emailmw
from emailmw import floctrl, stem, ymp
from emailmw._core.addressing import Address, Envelope, floctrl_recipients
from emailmw._core.protocol import classify, routed_email
from emailmw._delivery.routing import forwarded_message_id
from emailmw.testing._modes import FAST
from tests.faces_helpers import (
    ADDRESS_FORMS,
    ORCHESTRAS,
    PARTICIPANTS,
    Calls,
    Recording,
    floctrl_world,
    ring_of_three,
    wait_until,
    worker_pool,
)
from tests.test_addressing import REQUEST


@pytest.fixture
def net() -> emailmw.IntraprocessNetwork:
    return emailmw.IntraprocessNetwork()


@pytest.fixture
def hubs(net: emailmw.IntraprocessNetwork) -> Iterator[Any]:
    """``hubs(address, hub, routes)`` on the network; all shut down after the test."""
    made: list[emailmw.Context] = []

    def make(address: str, hub: str, routes: dict[str, str]) -> emailmw.Context:
        context = net.context(address, {"routing": {"hub": hub, "routes": routes}})
        made.append(context)
        return context

    yield make
    for context in made:
        context.shutdown()


# ------------------------------------------------------------------------------ Stem


def test_a_cmd_methods_return_value_is_the_response_to_reply_else_from(hubs: Any) -> None:
    lab = hubs("lab@hubs.test", "lab", {})
    calls = Calls()
    server = Recording("server", calls, context=lab)
    client = Recording("client", calls, context=lab)
    other = Recording("other", calls, context=lab)
    assert client.request("server", "echo", {"n": 1}).result(10) == {"n": 1}
    # with a reply address the response goes there, not to from
    client.send("server", type="cmd", cmd="echo", data=[2], reply="lab:other")
    assert calls.wait(lambda c: any(i[0] == "response_in" and i[1] == "lab:other" for i in c))
    assert not any(i[0] == "response_in" and i[1] == "lab:client" for i in calls.items)
    del server, other


def test_delivery_method_is_cmd_then_type_in_then_msg_in_else_dropped(hubs: Any) -> None:
    lab = hubs("lab@hubs.test", "lab", {})
    calls = Calls()
    Recording("r", calls, context=lab)
    plain = stem.Cell("plain", context=lab)  # no methods at all
    sender = stem.Cell("s", context=lab)
    sender.send("r", type="cmd", cmd="echo", data=1)
    sender.send("r", type="foo", data=2)
    sender.send("r", type="bar", data=3)
    sender.send("plain", type="bar", data=4)
    assert calls.wait(lambda c: len([i for i in c if i[1] == "lab:r"]) == 3)
    assert [(i[0], i[3]) for i in calls.items if i[1] == "lab:r"] == [
        ("echo_cmd", 1),
        ("foo_in", 2),
        ("msg_in", 3),
    ]
    # (two drops come: this one, and the reply to s, which has no response_in)
    assert wait_until(
        lambda: "cell lab:plain has neither bar_in nor msg_in" in str(dict(lab.router.drops))
    )
    del plain


def test_an_exception_becomes_an_error_reply(hubs: Any) -> None:
    lab = hubs("lab@hubs.test", "lab", {})
    Recording("r", Calls(), context=lab)
    client = stem.Cell("c", context=lab)
    with pytest.raises(emailmw.RemoteError, match="RuntimeError: kaput"):
        client.request("r", "fail").result(10)


def test_ack_req_sends_msg_ack_to_from_after_delivery(hubs: Any) -> None:
    lab = hubs("lab@hubs.test", "lab", {})
    calls = Calls()
    Recording("r", calls, context=lab)
    sender = Recording("s", calls, context=lab)
    sent = sender.send("r", type="foo", data="x", ack_req=True, reply="lab:nobody")
    assert calls.wait(lambda c: any(i[0] == "msg_ack_in" for i in c))
    kinds = [i[0] for i in calls.items]
    assert kinds.index("foo_in") < kinds.index("msg_ack_in")
    ack = next(i for i in calls.items if i[0] == "msg_ack_in")
    assert ack == ("msg_ack_in", "lab:s", "msg_ack", sent.msg_id, "lab:r")


@pytest.fixture
def stem_world(hubs: Any) -> tuple[emailmw.Context, emailmw.Context, Calls]:
    """Hub ``lab`` (cells alpha, alpha:t1, beta; DEFAULT -> far) and hub ``far`` (cell
    gamma; DEFAULT -> lab), reaching each other directly."""
    lab = hubs("lab@hubs.test", "lab", {"far": "far@hubs.test", "DEFAULT": "far@hubs.test"})
    far = hubs("far@hubs.test", "far", {"lab": "lab@hubs.test", "DEFAULT": "lab@hubs.test"})
    calls = Calls()
    Recording("alpha", calls, context=lab)
    Recording("alpha", calls, context=lab, target="t1")
    Recording("beta", calls, context=lab)
    Recording("gamma", calls, context=far)
    return lab, far, calls


@pytest.mark.parametrize(
    ("to", "receiver"),
    [
        ("alpha", "lab:alpha"),  # phase 2: the cell on this hub
        ("lab:alpha", "lab:alpha"),  # phase 1: this hub named
        ("lab:alpha:t1", "lab:alpha:t1"),  # cell + target
        ("lab/alpha/t9", "lab:alpha"),  # unknown target: the cell alone
        ("lab@beta@t1", "lab:beta"),  # another delimiter, same rule
        ("far:gamma", "far:gamma"),  # phase 1: the portal of hub far
        ("gamma", "far:gamma"),  # no hub, unknown cell: the DEFAULT route
        ("far-gamma-zz", "far:gamma"),
    ],
)
def test_stem_delivery_phases(stem_world: Any, to: str, receiver: str) -> None:
    lab, _, calls = stem_world
    stem.Cell("sender", context=lab).send(to, type="foo", data=to)
    assert calls.wait(lambda c: any(i[3] == to for i in c))
    assert [i[1] for i in calls.items if i[3] == to] == [receiver]


@pytest.mark.parametrize(
    ("to", "reason"),
    [
        ("nowhere:alpha", "no route to hub 'nowhere'"),
        ("lab:delta", "no endpoint 'delta' on hub 'lab'"),  # hub named: no default route
        ("a:b:c:d", "more than hub, cell and target"),
        ("lab::", "empty"),
        ("lab:al pha", "white space"),
        ("a:b/c", "mixes delimiters"),
    ],
)
def test_addressing_errors_at_the_sender_say_why(stem_world: Any, to: str, reason: str) -> None:
    lab, _, _ = stem_world
    with pytest.raises(emailmw.RoutingError, match=reason):
        stem.Cell("sender", context=lab).send(to, data=1)


def test_mail_for_a_missing_cell_is_dropped_logged_and_default_is_not_taken_twice(
    stem_world: Any, net: emailmw.IntraprocessNetwork, caplog: pytest.LogCaptureFixture
) -> None:
    lab, far, calls = stem_world
    body = json.dumps({"type": "foo", "msg_id": 1, "data": "late"})
    # hub named, cell missing: dropped at lab, never forwarded
    named = Envelope(Address("delta", "lab"), Address("x", "far"), "stem")
    # no hub, came through a gateway (hops 1), not here: dropped, not sent to DEFAULT
    relayed = dataclasses.replace(Envelope(Address("delta"), Address("x", "far"), "stem"), hops=1)
    caplog.set_level(logging.WARNING, "emailmw.routing")
    for envelope in (named, relayed):
        email = routed_email(envelope, "s", body, to="lab@hubs.test", from_="far@hubs.test",
                             timestamp_ns=1)  # fmt: skip
        emailmw.IntraprocessSender(net, "far@hubs.test").send(email)
    assert wait_until(lambda: lab.router.counts["dropped"] == 2)
    assert lab.router.counts["relayed"] == 0
    assert far.router.counts["dropped"] == 0
    assert far.router.counts["delivered"] == 0
    assert sum("no endpoint 'delta' on hub 'lab'" in r.getMessage() for r in caplog.records) == 2
    # the receiver goes on
    stem.Cell("s", context=lab).send("alpha", type="foo", data="after")
    assert calls.wait(lambda c: any(i[3] == "after" for i in c))


@pytest.mark.parametrize(
    ("body", "headers", "reason"),
    [
        ("{not json", {}, "not JSON"),
        (json.dumps({"msg_id": 1}), {}, "type must be"),
        (json.dumps({"type": "cmd", "msg_id": 1}), {}, "needs cmd"),
        (json.dumps({"type": "foo", "extra": 1}), {}, "unexpected content key: extra"),
        (json.dumps({"type": "foo", "ack_req": "yes"}), {}, "ack_req must be"),
        (json.dumps({"type": "foo"}), {"Route-To": "lab::"}, "routed message"),
        (json.dumps({"type": "foo"}), {"Route-To": "lab:a:b:c"}, "routed message"),
        (json.dumps({"type": "foo"}), {"Route-Hops": "x"}, "Route-Hops"),
    ],
)
def test_bad_stem_input_is_refused_with_a_reason_and_the_receiver_goes_on(
    stem_world: Any,
    net: emailmw.IntraprocessNetwork,
    caplog: pytest.LogCaptureFixture,
    body: str,
    headers: dict[str, str],
    reason: str,
) -> None:
    lab, _, calls = stem_world
    caplog.set_level(logging.WARNING)
    envelope = Envelope(Address("alpha", "lab"), Address("x", "far"), "stem")
    email = routed_email(envelope, "s", body, to="lab@hubs.test", from_="far@hubs.test",
                         timestamp_ns=1)  # fmt: skip
    email = email.replace(headers=email.headers.merged(headers))
    emailmw.IntraprocessSender(net, "far@hubs.test").send(email)
    assert wait_until(lambda: any(reason in r.getMessage() for r in caplog.records))
    assert not any(i[1] == "lab:alpha" for i in calls.items)
    stem.Cell("s", context=lab).send("alpha", type="foo", data="after")
    assert calls.wait(lambda c: any(i[3] == "after" for i in c))


# ------------------------------------------------------------------------------ YMP


@pytest.fixture
def ymp_world(hubs: Any) -> tuple[ymp.YmpHost, ymp.YmpHost]:
    one = hubs("one@hosts.test", "host1.example.com", {"host2.example.com": "two@hosts.test"})
    two = hubs("two@hosts.test", "host2.example.com", {"host1.example.com": "one@hosts.test"})
    h1, h2 = ymp.YmpHost(context=one), ymp.YmpHost("host2.example.com", context=two)

    def post(request: ymp.YmpRequest) -> dict[str, Any]:
        return {"status": "ok", "text": request.payload.get("text")}

    h2.add_service("example", "repository", {"post example": post})
    return h1, h2


def test_a_ymp_request_is_answered_to_the_callers_future(ymp_world: Any) -> None:
    h1, _ = ymp_world
    answer = h1.request("host2.example.com", "example", "repository", "post example",
                        {"text": "hi"}, sender=("example", "form")).result(10)  # fmt: skip
    assert answer.payload == {"status": "ok", "text": "hi"}
    assert (answer.sender_host, answer.host, answer.protocol, answer.service) == (
        "host2.example.com", "host1.example.com", "example", "form")  # fmt: skip


def test_a_ymp_packet_carries_several_messages_in_one_email(ymp_world: Any) -> None:
    h1, h2 = ymp_world
    before = h2.context.router.counts["delivered"]
    futures = h1.request_many(
        "host2.example.com",
        [("example", "repository", "post example", {"text": str(i)}) for i in range(3)],
    )
    assert [f.result(10).payload["text"] for f in futures] == ["0", "1", "2"]
    assert h2.context.router.counts["delivered"] == before + 1  # one email


def _ymp_request(**changes: Any) -> dict[str, Any]:
    """The spec's example request, with ``changes`` (None: the property removed)."""
    message: dict[str, Any] = copy.deepcopy(REQUEST)
    for key, value in changes.items():
        if value is None:
            del message[key]
        else:
            message[key] = value
    return message


@pytest.mark.parametrize(
    ("body", "from_", "reason"),
    [
        ("[1,", "one@hosts.test", "bad YMP message: not JSON"),
        (_ymp_request(extra=1), "one@hosts.test", "unexpected property: extra"),
        (_ymp_request(action=None), "one@hosts.test", "missing MUST property: action"),
        (_ymp_request(payload=[]), "one@hosts.test", "payload must be an object"),
        (_ymp_request(host="host3.example.com"), "one@hosts.test", "addressed to host"),
        (_ymp_request(protocol="other"), "one@hosts.test", "unknown protocol 'other'"),
        (_ymp_request(service="forum"), "one@hosts.test", "unknown service 'forum'"),
        (_ymp_request(action="delete"), "one@hosts.test", "unknown action 'delete'"),
        (_ymp_request(), "mallory@hosts.test", "does not match the connection"),
        (
            _ymp_request(sender={"host": "evil.example", "protocol": "p", "service": "s"}),
            "one@hosts.test",
            "'evil.example' has no route here",
        ),
        (
            {"messages": [_ymp_request(), _ymp_request(extra=1)]},
            "one@hosts.test",
            "messages[1]: unexpected property",
        ),
        (
            _ymp_request(**{"reply-to": "nope"}, action=None),
            "one@hosts.test",
            "no pending request",
        ),
    ],
)
def test_ymp_layers_reject_what_is_not_theirs_with_a_reason(
    ymp_world: Any,
    net: emailmw.IntraprocessNetwork,
    caplog: pytest.LogCaptureFixture,
    body: Any,
    from_: str,
    reason: str,
) -> None:
    h1, _h2 = ymp_world
    caplog.set_level(logging.WARNING, "emailmw.routing")
    text = body if isinstance(body, str) else json.dumps(body)
    envelope = Envelope(Address("ymp", "host2.example.com"), Address("ymp", "host1.example.com"),
                        "ymp")  # fmt: skip
    email = routed_email(envelope, "ymp", text, to="two@hosts.test", from_=from_, timestamp_ns=1)
    emailmw.IntraprocessSender(net, from_).send(email)
    assert wait_until(lambda: any(reason in r.getMessage() for r in caplog.records)), [
        r.getMessage() for r in caplog.records
    ]
    # the host goes on
    assert h1.request("host2.example.com", "example", "repository", "post example",
                      {}).result(10).payload["status"] == "ok"  # fmt: skip


# ------------------------------------------------------------------------------ floctrl


@pytest.fixture
def world(hubs: Any) -> Iterator[dict[str, Any]]:
    with floctrl_world(lambda hub: f"{hub}@orch.test", hubs) as made:
        yield made


def _record(world: dict[str, Any]) -> Calls:
    calls = Calls()
    for path, participant in world.items():
        participant.subscribe_to("chat", lambda m, p=path: calls.add((p, m.address, m.body)))
    return calls


def _settle(world: dict[str, Any], calls: Calls, sender: str, tag: str) -> None:
    """Wait until a sentinel ``/*/*`` from ``sender`` reached everyone: every copy of what
    ``sender`` published before it arrived by then (each path is first in, first out)."""
    world[sender].publish(floctrl.Message(0, "/*/*", "chat", f"end {tag}"))
    assert calls.wait(lambda c: sum(i[2] == f"end {tag}" for i in c) == len(PARTICIPANTS)), [
        i for i in calls.items if i[2] == f"end {tag}"
    ]


def test_floctrl_every_address_form_from_every_sender_reaches_exactly_its_receivers(
    world: dict[str, Any],
) -> None:
    calls = _record(world)
    for sender in PARTICIPANTS:
        for address in ADDRESS_FORMS:
            world[sender].publish(floctrl.Message(1, address, "chat", f"{sender} {address}"))
        _settle(world, calls, sender, sender)
    for sender in PARTICIPANTS:
        for address in ADDRESS_FORMS:
            got = Counter(i[0] for i in calls.items if i[2] == f"{sender} {address}")
            expected = floctrl_recipients(ORCHESTRAS, sender, address)
            assert got == expected, (sender, address)


@pytest.mark.parametrize(
    ("sender", "address", "expected"),
    [
        # a sender that matches the address gets its own copy
        ("/A/n1", "/*/*", {"/A", "/A/n1", "/A/n2", "/B", "/B/m1", "/B/m2"}),
        ("/A/n1", "/A/*", {"/A", "/A/n1", "/A/n2"}),
        # a supernode's /orch/* fan-out: every node, itself once
        ("/A", "/A/*", {"/A", "/A/n1", "/A/n2"}),
        # /* reaches every supernode, no node
        ("/B/m2", "/*", {"/A", "/B"}),
        ("/A/n2", "/B", {"/B"}),
        ("/A/n2", "/B/m1", {"/B/m1"}),
    ],
)
def test_floctrl_rows_of_the_seed(
    world: dict[str, Any], sender: str, address: str, expected: set[str]
) -> None:
    calls = _record(world)
    world[sender].publish(floctrl.Message(1, address, "chat", "row"))
    _settle(world, calls, sender, "row")
    got = [i[0] for i in calls.items if i[2] == "row"]
    assert sorted(got) == sorted(expected)  # each exactly once


def test_floctrl_all_nodes_is_rewritten_per_remote_orchestra(world: dict[str, Any]) -> None:
    calls = _record(world)
    world["/A/n1"].publish(floctrl.Message(1, "/*/*", "chat", "all"))
    _settle(world, calls, "/A/n1", "x")
    addresses = {i[0]: i[1] for i in calls.items if i[2] == "all"}
    assert addresses["/B/m1"] == addresses["/B/m2"] == addresses["/B"] == "/B/*"
    assert addresses["/A/n2"] == "/A/*"
    assert addresses["/A/n1"] == "/*/*"


def test_floctrl_a_node_run_by_several_processes_shares_a_topic_as_a_stateless_group(
    hubs: Any,
) -> None:
    """Three processes run /orch/worker on one account; each subscribes to "jobs" in group
    "pool", stateless: each job reaches one of them, and all three get their share (by
    UID: other mail of the account, a reader's record, may come between the jobs, so the
    shares need not be equal; each is what its member claimed, none stolen)."""
    with worker_pool(hubs, "orch@flo.test", "worker@flo.test", 3) as (supernode, nodes):
        got = Calls()
        # no stealing and a long expiry: every member's share is its own, for certain
        settings = dataclasses.replace(FAST, steal_after=600.0, expiry=10.0)
        for k, node in enumerate(nodes):
            node.subscribe_to("jobs", lambda m, k=k: got.add((m.body, k)), mode="stateless",
                              group="pool", group_settings=settings)  # fmt: skip
        members = [node._consumers[("jobs", "pool")].receiver for node in nodes]
        assert wait_until(lambda: all(len(member.alive) == 3 for member in members))
        for i in range(30):
            supernode.publish(floctrl.Message(i, "/orch/worker", "jobs", str(i)))
        assert got.wait(lambda c: len(c) >= 30)
        assert wait_until(lambda: sum(m.counts["acked"] for m in members) == 30)
        assert sorted(int(body) for body, _ in got.items) == list(range(30))
        shares = Counter(k for _, k in got.items)
        assert all(shares[k] >= 1 for k in range(3)), shares
        assert [shares[k] for k in range(3)] == [m.counts["claimed"] for m in members]


def test_floctrl_a_stateful_group_has_one_active_node_and_a_standby_takes_over_in_order(
    hubs: Any,
) -> None:
    with worker_pool(hubs, "orch@flo.test", "worker@flo.test", 2) as (supernode, nodes):
        got = Calls()
        nodes[0].subscribe_to("jobs", lambda m: got.add((m.body, 0)), mode="stateful",
                              group="standby", group_settings=FAST)  # fmt: skip
        first = nodes[0]._consumers[("jobs", "standby")].receiver
        assert wait_until(lambda: first.joined)
        nodes[1].subscribe_to("jobs", lambda m: got.add((m.body, 1)), mode="stateful",
                              group="standby", group_settings=FAST)  # fmt: skip
        for i in range(10):
            supernode.publish(floctrl.Message(i, "/orch/worker", "jobs", str(i)))
        assert got.wait(lambda c: len(c) >= 10)
        nodes[0].close()  # the active one goes; the standby goes on, in order
        for i in range(10, 20):
            supernode.publish(floctrl.Message(i, "/orch/worker", "jobs", str(i)))
        assert got.wait(lambda c: len(c) >= 20)
        assert [body for body, _ in got.items] == [str(i) for i in range(20)]
        assert {k for body, k in got.items if int(body) >= 10} == {1}
        with pytest.raises(ValueError, match="delivery modes are for nodes"):
            supernode.subscribe_to("jobs", print, mode="stateless", group="pool")


def test_floctrl_messages_are_immutable_and_unsubscribing_stops_delivery(
    world: dict[str, Any],
) -> None:
    message = floctrl.Message(5, "/A/n1", "chat", "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.body = "y"  # type: ignore[misc]
    assert message.with_body("y") == floctrl.Message(5, "/A/n1", "chat", "y")
    calls = Calls()

    class Sub:
        def receive_message(self, msg: floctrl.Message) -> None:
            calls.add(msg.body)

    sub = Sub()
    world["/A/n1"].subscribe_to("news", sub)
    world["/A/n2"].publish(floctrl.Message(1, "/A/n1", "news", "one"))
    assert calls.wait(lambda c: c == ["one"])
    world["/A/n1"].unsubscribe_from("news", sub)
    seen = _record(world)
    world["/A/n2"].publish(floctrl.Message(1, "/A/n1", "news", "two"))
    _settle(world, seen, "/A/n2", "u")
    assert calls.items == ["one"]


@pytest.mark.parametrize("address", ["A/n1", "/A/n1/x", "//", "/*/n1", "/", "/A/"])
def test_floctrl_bad_addresses_are_refused_with_a_reason(
    world: dict[str, Any], address: str
) -> None:
    with pytest.raises(emailmw.RoutingError, match="floctrl address"):
        world["/A/n1"].publish(floctrl.Message(1, address, "chat", "x"))


# ------------------------------------------------------------------------------ gateways


def test_a_ring_of_three_hubs_delivers_every_message_once_and_none_loops(
    net: emailmw.IntraprocessNetwork, hubs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def account(gateway: str, side: str) -> emailmw.Context:
        return net.context(f"gw{gateway}@{side}.test", {"routing": {"hub": f"gw{gateway}{side}"}})

    addresses = {h: f"{h}@{h}.test" for h in "xyz"}
    with ring_of_three(hubs, account, addresses, lambda g, s: f"gw{g}@{s}.test") as (made, gws):
        calls = Calls()
        for _hub, context in made.items():
            Recording("cell", calls, context=context)
        senders = {hub: stem.Cell("sender", context=c) for hub, c in made.items()}
        for src in "xyz":
            for dst in "xyz":
                senders[src].send(f"{dst}:cell", type="foo", data=f"{src}>{dst}")
        assert calls.wait(lambda c: len(c) == 9)
        assert sorted(i[3] for i in calls.items) == sorted(f"{s}>{d}" for s in "xyz" for d in "xyz")
        assert all(i[1] == f"{i[3][-1]}:cell" for i in calls.items)
        # the wrong route for hub "lost" goes round the ring until the hop limit
        caplog.set_level(logging.WARNING, "emailmw.routing")
        senders["x"].send("lost:cell", type="foo", data="lost")
        assert wait_until(lambda: any("hop limit" in r.getMessage() for r in caplog.records))
        relayed = sum(g.report()["relayed"] for g in gws)
        assert relayed == 6 + 8  # 6 cross-hub messages one hop each; 8 hops of the lost one
        assert not any(i[3] == "lost" for i in calls.items)


def test_a_gateway_reports_what_it_relayed_and_dropped(
    net: emailmw.IntraprocessNetwork, hubs: Any
) -> None:
    a = hubs("a@a.test", "a", {"b": "gw@a.test"})
    b = hubs("b@b.test", "b", {"a": "gw@b.test"})
    gw = emailmw.Gateway(
        {"a": net.context("gw@a.test"), "b": net.context("gw@b.test")},
        {"a": ("a@a.test", "a"), "b": ("b@b.test", "b")},
    )
    with gw:
        gw.start()
        calls = Calls()
        Recording("cell", calls, context=b)
        sender = stem.Cell("s", context=a)
        sender.send("b:cell", type="foo", data=1)
        sender.send("b:nocell", type="foo", data=2)
        assert calls.wait(lambda c: len(c) == 1)
        assert wait_until(lambda: b.router.counts["dropped"] == 1)
        report = gw.report()
        assert report["relayed"] == 2
        assert report["dropped"] == 0
        assert b.router.drops == Counter({"no endpoint 'nocell' on hub 'b'": 1})


def test_a_gateway_that_forwards_an_email_again_sends_the_same_message_id(
    net: emailmw.IntraprocessNetwork, hubs: Any
) -> None:
    """After a crash a gateway reads again what it had not settled and forwards it again:
    the copy has the same Message-ID, so the receiver drops it as a duplicate."""
    b = hubs("b@b.test", "b", {})
    calls = Calls()
    Recording("cell", calls, context=b)
    gw = net.context("gw@a.test", {"routing": {"hub": "gw", "routes": {"b": "b@b.test"}}})
    try:
        envelope = Envelope(Address("cell", "b"), Address("s", "a"), "stem")
        email = routed_email(envelope, "s", json.dumps({"type": "foo", "data": 1}),
                             to="gw@a.test", from_="a@a.test",
                             timestamp_ns=1).with_message_id("<m1@a.test>")  # fmt: skip
        route = classify(email, 2)
        gw.router(email, route)
        gw.router(email, route)  # the same stored email, handed out again
        other = email.with_message_id("<m2@a.test>")
        gw.router(other, classify(other, 2))
        assert calls.wait(lambda c: len(c) == 2)
        assert wait_until(lambda: b._polling.duplicates == 1)
        assert gw.router.counts["relayed"] == 3
    finally:
        gw.shutdown()


class _Incoming:
    """What a ticket settles, recorded: (its data, "ack" or "leave")."""

    claim = None
    delivery_count = 1

    def __init__(self, data: int, settled: list[tuple[int, str]]) -> None:
        self.data, self.settled = data, settled

    def give(self) -> None:
        pass

    def ack(self) -> None:
        self.settled.append((self.data, "ack"))

    def leave(self) -> None:
        self.settled.append((self.data, "leave"))


def _stem_email(data: int) -> tuple[Any, Any]:
    envelope = Envelope(Address("cell", "b"), Address("s", "a"), "stem")
    email = routed_email(envelope, "s", json.dumps({"type": "foo", "data": data}),
                         to="gw@a.test", from_="a@a.test",
                         timestamp_ns=1).with_message_id(f"<m{data}@a.test>")  # fmt: skip
    return email, classify(email, 2)


@pytest.mark.parametrize("error", ["temporary", "no answer in time", "connection"])
def test_a_gateway_whose_next_server_is_down_forwards_once_it_is_back(
    net: emailmw.IntraprocessNetwork, hubs: Any, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    """#57: the next server does not accept mail for a while (down, no answer in time, a
    4xx): the routed emails wait, in order, unsettled, and are forwarded once it accepts
    mail again; each is settled only then. Was: dropped at the first failure and left in
    the gateway's mailbox, never forwarded (a one-way Stem or floctrl message lost)."""
    from emailmw._delivery.polling import Ticket

    b = hubs("b@b.test", "b", {})
    calls = Calls()
    Recording("cell", calls, context=b)
    gw = net.context("gw@a.test", {"routing": {"hub": "gw", "routes": {"b": "b@b.test"}}})
    sender = gw.router.outlet.sender
    send, tries = sender.send, []

    def down(email: Any, **kwargs: Any) -> None:
        tries.append(email.message_id)
        if len(tries) <= 3:
            raise {
                "temporary": emailmw.SendError("451 try later", temporary=True),
                "no answer in time": emailmw.SendError("not accepted within 30 s", temporary=True),
                "connection": emailmw.ConnectError("connection refused"),
            }[error]
        send(email, **kwargs)

    monkeypatch.setattr(sender, "send", down)
    monkeypatch.setattr("emailmw._delivery.routing._RETRY_FIRST", 0.05)  # (1 s)
    settled: list[tuple[int, str]] = []
    try:
        for data in (1, 2):
            ticket = Ticket(_Incoming(data, settled))  # type: ignore[arg-type]
            email, route = _stem_email(data)
            gw.router(email, route, ticket)
            ticket.release()  # (the polling thread is done with it)
        assert settled == []  # (waiting: not settled)
        assert calls.wait(lambda c: [i[3] for i in c] == [1, 2], 30)
        assert wait_until(lambda: settled == [(1, "ack"), (2, "ack")], 10)
        assert gw.router.counts["relayed"] == 2
        assert gw.router.counts["dropped"] == 0
    finally:
        gw.shutdown()


def test_a_gateway_drops_what_the_next_server_refuses_for_good_and_leaves_it(
    net: emailmw.IntraprocessNetwork, hubs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A permanent refusal (5xx) is a drop, counted and logged; the email is left where it
    is (not settled), and the next email goes on."""
    from emailmw._delivery.polling import Ticket

    b = hubs("b@b.test", "b", {})
    calls = Calls()
    Recording("cell", calls, context=b)
    gw = net.context("gw@a.test", {"routing": {"hub": "gw", "routes": {"b": "b@b.test"}}})
    sender = gw.router.outlet.sender
    send = sender.send

    def refuse_first(email: Any, **kwargs: Any) -> None:
        if email.message_id == next(iter(forwarded)):
            raise emailmw.SendError("550 no such user")
        send(email, **kwargs)

    forwarded: list[str] = []
    monkeypatch.setattr(sender, "send", refuse_first)
    settled: list[tuple[int, str]] = []
    try:
        for data in (1, 2):
            ticket = Ticket(_Incoming(data, settled))  # type: ignore[arg-type]
            email, route = _stem_email(data)
            if not forwarded:
                forwarded.append(forwarded_message_id(email.message_id, route.envelope))
            gw.router(email, route, ticket)
            ticket.release()
        assert calls.wait(lambda c: [i[3] for i in c] == [2], 10)
        assert gw.router.counts["dropped"] == 1
        assert settled == [(1, "leave"), (2, "ack")]
    finally:
        gw.shutdown()


def test_a_gateway_file_with_a_mistake_is_one_line_naming_the_key(tmp_path: Any) -> None:
    import yaml

    account = {"intraprocess": True}
    cases = {
        "routes": {"accounts": {"a": account, "b": account}},
        "routes.x": {"accounts": {"a": account, "b": account}, "routes": {"x": "a@b"}},
        "accounts": {"accounts": {"a": account}, "routes": {}},
        "routes.y": {
            "accounts": {"a": account, "b": account},
            "routes": {"y": {"to": "y@y.test", "via": "c"}},
        },
        "supernode.account": {
            "accounts": {"a": account, "b": account},
            "routes": {"x": {"to": "x@x.test", "via": "a"}},
            "supernode": {"account": "c", "orchestra": "A"},
        },
        # a mistake inside an account: named in this file (was "<dict>: key 'email.tls'")
        "accounts.b.tls": {
            "accounts": {"a": account, "b": {**account, "tls": "yes"}},
            "routes": {"x": {"to": "x@x.test", "via": "a"}},
        },
    }
    for key, data in cases.items():
        path = tmp_path / "gw.yml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(emailmw.ConfigError) as raised:
            emailmw.load_gateway(path)
        assert f"{path}: key '{key}': " in str(raised.value), str(raised.value)
    path.write_text(yaml.safe_dump({
        "accounts": {"a": account, "b": account},
        "routes": {"x": {"to": "x@x.test", "via": "b"}},
        "supernode": {"account": "a", "orchestra": "A", "nodes": {"n1": "x"},
                      "orchestras": {"B": "x"}},
    }))  # fmt: skip
    with emailmw.load_gateway(path) as gateway:
        assert gateway.supernode is not None
        assert gateway.supernode.path == "/A"
        assert gateway.accounts["a"].router.route("x") is not None


@pytest.mark.parametrize(("name", "target"), [("a-b", ""), ("a", "t:1"), ("a@b", ""), ("*", "")])
def test_a_cell_name_stem_addresses_could_not_reach_is_refused(
    ctx: emailmw.Context, name: str, target: str
) -> None:
    with pytest.raises(emailmw.RoutingError):
        stem.Cell(name, target=target, context=ctx)


def test_a_message_sent_in_a_callback_is_delivered_after_the_callback_returned(
    hubs: Any,
) -> None:
    lab = hubs("lab@hubs.test", "lab", {})
    calls = Calls()

    class Chain(stem.Cell):
        def foo_in(self, msg: stem.StemMessage) -> None:
            self.send("self_", type="bar", data="from foo_in")
            calls.add("foo_in returns")

        def bar_in(self, msg: stem.StemMessage) -> None:
            calls.add("bar_in")

    Chain("self_", context=lab).send("self_", type="foo")
    assert calls.wait(lambda c: len(c) == 2)
    assert calls.items == ["foo_in returns", "bar_in"]


def test_msg_ids_are_random_and_fit_stems_range(hubs: Any) -> None:
    """A msg_id cannot be guessed from the last one (a forged reply would have to): random
    in 1 .. 2**31-1, never a counter."""
    cell = stem.Cell("c", context=hubs("lab@hubs.test", "lab", {}))
    ids = [cell.send("c", data=i).msg_id for i in range(200)]
    assert all(0 < i < 2**31 for i in ids)
    assert len(set(ids)) == len(ids)
    steps = {b - a for a, b in itertools.pairwise(ids)}
    assert len(steps) > 190  # a counter would step by 1


def test_floctrl_a_group_member_whose_subscriber_raises_gets_the_message_again(
    hubs: Any,
) -> None:
    """A node's subscriber in a stateless group raises on a job the first time: that is a
    negative acknowledgement, the job is offered again and processed, flagged redelivered
    (was: "cannot send on", the email left alone, which a group sets aside in quarantine:
    the job never processed)."""
    with worker_pool(hubs, "orch@flo.test", "worker@flo.test", 1) as (supernode, nodes):
        got = Calls()
        failed: list[str] = []

        def work(message: floctrl.Message) -> None:
            if message.body == "3" and not failed:
                failed.append(message.body)
                raise RuntimeError("kaput")
            got.add((message.body, message.redelivered))

        nodes[0].subscribe_to("jobs", work, mode="stateless", group="pool",
                              group_settings=FAST)  # fmt: skip
        member = nodes[0]._consumers[("jobs", "pool")].receiver
        assert wait_until(lambda: member.joined)
        for i in range(5):
            supernode.publish(floctrl.Message(i, "/orch/worker", "jobs", str(i)))
        assert got.wait(lambda c: len(c) >= 5)
        assert sorted(got.items) == [("0", False), ("1", False), ("2", False), ("3", True),
                                     ("4", False)]  # fmt: skip
        assert failed == ["3"]
