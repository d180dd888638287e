"""Cyrus IMAP (Debian 12's 3.6, ``MailServer(imap_server="cyrus")``) passes what Dovecot
passes, unchanged: the transport conformance suite on both transports and the
delivery-mode suite. Postfix delivers to Cyrus over LMTP; every IMAP session is Cyrus's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emailmw._core.config import load_options
from emailmw._transport.group.imap import ImapGroupStore
from emailmw.testing import (
    DeliveryModeConformance,
    GroupWorld,
    MultiRecipientConformance,
    TransportConformance,
    TransportUnderTest,
)
from emailmw.testing.mailserver import MailServer

from .helpers import check_batch_delivery_record, other_imap_server
from .test_conformance import MAIL_TRANSPORTS, _pair
from .test_delivery_modes import _world


@pytest.fixture(scope="module")
def cyrus(mailserver: MailServer) -> Iterator[MailServer]:
    del mailserver  # (started after the run's: Postfix and Dovecot are there)
    yield from other_imap_server("cyrus")


class TestCyrusTransportConformance(TransportConformance, MultiRecipientConformance):
    @pytest.fixture(params=MAIL_TRANSPORTS)
    def transport(
        self, request: pytest.FixtureRequest, cyrus: MailServer
    ) -> Iterator[TransportUnderTest]:
        yield from _pair(cyrus, cyrus.fresh_account, request.param)


class TestCyrusDeliveryModes(DeliveryModeConformance):
    """On the native transport: a group's store is imapclient's on both (the transports
    differ in their receivers, which the conformance suite above covers on Cyrus)."""

    @pytest.fixture
    def group_world(self, cyrus: MailServer) -> Iterator[GroupWorld]:
        yield from _world(cyrus, "native")


def test_the_claim_lock_is_released_however_often_it_is_taken_in_a_second(
    cyrus: MailServer,
) -> None:
    """Cyrus deletes a folder by renaming it to ``DELETED.<name>.<second>``: a second
    DELETE of the lock folder within a second answered "Mailbox already exists" and left
    the lock in place, naming no holder, so every member waited 5 s to break it (the
    delivery-mode suite took 30 s a test here). Released three times in a row, it is gone
    each time."""
    options = load_options({"email": cyrus.config(cyrus.fresh_account())})
    store = ImapGroupStore(options, "crew")
    try:
        store.join("m1")
        (record,) = store.members()
        for _ in range(3):
            assert store.try_lock(record)
            store.unlock(record)
            assert not store.locked()
    finally:
        store.close()


def test_a_batch_s_delivery_record_grows_reads_back_and_moves_with_its_claim(
    cyrus: MailServer,
) -> None:
    check_batch_delivery_record(cyrus)
