"""Where a login's secret comes from (``emailmw._core.credentials``), without a server:
the configuration's ``auth``/``password-command``/``token-command``/``oauth2`` keys, when a
credential fetches a new secret, and that no secret can be logged."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from emailmw import AuthenticationError, ConfigError
from emailmw._core import credentials
from emailmw._core.config import load_options
from emailmw._core.credentials import Credential, jwt_expiry, sasl_forms
from emailmw._core.log import redact

USER = {"url-smtp": "smtps://smtp.example.test", "url-imap": "imaps://imap.example.test",
        "username": "robot@example.test"}  # fmt: skip


def _oauth(url: str, refresh: str | None) -> dict[str, Any]:
    mapping = {"token-url": url, "client-id": "c", "refresh-token": refresh}
    return {"auth": "oauth2", "oauth2": {k: v for k, v in mapping.items() if v is not None}}


def _options(**user: Any) -> Any:
    return load_options({"email": {"user": {**USER, **user}, "recipients": {"to": "a@b.test"}}})


@pytest.mark.parametrize(
    ("user", "key", "expected"),
    [
        ({"auth": "kerberos", "password": "x"}, "email.user.auth", "expected one of: password"),
        ({"auth": "oauth2", "password": "x"}, "email.user.password", "not with auth: oauth2"),
        ({"token-command": "true"}, "email.user.token-command", "not with auth: password"),
        ({"password": "x", "password-command": "echo x"}, "email.user.password", "only one"),
        ({}, "email.user.password", "required (or password-command)"),
        ({"auth": "oauth2"}, "email.user.token-command", "required (or oauth2)"),
        (_oauth("http://idp.test/t", "r"), "email.user.oauth2.token-url", "https://"),
        (_oauth("https://idp.test/t", None), "email.user.oauth2.refresh-token", "required"),
        ({"auth": "oauth2", "oauth2": {"token-uri": "x"}}, "email.user.oauth2.token-uri",
         "unknown key"),
    ],
)  # fmt: skip
def test_account_login_errors_name_the_key(user: dict[str, Any], key: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        _options(**user)
    assert f"key '{key}'" in str(info.value)
    assert expected in str(info.value)


def test_a_password_command_gives_the_password_and_it_is_redacted(tmp_path: Path) -> None:
    script = tmp_path / "pass.sh"
    script.write_text("#!/bin/sh\necho 'app-pass word 42'\necho second line\n")
    script.chmod(0o700)
    user = _options(**{"password-command": str(script)}).user
    assert user.mechanism == "password"
    assert "app-pass" not in repr(user)
    assert user.secret() == "app-pass word 42"
    assert redact("said app-pass word 42") == "said ***"
    for form in sasl_forms(user.username, "app-pass word 42"):
        assert redact(form) == "***"


def test_a_command_that_fails_is_one_line_naming_the_key_without_its_output() -> None:
    command = "echo tok-LEAK; echo denied >&2; exit 2"
    user = _options(auth="oauth2", **{"token-command": command}).user
    with pytest.raises(AuthenticationError) as info:
        user.secret()
    assert str(info.value) == (
        "email.user.token-command failed (exit status 2): denied; run it yourself to see why"
    )
    empty = _options(**{"password-command": "true"}).user
    with pytest.raises(AuthenticationError, match="printed nothing"):
        empty.secret()


def _jwt(claims: dict[str, Any]) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return f"{b64(b'{}')}.{b64(json.dumps(claims).encode())}.{b64(b'sig')}"


def test_jwt_expiry_reads_exp_and_nothing_else() -> None:
    assert jwt_expiry(_jwt({"exp": 1700000000})) == 1700000000.0
    assert jwt_expiry(_jwt({"sub": "x"})) is None
    assert jwt_expiry("opaque-token") is None
    assert jwt_expiry("a.!!!.c") is None
    assert jwt_expiry(_jwt({"exp": True})) is None


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


def _counting(clock: _Clock, life: float | None) -> tuple[Credential, list[str]]:
    fetched: list[str] = []

    def fetch() -> tuple[str, float | None]:
        fetched.append(f"token{len(fetched)}")
        return fetched[-1], None if life is None else clock.now + life

    return Credential.fetched(fetch, "xoauth2", "robot@example.test", describe="test"), fetched


def test_a_token_is_fetched_when_first_needed_and_again_ahead_of_its_expiry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr(credentials.time, "time", clock.time)
    credential, fetched = _counting(clock, 3600)
    assert fetched == []  # nothing before a login needs it
    assert credential.secret() == "token0"
    clock.now += 3600 - 61
    assert credential.secret() == "token0"
    clock.now += 2  # within the minute before expiry
    assert credential.secret() == "token1"
    short, _ = _counting(clock, 4)  # a short life: again at three quarters
    short.secret()
    clock.now += 2.9
    assert short.secret() == "token0"
    clock.now += 0.2
    assert short.secret() == "token1"
    assert "token" not in repr(short)


def test_refresh_after_a_refusal_fetches_once_whoever_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several connections refused with the same token: one fetch, each gets the new one;
    a source that gives the refused token again, or a fixed password: nothing to try."""
    clock = _Clock()
    monkeypatch.setattr(credentials.time, "time", clock.time)
    credential, fetched = _counting(clock, None)
    refused = credential.secret()
    results: list[str | None] = []
    threads = [threading.Thread(target=lambda: results.append(credential.refresh(refused)))
               for _ in range(8)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["token1"] * 8
    assert fetched == ["token0", "token1"]
    same = Credential.fetched(lambda: ("same", None), "xoauth2", "r@x.test", describe="test")
    assert same.refresh(same.secret()) is None
    password = Credential.password("pw-123", "r@x.test")
    assert password.refresh("pw-123") is None
    assert password.secret() == "pw-123"


def _failing(why: str, calls: list[float], clock: _Clock, then: str | None = None) -> Any:
    def fetch() -> tuple[str, float | None]:
        calls.append(clock.now)
        if then is not None and len(calls) > 3:
            return then, clock.now + 3600
        raise AuthenticationError(why)

    return fetch


def test_a_failing_source_is_asked_again_later_and_later_not_at_every_login(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """#58: a token command that fails is not run again at every retry of the receiver
    and the outbox (was: 91-138 runs in 100 s for two processes): asked again after 1 s,
    doubling up to 5 minutes; meanwhile its failure is raised again, in the same words.
    Said once (a warning), and once when it works again."""
    clock, calls = _Clock(), []
    fetch = _failing("token-command failed (exit status 1)", calls, clock, then="tok")
    credential = Credential.fetched(fetch, "xoauth2", "me@x", describe="token-command",
                                    clock=clock.time)  # fmt: skip
    caplog.set_level("DEBUG", logger="emailmw")
    seen = []
    words = set()
    for _ in range(60):  # (a retry every 0.5 s for 30 s)
        try:
            seen.append(credential.secret())
        except AuthenticationError as exc:
            words.add(str(exc))
        clock.now += 0.5
    assert words == {"token-command failed (exit status 1)"}
    assert [round(c - calls[0], 1) for c in calls] == [0.0, 1.0, 3.0, 7.0]  # (1, 2, 4 s)
    assert set(seen) == {"tok"}
    said = [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    assert [r.levelname for r in said] == ["WARNING", "WARNING"]
    assert "asked again in 1 s, then less often (up to 300 s)" in said[0].getMessage()
    assert said[1].getMessage() == "token-command works again"


def test_a_revoked_grant_is_one_error_and_slow_retries() -> None:
    """``invalid_grant`` (a refresh token revoked), or a command's exit status 77 or 78:
    asked again after a minute, doubling up to 30 minutes."""
    for why in ("the token endpoint https://t refused the refresh token or could not be "
                "reached: invalid_grant: Token has been expired or revoked.",
                "token-command failed (exit status 77): revoked"):  # fmt: skip
        clock, calls = _Clock(), []
        credential = Credential.fetched(_failing(why, calls, clock), "xoauth2", "me@x",
                                        describe="oauth2", clock=clock.time)  # fmt: skip
        for _ in range(4000):  # (a retry every second for an hour and more)
            with pytest.raises(AuthenticationError):
                credential.secret()
            clock.now += 1.0
        assert [round(c - calls[0]) for c in calls] == [0, 60, 180, 420, 900, 1860, 3660]


def test_a_token_still_valid_is_used_while_its_source_fails() -> None:
    """Fetched anew ahead of its expiry, a token whose source fails now is still good
    until it expires: logins go on with it."""
    clock, calls = _Clock(), []
    results: list[Any] = [("first", clock.now + 600)]

    def fetch() -> tuple[str, float | None]:
        calls.append(clock.now)
        outcome = results.pop(0) if results else AuthenticationError("token-command failed")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    credential = Credential.fetched(fetch, "xoauth2", "me@x", describe="token-command",
                                    clock=clock.time)  # fmt: skip
    assert credential.secret() == "first"
    clock.now += 590  # (within the margin: fetched anew, which fails)
    assert credential.secret() == "first"
    clock.now += 20  # (expired)
    with pytest.raises(AuthenticationError):
        credential.secret()
