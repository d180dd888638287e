"""Tests against the real local mail server; the fixtures are in ``tests/conftest.py``,
plus the peer processes a test starts (stopped after it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import MakeContext

from .helpers import Peer

__all__ = ["MakeContext"]


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        peer.stop()
