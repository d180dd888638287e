"""The intraprocess network passes the delivery-mode conformance suite (the real
transports: tests/email/test_delivery_modes.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import emailmw
from emailmw.testing import DeliveryModeConformance, GroupWorld


class TestIntraprocessModes(DeliveryModeConformance):
    @pytest.fixture
    def group_world(self) -> Iterator[GroupWorld]:
        net = emailmw.IntraprocessNetwork()
        publisher = net.context("pub@modes.test", {"recipients": {"to": "group@modes.test"}})
        yield GroupWorld(member=lambda: net.context("group@modes.test"), publisher=publisher)
        publisher.shutdown()
