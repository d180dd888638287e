"""Every registered mail transport (native, curl) passes the same conformance suite as the
intraprocess pair, unchanged, against the real server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from emailmw._core.config import load_options
from emailmw._transport.factory import make_transport, transport_kind, transport_names
from emailmw.testing import MultiRecipientConformance, TransportConformance, TransportUnderTest
from emailmw.testing.mailserver import MailServer


def _pair(
    mailserver: MailServer, account: Callable[[], str], transport: str
) -> Iterator[TransportUnderTest]:
    me, other = account(), account()
    extra = {"polling-period": 20_000_000} if transport == "curl" else {}
    mine = make_transport(
        load_options({"email": mailserver.config(me, transport=transport, **extra)})
    )
    others = make_transport(
        load_options({"email": mailserver.config(other, transport=transport, **extra)})
    )
    sender, receiver = mine.sender, mine.receiver
    other_sender, other_receiver = others.sender, others.receiver
    other_sender.close()
    yield TransportUnderTest(
        sender, receiver, me, other_receiver=other_receiver, other_address=other
    )
    for closeable in (sender, receiver, other_receiver):
        closeable.close()


#: the registered transports that talk to a mail server (the intraprocess pair has its
#: own run of the suites: ``tests/test_intraprocess_conformance.py``)
MAIL_TRANSPORTS = [name for name in transport_names() if transport_kind(name).build is None]


class TestMailTransportConformance(TransportConformance, MultiRecipientConformance):
    @pytest.fixture(params=MAIL_TRANSPORTS)
    def transport(
        self, request: pytest.FixtureRequest, mailserver: MailServer, account: Callable[[], str]
    ) -> Iterator[TransportUnderTest]:
        yield from _pair(mailserver, account, request.param)
