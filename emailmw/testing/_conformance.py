"""The transport conformance suite: what every sender/receiver pair must do.

Use it by subclassing in a test module and providing the ``transport`` fixture::

    class TestMyTransport(TransportConformance):
        @pytest.fixture
        def transport(self):
            sender, receiver = make_my_pair()
            yield TransportUnderTest(sender, receiver, address="me@example.test")
            sender.close(); receiver.close()

Transports that deliver to several mailboxes also subclass :class:`MultiRecipientConformance`
and fill ``other_receiver``/``other_address``. The tests only assume that mail sent to
``address`` reaches ``receiver`` eventually (within ``delivery_timeout``); each test marks
its mail with a unique token, so mailboxes may hold mail from earlier tests.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from .._core.errors import ClosedError, InvalidHeaderError, InvalidNameError, MessageTooLargeError
from .._core.types import Email, Headers
from .._transport.base import EmailReceiver, EmailSender, IncomingEmail

__all__ = [
    "MultiRecipientConformance",
    "TransportConformance",
    "TransportUnderTest",
    "receive_matching",
]

BODIES = [
    "",
    "x",
    "hello world",
    "two\nlines",
    "crlf\r\nline\r\nbreaks",
    "mixed\nlf\r\nand crlf\r\n",
    "bare\rcr",
    "trailing newline\n",
    "\n\nleading blank lines",
    "two trailing\n\n",
    ".",
    ".leading dot\n.\n..\n. also",
    "From the start of a line\nFrom here too",
    "tab\tand  spaces  ",
    "unicode: héllo wörld ✓ 日本語 🚀",
    "a" * 5000,
    ("line of 999 bytes " + "b" * 981 + "\n") * 3,
    "é" * 600,
    "data: [1, 2, 3]\nnested:\n  key: value\n",
]


@dataclass
class TransportUnderTest:
    """A sender and a receiver that gets the mail sent to ``address``."""

    sender: EmailSender
    receiver: EmailReceiver
    address: str
    other_receiver: EmailReceiver | None = None
    other_address: str | None = None
    delivery_timeout: float = 15.0


def receive_matching(
    receiver: EmailReceiver,
    predicate: Callable[[Email], bool],
    count: int,
    timeout: float,
) -> list[Email]:
    """Receive until ``count`` emails satisfy ``predicate`` or ``timeout`` passes.

    Returns the matching emails (possibly fewer than ``count``, possibly more if they came
    in the last batch), in arrival order.
    """
    found: list[Email] = []
    deadline = time.monotonic() + timeout
    while len(found) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        found.extend(e for e in receiver.receive(min(remaining, 1.0)) if predicate(e))
    return found


def _token() -> str:
    return uuid.uuid4().hex[:12]


class TransportConformance:
    """Conformance tests every sender/receiver pair must pass."""

    @pytest.fixture
    def transport(self) -> Iterator[TransportUnderTest]:
        raise NotImplementedError("subclasses provide the transport fixture")

    def _send_and_receive(self, t: TransportUnderTest, email: Email) -> Email:
        t.sender.send(email)
        t.sender.flush(t.delivery_timeout)
        got = receive_matching(
            t.receiver, lambda e: e.subject == email.subject, 1, t.delivery_timeout
        )
        assert got, f"email {email.subject!r} not received within {t.delivery_timeout} s"
        return got[0]

    def test_send_receive_round_trip(self, transport: TransportUnderTest) -> None:
        subject = f"conformance/round-trip/{_token()}"
        sent = Email(
            subject=subject,
            body="the body",
            from_=transport.sender.address,
            to=(transport.address,),
            headers=Headers({"Source-Timestamp": "123", "Publisher-GID": "42"}),
        )
        got = self._send_and_receive(transport, sent)
        assert got.subject == subject
        assert got.body == "the body"
        assert got.headers["Source-Timestamp"] == "123"
        assert got.headers["publisher-gid"] == "42"
        assert transport.address in got.to
        assert got.message_id
        assert got.message_id.startswith("<")
        assert got.message_id.endswith(">")

    @pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
    def test_body_is_exact(self, transport: TransportUnderTest, body: str) -> None:
        subject = f"conformance/body/{_token()}"
        got = self._send_and_receive(
            transport, Email(subject, body, transport.sender.address, (transport.address,))
        )
        assert got.body == body

    @pytest.mark.parametrize(
        "name",
        ["données/température", "トピック", "emoji 🚀 topic", "  spaced  out  ", "=?utf-8?q?x?="],
    )
    def test_subject_is_exact(self, transport: TransportUnderTest, name: str) -> None:
        subject = f"{name} {_token()}"
        got = self._send_and_receive(
            transport, Email(subject, "b", transport.sender.address, (transport.address,))
        )
        assert got.subject == subject

    def test_every_email_arrives_once(self, transport: TransportUnderTest) -> None:
        subject = f"conformance/many/{_token()}"
        bodies = [str(i) for i in range(20)]
        for body in bodies:
            transport.sender.send(Email(subject, body, transport.sender.address, transport.address))
        transport.sender.flush(transport.delivery_timeout)
        got = receive_matching(
            transport.receiver, lambda e: e.subject == subject, 20, transport.delivery_timeout * 2
        )
        assert sorted(e.body for e in got) == sorted(bodies)
        assert len({e.message_id for e in got}) == 20
        # nothing more comes: each email is received exactly once
        extra = receive_matching(transport.receiver, lambda e: e.subject == subject, 1, 0.5)
        assert extra == []

    def test_incoming_emails_are_handed_out_once_and_settle_once(
        self, transport: TransportUnderTest
    ) -> None:
        subject = f"conformance/incoming/{_token()}"
        transport.sender.send(
            Email(
                subject,
                "settle me",
                transport.sender.address,
                transport.address,
                headers={"Source-Timestamp": "1", "Publisher-GID": "1"},
            )
        )
        transport.sender.flush(transport.delivery_timeout)
        found: list[IncomingEmail] = []
        deadline = time.monotonic() + transport.delivery_timeout
        while not found and time.monotonic() < deadline:
            for item in transport.receiver.receive_incoming(1.0):
                if item.email.subject == subject:
                    found.append(item)
                else:
                    item.leave()
        assert len(found) == 1, f"email {subject!r} not handed out once"
        assert found[0].email.body == "settle me"
        assert found[0].redelivered is False
        for settle in (found[0].ack, found[0].ack, found[0].leave, found[0].quarantine):
            settle()  # the first decides; the others do nothing and raise nothing
        assert receive_matching(transport.receiver, lambda e: e.subject == subject, 1, 0.5) == []

    def test_reply_threads_and_goes_to_sender(self, transport: TransportUnderTest) -> None:
        subject = f"conformance/reply/{_token()}"
        request = self._send_and_receive(
            transport,
            Email(subject, "question", transport.sender.address, (transport.address,)),
        )
        assert request.message_id
        transport.sender.reply(request, "answer", {"Client-GID": "7"})
        transport.sender.flush(transport.delivery_timeout)
        got = receive_matching(
            transport.receiver,
            lambda e: e.subject == subject and e.in_reply_to is not None,
            1,
            transport.delivery_timeout,
        )
        assert got, "reply not received"
        reply = got[0]
        assert reply.body == "answer"
        assert reply.in_reply_to == request.message_id
        assert reply.references[-1] == request.message_id
        assert reply.to == (request.from_,)
        assert reply.headers["Client-GID"] == "7"

    def test_reply_goes_to_reply_to(self, transport: TransportUnderTest) -> None:
        subject = f"conformance/reply-to/{_token()}"
        original = Email(
            subject,
            "q",
            "nobody@example.invalid",
            (transport.address,),
            reply_to=(transport.address,),
            message_id=f"<{_token()}@example.invalid>",
        )
        transport.sender.reply(original, "a")
        transport.sender.flush(transport.delivery_timeout)
        got = receive_matching(
            transport.receiver, lambda e: e.subject == subject, 1, transport.delivery_timeout
        )
        assert got
        assert got[0].in_reply_to == original.message_id
        assert got[0].to == (transport.address,)

    def test_history_returns_the_newest_emails_of_a_subject(
        self, transport: TransportUnderTest
    ) -> None:
        subject = f"conformance/history/{_token()}"
        # one at a time: a mail server may store a burst in another order than it was sent
        for sub, body in (
            (subject, "one"),
            (subject, "two"),
            (subject, "three"),
            (f"{subject}/other", "x"),
        ):
            self._send_and_receive(
                transport, Email(sub, body, transport.sender.address, transport.address)
            )
        # the store still has them after they were received: the newest two, oldest first
        assert [e.body for e in transport.receiver.history(subject, 2)] == ["two", "three"]
        assert [e.body for e in transport.receiver.history(subject, 10)] == ["one", "two", "three"]
        assert transport.receiver.history(f"{subject}/none", 5) == []

    def test_disconnect_keeps_the_position(self, transport: TransportUnderTest) -> None:
        """A receiver that gave its session back (``disconnect``) hands out, at its next
        receive, what arrived meanwhile: nothing is skipped."""
        before = Email(subject=f"conformance/before/{_token()}", body="1",
                       from_=transport.sender.address, to=(transport.address,))  # fmt: skip
        self._send_and_receive(transport, before)
        assert transport.receiver.disconnect()
        meanwhile = Email(subject=f"conformance/meanwhile/{_token()}", body="2",
                          from_=transport.sender.address, to=(transport.address,))  # fmt: skip
        self._send_and_receive(transport, meanwhile)

    def test_receive_times_out_empty(self, transport: TransportUnderTest) -> None:
        # drain whatever is there, then a quiet mailbox gives [] once the timeout passes
        while transport.receiver.receive(0.2):
            pass
        assert transport.receiver.receive(0.2) == []

    def test_wakeup_interrupts_blocked_receive(self, transport: TransportUnderTest) -> None:
        while transport.receiver.receive(0.2):
            pass
        done = threading.Event()
        result: list[list[Email]] = []

        def blocked() -> None:
            result.append(transport.receiver.receive(None))
            done.set()

        thread = threading.Thread(target=blocked, daemon=True)
        thread.start()
        # keep waking until the blocked call returns (the first wakeup may come before the
        # thread blocks); the call must return without any email having been sent
        deadline = time.monotonic() + 10
        while not done.wait(0.05) and time.monotonic() < deadline:
            transport.receiver.wakeup()
        assert done.is_set(), "receive(None) did not return after wakeup()"
        assert result == [[]]

    def test_header_injection_is_refused(self, transport: TransportUnderTest) -> None:
        addr = transport.sender.address
        with pytest.raises(InvalidNameError):
            transport.sender.send(Email("a\r\nBcc: victim@example.test", "b", addr, "x@y.test"))
        with pytest.raises(InvalidHeaderError):
            transport.sender.send(
                Email("s", "b", addr, "x@y.test", headers={"X-Evil": "v\r\nBcc: v@example.test"})
            )
        with pytest.raises(InvalidHeaderError):
            transport.sender.send(Email("s", "b", addr, "x@y.test", headers={"Subject": "dup"}))

    def test_too_large_body_is_refused(self, transport: TransportUnderTest) -> None:
        big = "x" * (10 * 1024 * 1024 + 1)
        with pytest.raises(MessageTooLargeError):
            transport.sender.send(Email("big", big, transport.sender.address, transport.address))

    def test_closed_sender_refuses(self, transport: TransportUnderTest) -> None:
        transport.sender.close()
        with pytest.raises(ClosedError):
            transport.sender.send(Email("s", "b", transport.sender.address, transport.address))

    def test_closed_receiver_refuses(self, transport: TransportUnderTest) -> None:
        transport.receiver.close()
        with pytest.raises(ClosedError):
            transport.receiver.receive(0)


class MultiRecipientConformance:
    """Extra tests for transports that deliver to several mailboxes (cc and bcc)."""

    @pytest.fixture
    def transport(self) -> Iterator[TransportUnderTest]:
        raise NotImplementedError("subclasses provide the transport fixture")

    def test_cc_and_bcc_are_delivered_and_bcc_is_hidden(
        self, transport: TransportUnderTest
    ) -> None:
        assert transport.other_receiver is not None
        assert transport.other_address
        subject = f"conformance/bcc/{_token()}"
        transport.sender.send(
            Email(
                subject,
                "b",
                transport.sender.address,
                (transport.address,),
                bcc=(transport.other_address,),
            )
        )
        transport.sender.flush(transport.delivery_timeout)
        mine = receive_matching(
            transport.receiver, lambda e: e.subject == subject, 1, transport.delivery_timeout
        )
        theirs = receive_matching(
            transport.other_receiver, lambda e: e.subject == subject, 1, transport.delivery_timeout
        )
        assert len(mine) == 1
        assert len(theirs) == 1
        for email in (*mine, *theirs):
            assert email.bcc == ()
            assert transport.other_address not in email.to + email.cc
            assert "Bcc" not in email.headers

        subject = f"conformance/cc/{_token()}"
        transport.sender.send(
            Email(
                subject,
                "c",
                transport.sender.address,
                (transport.address,),
                cc=(transport.other_address,),
            )
        )
        transport.sender.flush(transport.delivery_timeout)
        theirs = receive_matching(
            transport.other_receiver, lambda e: e.subject == subject, 1, transport.delivery_timeout
        )
        assert len(theirs) == 1
        assert theirs[0].cc == (transport.other_address,)
