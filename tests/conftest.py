"""Shared fixtures: intraprocess contexts, and the real local mail server (Postfix + Dovecot
on loopback), started lazily once for the whole run by the first test that needs it. Each
test takes fresh accounts, so mailboxes start empty and tests cannot see each other."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

import emailmw
from emailmw.testing.mailserver import MailServer, federate, unavailable


@pytest.fixture
def ctx() -> Iterator[emailmw.Context]:
    """An isolated intraprocess context, shut down after the test."""
    context = emailmw.Context({"intraprocess": True})
    yield context
    context.shutdown()


class SignalStateLeak(UserWarning):
    """A test left the worker's handling of SIGINT or SIGTERM changed (restored after it)."""


@pytest.fixture(autouse=True)
def _signal_state_kept() -> Iterator[None]:
    """A test that leaves SIGINT or SIGTERM ignored, handled by something of its own or
    blocked in the worker's main thread changes every process the worker starts later
    (a child inherits an ignored signal and the mask): the state is put back after each
    test, with a warning naming the test. (A run started in the background by a shell has
    SIGINT ignored from the start, which every child inherits: a test that sends SIGINT
    to a child resets it there, as tests/pipeline/test_stopping.py does.)"""
    watched = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.getsignal(s) for s in watched}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    if threading.current_thread() is not threading.main_thread():
        return
    moved = [s for s in watched if signal.getsignal(s) is not before[s]]
    for s in moved:
        if before[s] is not None:  # (None: set outside Python, nothing to put back)
            signal.signal(s, before[s])
    changed = [signal.Signals(s).name for s in moved]
    now_mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if now_mask != mask:
        changed.append(f"the signal mask ({sorted(now_mask - mask)} blocked)")
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if changed:
        warnings.warn(SignalStateLeak(f"the test left {', '.join(changed)} changed"),
                      stacklevel=1)  # fmt: skip


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


#: tests that take longest (a minute or more on a quiet machine: whole programs, many
#: processes), started first, so that a parallel run does not end waiting on one of them
#: started last; by the start of their node ID, the longest first
SLOW_FIRST: Final = (
    "tests/email/test_examples.py",
    "tests/test_examples.py",
    "tests/pipeline/test_cluster.py",
    "tests/pipeline/test_pipeline.py",  # (those that start JVMs of their own: the others
    # are in the Spark worker's lane)
    "tests/email/test_matrix.py",
    "tests/email/test_delivery_modes.py",
    "tests/email/test_courier.py",
    "tests/email/test_reliability.py",
    "tests/email/test_cyrus.py",
    "tests/email/test_cli_ros2.py",
)
#: the pytest-xdist group of the tests that run Spark in their own process (the ``spark``
#: fixture's session): one worker runs them all, on one JVM (each worker would start its
#: own, and Spark's work is the CPU's: two JVMs at once on two cores take as long as one
#: after the other, and more memory). Tests that start JVMs of their own (a cluster,
#: ``emailmw analyze`` processes) or none are not in it: they would only make the longest
#: lane of the run longer (three command-line tests made it 130 s longer).
SPARK: Final = "spark"


def _rank(item: pytest.Item) -> int:
    if any(m.args == (SPARK,) for m in item.iter_markers("xdist_group")):
        return -1  # (the longest lane of the run: started first)
    return next((n for n, start in enumerate(SLOW_FIRST) if item.nodeid.startswith(start)),
                len(SLOW_FIRST))  # fmt: skip


@pytest.hookimpl(tryfirst=True)  # (before pytest-xdist reads the xdist_group marks)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the real server is marked ``mailserver``, whichever fixture
    brought it in: ``pytest -m "not mailserver"`` runs the tier that needs nothing.

    For a parallel run (pytest-xdist, ``--dist loadgroup``): the tests that run Spark in
    their process (those that use the ``spark`` fixture, and any marked
    ``xdist_group("spark")``) go to one worker, started first; the tests of a module that
    use a module-scoped fixture of it (a server of its own) run on one worker, which sets
    the fixture up once (its other tests run anywhere); then the slowest tests first
    (:data:`SLOW_FIRST`)."""
    for item in items:
        if "mailserver" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.mailserver)
        if "spark" in getattr(item, "fixturenames", ()):  # (directly, or through another)
            item.add_marker(pytest.mark.xdist_group(SPARK))
        if any(True for _ in item.iter_markers("xdist_group")):
            continue
        module = getattr(item, "module", None)
        if module is not None and _uses_a_module_fixture(item, module):
            item.add_marker(pytest.mark.xdist_group(module.__name__))
    items.sort(key=_rank)


def _uses_a_module_fixture(item: pytest.Item, module: Any) -> bool:
    """Whether ``item`` uses (directly or through another) a fixture set up once a module
    or a class (as its closest definition says)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:  # (another pytest: every test of a module with one, as before)
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        return 'scope="module"' in source
    return any(
        defs and defs[-1].scope in ("module", "class", "package")
        for defs in info.name2fixturedefs.values()
    )


class _GroupsHold:
    """A parallel run whose groups do not hold (a pytest and a pytest-xdist that do not fit:
    a group's tests would each set its fixtures up again, Spark on every worker) stops."""

    @pytest.hookimpl(trylast=True)  # (after pytest-xdist named each test's group)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if not config.getoption("loadgroup", False):
            return
        for item in items:
            if any(True for _ in item.iter_markers("xdist_group")) and "@" not in item.nodeid:
                raise pytest.UsageError(
                    "pytest-xdist's --dist loadgroup does not group with this pytest "
                    f"{pytest.__version__}: install the versions pyproject.toml names"
                )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupsHold(), "emailmw-groups-hold")


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
    if given and _worker():
        given = f"{given}-{_worker()}"  # each pytest-xdist worker runs its own server
    state = Path(given) if given else Path(tempfile.mkdtemp(prefix="emailmw-test-", dir="/tmp"))
    server = MailServer(
        state_dir=state, max_userip_connections=int(os.environ.get("EMAILMW_TEST_MAX_CONN", "10"))
    )
    server.start(fresh=True)
    yield server
    server.stop()
    if not given:
        shutil.rmtree(state, ignore_errors=True)


def _worker() -> str:
    """This pytest-xdist worker's name (``gw0`` ...), '' when the run is not parallel."""
    return os.environ.get("PYTEST_XDIST_WORKER", "")


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
def federated_mailserver(mailserver: MailServer) -> Iterator[MailServer]:
    """Another site: a server for domain ``site-b.test`` that exchanges mail with the run's
    server as two providers do (:func:`~emailmw.testing.mailserver.federate`: each delivers
    the other's domain to its MX port, over SMTP on loopback)."""
    state = Path(tempfile.mkdtemp(prefix="emailmw-siteb-", dir="/tmp"))
    server = MailServer(state_dir=state, domain="site-b.test", pool_size=100)
    server.start(fresh=True)
    federate(mailserver, server)
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
