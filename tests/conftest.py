"""Shared fixtures. Intraprocess contexts here; the real mail server lives in conftest of
the email tests (``tests/email/``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import emailmw


@pytest.fixture
def ctx() -> Iterator[emailmw.Context]:
    """An isolated intraprocess context, shut down after the test."""
    context = emailmw.Context({"intraprocess": True})
    yield context
    context.shutdown()


@pytest.fixture(autouse=True)
def _no_default_context_leaks() -> Iterator[None]:
    yield
    if emailmw.ok():
        emailmw.shutdown()
