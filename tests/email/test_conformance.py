"""The native and curl transports pass the same conformance suite as the intraprocess pair,
unchanged, against the real server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from emailmw._core.config import load_options
from emailmw._transport.factory import make_transport
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


class TestNativeConformance(TransportConformance, MultiRecipientConformance):
    @pytest.fixture
    def transport(
        self, mailserver: MailServer, account: Callable[[], str]
    ) -> Iterator[TransportUnderTest]:
        yield from _pair(mailserver, account, "native")


class TestCurlConformance(TransportConformance, MultiRecipientConformance):
    @pytest.fixture
    def transport(
        self, mailserver: MailServer, account: Callable[[], str]
    ) -> Iterator[TransportUnderTest]:
        yield from _pair(mailserver, account, "curl")
