"""Handlers and the polling manager, fed by an intraprocess receiver."""

from __future__ import annotations

import logging
import threading

import pytest

from emailmw import Email, Gid, MessageInfo, ServiceInfo, intraprocess_pair
from emailmw._core.protocol import PublishRoute, RequestRoute, ResponseRoute, Route
from emailmw._delivery.handlers import ServiceHandler, SubscriptionHandler
from emailmw._delivery.polling import PollingManager, Ticket
from emailmw._transport.base import IncomingEmail

from .helpers import Recorder


class Sink:
    def __init__(self) -> None:
        self.messages: list[tuple[str, MessageInfo]] = []
        self.responses: list[tuple[str, ServiceInfo]] = []
        self.tickets: list[Ticket] = []

    def _push_message(self, body: str, info: MessageInfo, ticket: Ticket) -> None:
        self.messages.append((body, info))
        self.tickets.append(ticket)

    def _push_response(self, email: Email, info: ServiceInfo, ticket: Ticket) -> None:
        self.responses.append((email.body, info))
        self.tickets.append(ticket)


def _pub(topic: str, body: str = "b", seq: int = 0) -> tuple[Email, PublishRoute]:
    return Email(topic, body), PublishRoute(topic, MessageInfo(1, 2, Gid(1), seq))


def test_subscription_handler_delivers_to_every_subscription_of_the_subject() -> None:
    handler = SubscriptionHandler()
    a, b, other = Sink(), Sink(), Sink()
    handler.register("chatter", a)
    handler.register("chatter", b)
    handler.register("other", other)
    handler(*_pub("chatter", "hi"))
    assert [m for m, _ in a.messages] == ["hi"]
    assert [m for m, _ in b.messages] == ["hi"]
    assert other.messages == []
    handler.unregister("chatter", a)
    handler(*_pub("chatter", "again"))
    assert len(a.messages) == 1
    assert len(b.messages) == 2


def test_service_handler_hands_responses_to_the_client_of_their_gid() -> None:
    handler = ServiceHandler()
    client = Sink()
    handler.register_client(5, client)
    for seq in (0, 1, 0):
        info = ServiceInfo(1, 2, Gid(5), seq)
        handler(Email("svc", f"r{seq}", in_reply_to="<x@y>"), ResponseRoute("svc", info))
    # the client decides what it keeps (tests/test_pubsub_services.py)
    assert [body for body, _ in client.responses] == ["r0", "r1", "r0"]


def test_service_handler_ignores_responses_for_other_clients() -> None:
    handler = ServiceHandler()
    client = Sink()
    handler.register_client(5, client)
    info = ServiceInfo(1, 2, Gid(6), 0)
    handler(Email("svc", "r", in_reply_to="<x@y>"), ResponseRoute("svc", info))
    assert client.responses == []


def test_polling_manager_keeps_order_and_survives_a_failing_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sender, receiver = intraprocess_pair()
    seen: Recorder[str] = Recorder()

    def failing(email: Email, route: Route, ticket: Ticket) -> None:
        if email.body == "boom":
            raise RuntimeError("handler bug")

    def recording(email: Email, route: Route, ticket: Ticket) -> None:
        seen(email.body)

    manager = PollingManager(receiver)
    manager.register_handler(failing)
    manager.register_handler(recording)
    manager.start()
    try:
        with caplog.at_level(logging.ERROR, logger="emailmw"):
            for body in ["1", "boom", "2", "3"]:
                sender.send(
                    Email("t", body, headers={"Source-Timestamp": "1", "Publisher-GID": "1"})
                )
            assert seen.wait_count(4) == ["1", "boom", "2", "3"]
        failure = next(r for r in caplog.records if "failed on email" in r.getMessage())
        assert "@intraprocess.invalid>" in failure.getMessage()  # names the Message-ID
        assert manager.running
    finally:
        assert manager.stop(5.0)
    assert not manager.running
    assert threading.current_thread().name != "emailmw-polling"


def test_polling_manager_logs_and_skips_foreign_mail(caplog: pytest.LogCaptureFixture) -> None:
    sender, receiver = intraprocess_pair()
    seen: Recorder[str] = Recorder()
    manager = PollingManager(receiver)
    manager.register_handler(lambda email, route, ticket: seen(email.body))
    manager.start()
    try:
        with caplog.at_level(logging.INFO, logger="emailmw"):
            sender.send(Email("Lunch?", "noon"))
            sender.send(Email("t", "ours", headers={"Source-Timestamp": "1", "Publisher-GID": "1"}))
            assert seen.wait_count(1) == ["ours"]
        assert any(
            "left alone" in r.getMessage() and "Lunch?" in r.getMessage() for r in caplog.records
        )
    finally:
        manager.stop()


def test_polling_manager_retries_after_receiver_errors() -> None:
    sender, receiver = intraprocess_pair()
    calls = {"n": 0}
    original = receiver.receive

    def flaky(timeout: float | None = None) -> list[Email]:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise OSError("connection reset")
        return original(timeout)

    receiver.receive = flaky  # type: ignore[method-assign]
    seen: Recorder[str] = Recorder()
    manager = PollingManager(receiver)
    manager.register_handler(lambda email, route, ticket: seen(email.body))
    manager.start()
    try:
        sender.send(Email("t", "after", headers={"Source-Timestamp": "1", "Publisher-GID": "1"}))
        assert seen.wait_count(1) == ["after"]
        assert calls["n"] >= 3
    finally:
        manager.stop()


class Settled:
    """An IncomingEmail's settle callback that records the outcomes."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def incoming(self, email: Email, redelivered: bool = False) -> IncomingEmail:
        return IncomingEmail(
            email,
            redelivered=redelivered,
            settle=lambda outcome, then: self.outcomes.append(outcome),
        )


OURS = {"Source-Timestamp": "1", "Publisher-GID": "1"}


def test_an_email_is_acknowledged_once_every_holder_let_go() -> None:
    settled = Settled()
    handler = SubscriptionHandler()
    a, b = Sink(), Sink()
    handler.register("t", a)
    handler.register("t", b)
    manager = PollingManager(intraprocess_pair()[1])
    manager.register_handler(handler)
    manager.dispatch(settled.incoming(Email("t", "x", headers=OURS, message_id="<1@t>")))
    assert settled.outcomes == []  # both subscriptions still hold it
    a.tickets[0].release()
    assert settled.outcomes == []
    b.tickets[0].release()
    assert settled.outcomes == ["ack"]
    # an email nobody wanted is acknowledged at once
    manager.dispatch(settled.incoming(Email("elsewhere", "x", headers=OURS, message_id="<2@t>")))
    assert settled.outcomes == ["ack", "ack"]


def test_foreign_mail_is_left_and_broken_metadata_quarantined() -> None:
    settled = Settled()
    manager = PollingManager(intraprocess_pair()[1])
    manager.dispatch(settled.incoming(Email("Lunch?", "noon", message_id="<3@t>")))
    broken = {"Publisher-GID": "seven", "Source-Timestamp": "1"}
    manager.dispatch(settled.incoming(Email("t", "x", headers=broken, message_id="<4@t>")))
    assert settled.outcomes == ["leave", "quarantine"]


def test_a_second_copy_of_a_message_id_is_dropped_and_acknowledged() -> None:
    settled = Settled()
    sink = Sink()
    handler = SubscriptionHandler()
    handler.register("t", sink)
    manager = PollingManager(intraprocess_pair()[1])
    manager.register_handler(handler)
    for _ in range(2):
        manager.dispatch(settled.incoming(Email("t", "x", headers=OURS, message_id="<5@t>")))
    assert len(sink.messages) == 1
    assert manager.duplicates == 1
    assert settled.outcomes == ["ack"]  # the copy; the original is still held


def test_the_redelivered_flag_reaches_the_info() -> None:
    sink = Sink()
    handler = SubscriptionHandler()
    handler.register("t", sink)
    manager = PollingManager(intraprocess_pair()[1])
    manager.register_handler(handler)
    manager.dispatch(Settled().incoming(Email("t", "x", headers=OURS), redelivered=True))
    assert sink.messages[0][1].redelivered


def test_no_exception_in_classifying_stops_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    from emailmw._delivery import polling

    def broken(*args: object, **kwargs: object) -> Route:
        raise ValueError("a bug")

    monkeypatch.setattr(polling, "classify", broken)
    settled = Settled()
    manager = PollingManager(intraprocess_pair()[1])
    manager.dispatch(settled.incoming(Email("t", "x", headers=OURS)))  # does not raise
    assert settled.outcomes == ["quarantine"]


def test_a_request_whose_reply_would_leave_the_allowed_domains_is_not_served() -> None:
    handler = ServiceHandler(frozenset({"example.test"}))
    served: list[str] = []

    class Server:
        def _push_request(self, email: Email, info: ServiceInfo, ticket: Ticket) -> None:
            served.append(email.reply_to[0] if email.reply_to else email.from_)

    handler.register_server("svc", Server())
    info = ServiceInfo(1, 2, Gid(5), 0)
    for reply_to in ("me@example.test", "Me <me@EXAMPLE.test>", "them@elsewhere.test"):
        request = Email("svc", "q", "c@example.test", reply_to=reply_to, message_id="<q@c>")
        handler(request, RequestRoute("svc", info))
    assert served == ["me@example.test", "Me <me@EXAMPLE.test>"]
    assert handler.refused_requests == 1


def test_receive_health_speaks_once_per_change_of_state() -> None:
    """A blip (a failure its first retry cures) is not news; a failure that lasts is one
    ERROR, the same failure again nothing, a different one another ERROR, the return one
    WARNING."""
    from emailmw import AuthenticationError, ReceiveError
    from emailmw._core.health import Health

    health = Health("receiving", "retrying every second or less")
    assert health.failed(ReceiveError("connection dropped"), 0.0) is None
    assert health.succeeded(0.1) is None
    assert health.error is None

    refused = AuthenticationError("login refused")
    assert health.failed(ReceiveError("connection dropped"), 1.0) is None
    change = health.failed(refused, 1.1)
    assert change is not None
    assert change[0] == "error"
    assert "login refused" in change[1]
    assert health.error is refused
    for second in range(2, 12):
        assert health.failed(AuthenticationError("login refused"), float(second)) is None
    change = health.failed(ReceiveError("no folder 'Robots'"), 12.0)
    assert change is not None
    assert change[0] == "error"
    assert "differently" in change[1]
    back = health.succeeded(13.0)
    assert back == ("warning", "receiving works again after 12.0 s and 13 attempts")
    assert health.error is None
    assert health.succeeded(14.0) is None


def test_a_flood_of_refused_mail_is_one_line_per_kind_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from emailmw._delivery.polling import RefusalLog

    log = RefusalLog(interval=10)
    with caplog.at_level(logging.WARNING, logger="emailmw"):
        for i in range(4000):
            log.refused("unsigned", f"quarantined <{i}@x>: unsigned", "no signature", i / 1000)
        log.refused("denied", "quarantined <d@x>: denied", "no grant to publish '/x'", 4.0)
        log.refused("denied", "quarantined <e@x>: denied", "no grant to publish '/y'", 4.0)
        log.refused("unsigned", "quarantined <late@x>: unsigned", "no signature", 10.5)
        log.flush(11.0, all_=True)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "quarantined <0@x>: unsigned",
        "quarantined <d@x>: denied",
        "quarantined <e@x>: denied",
        "quarantined 3999 more emails in the last 10 s as unsigned (the last: no signature)",
        "quarantined <late@x>: unsigned",
    ]
