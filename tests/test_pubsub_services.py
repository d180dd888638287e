"""Entities end to end on the intraprocess transport."""

from __future__ import annotations

import threading

import pytest

import emailmw
from emailmw import (
    ClosedError,
    Context,
    InvalidHeaderError,
    InvalidNameError,
    Publisher,
    RequestId,
    ServiceClient,
    ServiceServer,
    ServiceTimeoutError,
    Subscription,
    UnknownRequestError,
    wait_for_message,
    wait_for_message_with_info,
    wait_for_request,
    wait_for_response_with_info,
)

from .helpers import Recorder


def test_pub_sub_with_message_info(ctx: Context) -> None:
    sub = Subscription("chatter", context=ctx)
    other = Subscription("other", context=ctx)
    pub = Publisher("chatter", context=ctx)
    for i in range(3):
        pub.publish(f"hello {i}")
    got = [wait_for_message_with_info(sub, 5) for _ in range(3)]
    assert [g[0] for g in got if g] == ["hello 0", "hello 1", "hello 2"]
    infos = [g[1] for g in got if g]
    assert {i.publisher_gid for i in infos} == {pub.gid}
    assert [i.sequence_number for i in infos] == [0, 1, 2]
    assert all(i.received_timestamp >= i.source_timestamp > 0 for i in infos)
    assert not other.has_message()
    assert sub.get_message() is None


def test_every_subscription_of_a_topic_gets_every_message(ctx: Context) -> None:
    subs = [Subscription("t", context=ctx) for _ in range(3)]
    Publisher("t", context=ctx).publish("x")
    assert [wait_for_message(s, 5) for s in subs] == ["x", "x", "x"]


def test_publish_custom_headers_travel_but_metadata_cannot_be_forged(ctx: Context) -> None:
    pub = Publisher("t", context=ctx)
    with pytest.raises(InvalidHeaderError, match="metadata"):
        pub.publish("x", headers={"Publisher-GID": "1"})
    with pytest.raises(InvalidHeaderError):
        pub.publish("x", headers={"Trace": "a\r\nb"})


def test_depth_keeps_the_newest_and_counts_drops(ctx: Context) -> None:
    sub = Subscription("t", depth=2, context=ctx)
    pub = Publisher("t", context=ctx)
    probe = Subscription("t", context=ctx)
    for i in range(5):
        pub.publish(str(i))
    # the unbounded probe sees all five, so all five were delivered to both
    assert [wait_for_message(probe, 5) for _ in range(5)] == ["0", "1", "2", "3", "4"]
    assert [sub.get_message(), sub.get_message(), sub.get_message()] == ["3", "4", None]
    assert sub.dropped == 3


def test_closed_subscription_stops_receiving(ctx: Context) -> None:
    sub = Subscription("t", context=ctx)
    probe = Subscription("t", context=ctx)
    sub.close()
    Publisher("t", context=ctx).publish("x")
    assert wait_for_message(probe, 5) == "x"
    assert not sub.has_message()
    with pytest.raises(ClosedError):
        wait_for_message(sub, 1)


@pytest.mark.parametrize("name", ["", "a\nb", "a\rb", "a\x00b"])
def test_names_with_cr_lf_nul_are_rejected(ctx: Context, name: str) -> None:
    for make in (Publisher, Subscription, ServiceClient, ServiceServer):
        with pytest.raises(InvalidNameError):
            make(name, context=ctx)  # type: ignore[operator]


def test_service_call_with_service_info(ctx: Context) -> None:
    server = ServiceServer("add_two_ints", context=ctx)
    client = ServiceClient("add_two_ints", context=ctx)
    seq = client.send_request("a: 2\nb: 3")
    request = wait_for_request(server, 5)
    assert request is not None
    assert request.content == "a: 2\nb: 3"
    assert request.id == RequestId(client.gid, seq)
    server.send_response(request.id, "sum: 5")
    got = wait_for_response_with_info(client, seq, 5)
    assert got is not None
    response, info = got
    assert response == "sum: 5"
    assert (info.client_gid, info.sequence_number) == (client.gid, seq)
    assert info.received_timestamp >= info.source_timestamp
    with pytest.raises(UnknownRequestError):
        server.send_response(request.id, "again")


def test_sequence_numbers_and_responses_are_per_client(ctx: Context) -> None:
    ServiceServer("echo", lambda r: r.upper(), context=ctx)
    a = ServiceClient("echo", context=ctx)
    b = ServiceClient("echo", context=ctx)
    assert [a.send_request("x"), a.send_request("y"), b.send_request("z")] == [0, 1, 0]
    assert wait_for_response_with_info(a, 1, 5) is not None
    got = wait_for_response_with_info(b, 0, 5)
    assert got is not None
    assert got[0] == "Z"
    assert a.get_response(1) is None  # taken already
    assert wait_for_response_with_info(a, 0, 5) is not None


def test_callback_server_and_blocking_call(ctx: Context) -> None:
    def add(request: str) -> str:
        a, b = (int(x) for x in request.split())
        return str(a + b)

    ServiceServer("add", add, context=ctx)
    client = ServiceClient("add", context=ctx)
    assert [client.call(f"{i} {i}", timeout=5) for i in range(5)] == ["0", "2", "4", "6", "8"]


def test_callback_returning_none_or_raising_sends_no_response(ctx: Context) -> None:
    def picky(request: str) -> str | None:
        if request == "raise":
            raise ValueError("bad request")
        return None if request == "ignore" else "ok"

    ServiceServer("picky", picky, context=ctx)
    client = ServiceClient("picky", context=ctx)
    for request in ("ignore", "raise"):
        with pytest.raises(ServiceTimeoutError):
            client.call(request, timeout=0.3)
    assert client.call("fine", timeout=5) == "ok"


def test_every_server_of_a_service_gets_the_request_and_client_keeps_one_response(
    ctx: Context,
) -> None:
    served: Recorder[str] = Recorder()

    def make(tag: str) -> ServiceServer:
        def cb(request: str) -> str:
            served(tag)
            return tag

        return ServiceServer("dup", cb, context=ctx)

    make("first")
    make("second")
    client = ServiceClient("dup", context=ctx)
    assert client.call("q", timeout=5) in {"first", "second"}
    assert sorted(served.wait_count(2)) == ["first", "second"]
    # the second response was dropped as a duplicate: nothing else is waiting
    probe = ServiceServer("dup", lambda r: "probe", context=ctx)
    assert client.call("q2", timeout=5) in {"first", "second", "probe"}
    probe.close()
    assert not client.has_response()


def test_nested_call_from_a_callback_does_not_deadlock(ctx: Context) -> None:
    ServiceServer("inner", lambda r: r + "!", context=ctx)
    inner = ServiceClient("inner", context=ctx)
    ServiceServer("outer", lambda r: inner.call(r, timeout=5), context=ctx)
    assert ServiceClient("outer", context=ctx).call("hi", timeout=10) == "hi!"


def test_call_from_many_threads(ctx: Context) -> None:
    ServiceServer("sq", lambda r: str(int(r) ** 2), context=ctx)
    client = ServiceClient("sq", context=ctx)
    results: Recorder[tuple[int, str]] = Recorder()
    threads = [
        threading.Thread(target=lambda i=i: results((i, client.call(str(i), timeout=10))))
        for i in range(20)
    ]
    for t in threads:
        t.start()
    got = dict(results.wait_count(20))
    assert got == {i: str(i * i) for i in range(20)}


def test_default_context_and_entities_without_context() -> None:
    emailmw.init({"intraprocess": True})
    with pytest.raises(emailmw.ContextAlreadyInitializedError):
        emailmw.init({"intraprocess": True})
    sub = Subscription("t")
    Publisher("t").publish("via default")
    assert wait_for_message(sub, 5) == "via default"
    emailmw.shutdown()
    assert not emailmw.ok()
    with pytest.raises(emailmw.ContextNotInitializedError):
        emailmw.shutdown()
    with pytest.raises(emailmw.ContextNotInitializedError, match="init"):
        Publisher("t")
    with pytest.raises(ClosedError):
        sub.get_message_with_info() or wait_for_message(sub, 0.1)


def test_contexts_are_isolated() -> None:
    with Context({"intraprocess": True}) as a, Context({"intraprocess": True}) as b:
        sub_a = Subscription("t", context=a)
        sub_b = Subscription("t", context=b)
        Publisher("t", context=a).publish("only a")
        assert wait_for_message(sub_a, 5) == "only a"
        assert not sub_b.has_message()


def test_shutdown_closes_entities_and_wakes_waiters() -> None:
    context = Context({"intraprocess": True})
    sub = Subscription("t", context=context)
    pub = Publisher("t", context=context)
    errors: Recorder[type[BaseException]] = Recorder()

    def waiter() -> None:
        try:
            wait_for_message(sub, -1)
        except ClosedError as exc:
            errors(type(exc))

    thread = threading.Thread(target=waiter)
    thread.start()
    context.shutdown()
    assert errors.wait_count(1) == [ClosedError]
    thread.join(5)
    with pytest.raises(ClosedError):
        pub.publish("x")
    with pytest.raises(ClosedError):
        Subscription("t", context=context)
    context.shutdown()  # idempotent


def test_entities_are_context_managers(ctx: Context) -> None:
    with Subscription("t", context=ctx) as sub, Publisher("t", context=ctx) as pub:
        pub.publish("x")
        assert wait_for_message(sub, 5) == "x"
    with pytest.raises(ClosedError):
        pub.publish("y")


def test_mail_waiting_before_the_first_wait_reaches_every_entity_created_before_it() -> None:
    """A context hands out mail once an entity first waits: entities created between the
    context and that wait (a restarted subscriber setting itself up) miss nothing."""

    class Watched(emailmw.IntraprocessReceiver):
        handed = threading.Event()

        def receive(self, timeout: float | None = None) -> list[emailmw.Email]:
            got = super().receive(timeout)
            if got:
                self.handed.set()
            return got

    receiver = Watched()
    sender = emailmw.IntraprocessSender(receiver)
    for topic in ("a", "b"):  # in the mailbox before the context exists
        sender.send(
            emailmw.Email(
                topic, f"for {topic}", headers={"Source-Timestamp": "1", "Publisher-GID": "1"}
            )
        )
    with Context({"intraprocess": True}, sender=sender, receiver=receiver) as ctx:
        assert not receiver.handed.wait(0.5)  # nothing handed out: nobody waits yet
        first = emailmw.Subscription("a", context=ctx)
        second = emailmw.Subscription("b", context=ctx)
        assert emailmw.wait_for_message(first, 5) == "for a"
        assert emailmw.wait_for_message(second, 5) == "for b"
