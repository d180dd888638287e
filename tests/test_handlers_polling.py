"""Handlers and the polling manager, fed by an intraprocess receiver."""

from __future__ import annotations

import logging
import threading

import pytest

from emailmw import Email, Gid, MessageInfo, ServiceInfo, intraprocess_pair
from emailmw._handlers import ServiceHandler, SubscriptionHandler
from emailmw._polling import PollingManager
from emailmw._protocol import PublishRoute, ResponseRoute, Route

from .helpers import Recorder


class Sink:
    def __init__(self) -> None:
        self.messages: list[tuple[str, MessageInfo]] = []
        self.responses: list[tuple[str, ServiceInfo]] = []

    def _push_message(self, body: str, info: MessageInfo) -> None:
        self.messages.append((body, info))

    def _push_response(self, body: str, info: ServiceInfo) -> None:
        self.responses.append((body, info))


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


def test_service_handler_drops_a_response_already_received() -> None:
    handler = ServiceHandler()
    client = Sink()
    handler.register_client(5, client)
    for seq in (0, 1, 0, 1, 2):
        info = ServiceInfo(1, 2, Gid(5), seq)
        handler(Email("svc", f"r{seq}", in_reply_to="<x@y>"), ResponseRoute("svc", info))
    assert [body for body, _ in client.responses] == ["r0", "r1", "r2"]


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

    def failing(email: Email, route: Route) -> None:
        if email.body == "boom":
            raise RuntimeError("handler bug")

    def recording(email: Email, route: Route) -> None:
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
    manager.register_handler(lambda email, route: seen(email.body))
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
    manager.register_handler(lambda email, route: seen(email.body))
    manager.start()
    try:
        sender.send(Email("t", "after", headers={"Source-Timestamp": "1", "Publisher-GID": "1"}))
        assert seen.wait_count(1) == ["after"]
        assert calls["n"] >= 3
    finally:
        manager.stop()
