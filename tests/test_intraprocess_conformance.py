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
