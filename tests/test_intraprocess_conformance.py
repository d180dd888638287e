"""The intraprocess pair passes the shared transport conformance suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emailmw import intraprocess_pair
from emailmw.testing import TransportConformance, TransportUnderTest


class TestIntraprocessConformance(TransportConformance):
    @pytest.fixture
    def transport(self) -> Iterator[TransportUnderTest]:
        sender, receiver = intraprocess_pair("alice@example.test")
        yield TransportUnderTest(sender, receiver, address="alice@example.test")
        sender.close()
        receiver.close()


def test_intraprocess_hides_bcc_and_assigns_message_ids() -> None:
    from emailmw import Email

    sender, receiver = intraprocess_pair("alice@example.test")
    sender.send(
        Email("t", "b", "alice@example.test", "bob@example.test", bcc="secret@example.test")
    )
    (got,) = receiver.receive(5)
    assert got.bcc == ()
    assert got.to == ("bob@example.test",)
    assert got.message_id is not None
    assert got.replace(subject="u").subject == "u"
    assert got.replace(subject="u").message_id == got.message_id


def test_every_registered_transport_runs_the_suites() -> None:
    """The mail transports run them over the real server (``tests/email/test_conformance``,
    one class over every registered one that builds a sender and a receiver), the
    intraprocess pair here."""
    from emailmw._transport.factory import transport_kind, transport_names

    from .email.test_conformance import MAIL_TRANSPORTS

    assert MAIL_TRANSPORTS == ["native", "curl"]
    assert set(transport_names()) == {*MAIL_TRANSPORTS, "intraprocess"}
    assert transport_kind("intraprocess").build is not None
