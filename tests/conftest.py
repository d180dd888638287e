"""Shared fixtures: intraprocess contexts, and the real local mail server (Postfix + Dovecot
on loopback), started lazily once for the whole run by the first test that needs it. Each
test takes fresh accounts, so mailboxes start empty and tests cannot see each other."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import emailmw
from emailmw.testing.mailserver import MailServer, unavailable


@pytest.fixture
def ctx() -> Iterator[emailmw.Context]:
    """An isolated intraprocess context, shut down after the test."""
    context = emailmw.Context({"intraprocess": True})
    yield context
    context.shutdown()


@pytest.fixture(autouse=True)
def _own_state_home(tmp_path_factory: pytest.TempPathFactory,
                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Each test's own ``$XDG_STATE_HOME`` (the accounts' sending ledgers): tests reuse
    account names (``me@example.test``, a run's ``u0001``) and must not spend each
    other's budget, nor the machine's user's. And no graph daemon started by the command
    line (each would hold a test's account open for hours): the daemon's tests start
    theirs themselves (``tests/email/test_daemon.py``)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    monkeypatch.setenv("EMAILMW_NO_DAEMON", "1")


@pytest.fixture(autouse=True)
def _no_default_context_leaks() -> Iterator[None]:
    yield
    if emailmw.ok():
        emailmw.shutdown()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the real server is marked ``mailserver``, whichever fixture
    brought it in: ``pytest -m "not mailserver"`` runs the tier that needs nothing."""
    for item in items:
        if "mailserver" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.mailserver)


@pytest.fixture(scope="session")
def mailserver() -> Iterator[MailServer]:
    """The run's own server: its own state directory (``EMAILMW_TEST_MAIL_STATE``, else a
    fresh one) on free ports, so that two test runs on one machine never meet. Its Dovecot
    allows an account 10 IMAP sessions from one address, Dovecot's default (what users'
    servers have; ``EMAILMW_TEST_MAX_CONN`` sets another to compare).

    Where it cannot run (not root) its tests are skipped with the reason, except where the
    run must test everything (``EMAILMW_REQUIRE_MAILSERVER=1``, which CI sets): there they
    fail."""
    reason = unavailable()
    if reason is not None:
        if os.environ.get("EMAILMW_REQUIRE_MAILSERVER", "") not in ("", "0"):
            pytest.fail(f"{reason} (EMAILMW_REQUIRE_MAILSERVER is set)")
        pytest.skip(reason)
    given = os.environ.get("EMAILMW_TEST_MAIL_STATE")
    state = Path(given) if given else Path(tempfile.mkdtemp(prefix="emailmw-test-", dir="/tmp"))
    server = MailServer(
        state_dir=state, max_userip_connections=int(os.environ.get("EMAILMW_TEST_MAX_CONN", "10"))
    )
    server.start(fresh=True)
    yield server
    server.stop()
    if not given:
        shutil.rmtree(state, ignore_errors=True)


def _independent_server(domain: str, base: MailServer) -> Iterator[MailServer]:
    """Another Postfix + Dovecot for ``domain``: its own state directory and free ports,
    exchanging no mail with the others (only gateways join them)."""
    name = domain.split(".", maxsplit=1)[0]
    state = Path(tempfile.mkdtemp(prefix=f"emailmw-{name}-", dir="/tmp"))
    server = MailServer(state_dir=state, domain=domain, pool_size=100)
    del base  # started after the run's first server, which checks that servers can run
    server.start(fresh=True)
    yield server
    server.stop()
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def second_mailserver(mailserver: MailServer) -> Iterator[MailServer]:
    """An independent mail server for domain ``b.test`` (multi-server tests)."""
    yield from _independent_server("b.test", mailserver)


@pytest.fixture(scope="session")
def third_mailserver(mailserver: MailServer) -> Iterator[MailServer]:
    """An independent mail server for domain ``c.test`` (multi-server tests)."""
    yield from _independent_server("c.test", mailserver)


@pytest.fixture
def account(mailserver: MailServer) -> Callable[[], str]:
    """Call it for a fresh ``user@example.test`` nobody has used in this run."""
    return mailserver.fresh_account


MakeContext = Callable[..., emailmw.Context]


@pytest.fixture
def email_context(mailserver: MailServer) -> Iterator[MakeContext]:
    """``email_context(address, to=..., transport=..., **keys)``: a Context on the real
    server, shut down after the test."""
    made: list[emailmw.Context] = []

    def make(address: str, **kwargs: Any) -> emailmw.Context:
        context = emailmw.Context({"email": mailserver.config(address, **kwargs)})
        made.append(context)
        return context

    yield make
    for context in made:
        context.shutdown()


@pytest.fixture
def closing() -> Iterator[Callable[[Any], Any]]:
    """``closing(outbox)``: the outbox, closed after the test."""
    made: list[Any] = []
    yield lambda outbox: made.append(outbox) or outbox
    for outbox in made:
        outbox.close()
