"""``emailmw config show`` (#58): the configuration as loaded, a profile's values marked,
no secret in any form."""

from __future__ import annotations

from pathlib import Path

import pytest

from emailmw._cli import main

SECRETS = ("Pw-91c7-secret", "cs-5d1e", "rt-88aa", "pass show mail/ann")


def test_config_show_prints_what_the_profile_filled_in_and_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "email.yml"
    path.write_text(
        "email:\n  provider: outlook\n  user:\n    username: ann@outlook.com\n"
        "    oauth2:\n      token-url: https://login.example.test/token\n"
        "      client-id: app\n      client-secret: cs-5d1e\n      refresh-token: rt-88aa\n"
        "  limits: {emails-per-day: 100}\n  recipients: {to: bob@example.test}\n"
    )
    assert main(["config", "show", "--config", str(path)], daemon=False) == 0
    out = capsys.readouterr().out
    assert "    url-smtp: smtp://smtp-mail.outlook.com:587  # from provider outlook\n" in out
    assert "    recipients-per-email: 100  # from provider outlook\n" in out
    assert "    emails-per-day: 100\n" in out  # (the file's own value, not marked)
    assert "      client-secret: <redacted>\n" in out
    assert "      refresh-token: <redacted>\n" in out
    assert "  recipients:\n    to: bob@example.test\n" in out
    assert not [s for s in SECRETS if s in out]


def test_config_show_redacts_a_password_and_the_command_that_prints_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for user in ("password: Pw-91c7-secret", "password-command: pass show mail/ann"):
        path = tmp_path / "email.yml"
        path.write_text(
            "email:\n  user:\n    url-smtp: smtps://mail.example.test\n"
            "    url-imap: imaps://mail.example.test\n    username: ann@example.test\n"
            f"    {user}\n  recipients: {{to: ann@example.test}}\n"
        )
        assert main(["config", "show", "--config", str(path)], daemon=False) == 0
        out = capsys.readouterr().out
        assert ": <redacted>\n" in out
        assert "from provider" not in out
        assert not [s for s in SECRETS if s in out]


def test_config_show_of_a_file_with_a_mistake_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "email.yml"
    path.write_text("email:\n  provider: hotmail\n  user: {password: Pw-91c7-secret}\n")
    assert main(["config", "show", "--config", str(path)], daemon=False) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert "email.provider" in line
    assert "expected one of" in line
    assert "Pw-91c7-secret" not in captured.err


def test_config_show_keeps_its_keys_when_a_known_secret_is_a_word_of_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a run whose test mail server's password is "secret": 'client-secret' read
    # 'client-***' and the redaction was not where the reader looks)
    import emailmw._core.log

    monkeypatch.setattr(emailmw._core.log, "_secrets", ("secret",))
    path = tmp_path / "email.yml"
    path.write_text(
        "email:\n  user:\n    url-smtp: smtps://mail.example.test\n"
        "    url-imap: imaps://mail.example.test\n    username: ann@example.test\n"
        "    auth: oauth2\n    oauth2: {token-url: 'https://t.example.test/secret',\n"
        "             client-id: my-secret-app, client-secret: cs-5d1e, refresh-token: rt}\n"
        "  recipients: {to: ann@example.test}\n"
    )
    assert main(["config", "show", "--config", str(path)], daemon=False) == 0
    out = capsys.readouterr().out
    assert "      client-secret: <redacted>\n" in out
    assert "      client-id: my-***-app\n" in out  # (a known secret in a value: hidden)
