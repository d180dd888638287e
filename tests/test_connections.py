"""The connection budget of a process and of the machine (``limits: max-connections``),
without a server: slots are taken up to the limit, a connection beyond it waits for one to
be given back, then is one clear error; many threads never hold more than the limit;
another process's slots count, and come back when it dies."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

import emailmw
from emailmw._core.config import load_options
from emailmw._transport.connections import in_use, take_slot
from tests.helpers import connections_held_elsewhere


def _account() -> tuple[str, str]:
    return f"{uuid.uuid4().hex[:8]}@example.test", "imaps://127.0.0.1:993"


def test_a_connection_beyond_the_limit_waits_for_a_slot_then_is_one_clear_error() -> None:
    user, server = _account()
    first, second = take_slot(user, server, 2), take_slot(user, server, 2)
    assert in_use(user, server) == 2
    started = time.monotonic()
    with pytest.raises(emailmw.ConnectionLimitError) as info:
        take_slot(user, server, 2, wait=0.2)
    assert time.monotonic() - started >= 0.2
    message = str(info.value)
    assert "max-connections (2)" in message
    assert "\n" not in message
    threading.Timer(0.1, first.release).start()
    third = take_slot(user, server, 2, wait=5)  # the slot given back
    first.release()  # (a second release gives nothing back)
    assert in_use(user, server) == 2
    for slot in (second, third):
        slot.release()
    assert in_use(user, server) == 0


def test_many_threads_never_hold_more_than_the_limit() -> None:
    user, server = _account()
    held, most, lock = 0, 0, threading.Lock()

    def work() -> None:
        nonlocal held, most
        for _ in range(50):
            slot = take_slot(user, server, 3, wait=10)
            with lock:
                held += 1
                most = max(most, held)
            with lock:
                held -= 1
            slot.release()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most <= 3
    assert in_use(user, server) == 0


def test_max_connections_is_read_from_limits() -> None:
    account = {"username": "a@example.test", "password": "Pw-connections-1"}
    servers = {"url-smtp": "smtps://mail.test", "url-imap": "imaps://mail.test"}
    base = {"user": {**account, **servers}, "recipients": {"to": "b@example.test"}}
    assert load_options({"email": base}).limits.max_connections == 10  # Dovecot's default
    given = {**base, "limits": {"max-connections": 4}}
    assert load_options({"email": given}).limits.max_connections == 4
    with pytest.raises(emailmw.ConfigError, match="max-connections"):
        load_options({"email": {**base, "limits": {"max-connections": 0}}})


def test_the_budget_holds_across_the_processes_of_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#58 item 2: servers count an account's connections per user and address, so the
    processes of one machine share max-connections: another process's two slots leave
    none here (one clear line); SIGKILLed, its slots are given back by the kernel."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    user, server = _account()
    with connections_held_elsewhere(user, server, 2, 2) as holder:
        assert in_use(user, server) == 0  # (none of this process's)
        with pytest.raises(emailmw.ConnectionLimitError) as info:
            take_slot(user, server, 2, wait=0.3)
        message = str(info.value)
        assert "the processes of this machine hold 2 IMAP connections" in message
        assert "\n" not in message
        assert in_use(user, server) == 0  # (the refused one held nothing)
        holder.kill()  # SIGKILL: no release ran
        holder.wait()
        first, second = take_slot(user, server, 2, wait=5), take_slot(user, server, 2, wait=5)
        first.release()
        second.release()
        files = list((runtime / "emailmw").iterdir())
        assert files
        assert all(f.stat().st_mode & 0o077 == 0 for f in files)  # (private)
