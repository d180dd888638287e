"""Configuration loading and validation; logging; secrets stay secret."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import emailmw
from emailmw import ConfigError, Context, Options
from emailmw._core.config import load_options
from emailmw._core.log import get_logger

RMW_EMAIL_YML = """\
email:
  user:
    url-smtp: smtp.example.test
    url-imap: imaps://imap.example.test:1993
    username: alice@example.test
    password: hunter2-secret
  recipients:
    to:
      - bob@example.test
      - robot@example.test
    cc: carol@example.test
    bcc: [dave@example.test]
  polling-period: 250000000
"""


def test_rmw_email_format_is_read(tmp_path: Path) -> None:
    path = tmp_path / "email.yml"
    path.write_text(RMW_EMAIL_YML)
    options = load_options(path)
    assert options.transport == "native"
    assert options.user is not None
    assert options.user.smtp.url == "smtps://smtp.example.test:465"
    assert options.user.imap.url == "imaps://imap.example.test:1993"
    assert options.recipients.to == ("bob@example.test", "robot@example.test")
    assert options.recipients.cc == ("carol@example.test",)
    assert options.recipients.bcc == ("dave@example.test",)
    assert options.recipients.from_ == "alice@example.test"
    assert options.polling_period_ns == 250_000_000


def test_password_never_in_repr_or_errors(tmp_path: Path) -> None:
    path = tmp_path / "email.yml"
    path.write_text(RMW_EMAIL_YML)
    options = load_options(path)
    assert "hunter2-secret" not in repr(options)
    assert "hunter2-secret" not in str(options)
    bad = tmp_path / "bad.yml"
    bad.write_text(RMW_EMAIL_YML.replace("bob@example.test", "not an address"))
    with pytest.raises(ConfigError) as info:
        load_options(bad)
    assert "hunter2-secret" not in str(info.value)


def test_a_secret_containing_another_is_masked_whole() -> None:
    from emailmw._core.log import redact, register_secret

    register_secret("pass")
    register_secret("my-long-pass")
    assert redact("login my-long-pass and pass") == "login *** and ***"


def test_password_is_redacted_from_log_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "email.yml"
    path.write_text(RMW_EMAIL_YML)
    load_options(path)
    with caplog.at_level(logging.INFO, logger="emailmw"):
        get_logger("transport").info("login failed for %s", "hunter2-secret")
    assert "hunter2-secret" not in caplog.text
    assert "login failed for ***" in caplog.text


@pytest.mark.parametrize(
    ("yaml_text", "key", "expected"),
    [
        (
            "email:\n  polling-period: -5\n  intraprocess: true\n",
            "email.polling-period",
            "integer >= 1",
        ),
        ("email:\n  transport: pigeon\n", "email.transport", "native, curl, intraprocess"),
        ("email:\n  transport: native\n", "email.user", "required"),
        ("email:\n  intraprocess: maybe\n", "email.intraprocess", "true or false"),
        ("email:\n  polling_period: 5\n", "email.polling_period", "unknown key"),
        ("email:\n  user:\n    username: a@example.test\n", "email.user.password", "required"),
        (
            "email:\n  intraprocess: true\n  recipients:\n    to: [1, 2]\n",
            "email.recipients.to",
            "address",
        ),
        (
            "email:\n  intraprocess: true\n  recipients:\n    to: 'no-at-sign'\n",
            "email.recipients.to",
            "not a valid email address",
        ),
        (
            RMW_EMAIL_YML.replace("smtp.example.test", "http://smtp.example.test"),
            "email.user.url-smtp",
            "smtp:// or smtps://",
        ),
        ("[not, a, mapping]\n", None, "mapping"),
        ("email: {\n", None, "cfg.yml:2:1: expected the node content"),
    ],
)
def test_config_errors_name_file_key_and_expectation(
    tmp_path: Path, yaml_text: str, key: str | None, expected: str
) -> None:
    path = tmp_path / "cfg.yml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_options(path)
    message = str(info.value)
    assert str(path) in message
    if key:
        assert f"key '{key}'" in message
    assert expected in message


def test_lookup_order_env_then_cwd_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, cwd, env_dir = tmp_path / "home", tmp_path / "cwd", tmp_path / "env"
    for d in (home, cwd, env_dir):
        d.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("EMAILMW_CONFIG_FILE", raising=False)
    monkeypatch.delenv("EMAIL_CONFIG_FILE", raising=False)

    def period() -> int:
        return load_options(None).polling_period_ns

    assert load_options(None) == Options()  # nothing anywhere: intraprocess
    (home / "email.yml").write_text("email:\n  intraprocess: true\n  polling-period: 1\n")
    assert period() == 1
    (cwd / "email.yml").write_text("email:\n  intraprocess: true\n  polling-period: 2\n")
    assert period() == 2
    (env_dir / "legacy.yml").write_text("email:\n  intraprocess: true\n  polling-period: 3\n")
    monkeypatch.setenv("EMAIL_CONFIG_FILE", str(env_dir / "legacy.yml"))
    assert period() == 3
    (env_dir / "new.yml").write_text("email:\n  intraprocess: true\n  polling-period: 4\n")
    monkeypatch.setenv("EMAILMW_CONFIG_FILE", str(env_dir / "new.yml"))
    assert period() == 4
    monkeypatch.setenv("EMAILMW_CONFIG_FILE", str(env_dir / "missing.yml"))
    with pytest.raises(ConfigError, match="EMAILMW_CONFIG_FILE"):
        load_options(None)


def test_dict_config_and_intraprocess_needs_nothing_else() -> None:
    assert load_options({"intraprocess": True}).intraprocess
    assert load_options({"email": {"intraprocess": True}}).intraprocess
    with Context({"email": {"intraprocess": True}}) as ctx:
        assert ctx.options.transport == "intraprocess"


def test_special_use_domains_are_valid_syntax() -> None:
    options = load_options(
        {"intraprocess": True, "recipients": {"to": ["robot@localhost", "x@host.invalid"]}}
    )
    assert options.recipients.to == ("robot@localhost", "x@host.invalid")


def test_log_level_and_file_from_environment(tmp_path: Path) -> None:
    log_file = tmp_path / "emailmw.log"
    script = textwrap.dedent(
        """
        import emailmw
        with emailmw.Context({"intraprocess": True}) as ctx:
            pass
        """
    )
    env = {"EMAILMW_LOG_LEVEL": "debug", "EMAILMW_LOG_FILE": str(log_file), "PATH": "/usr/bin"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    assert "context started (intraprocess transport" in log_file.read_text()

    quiet = tmp_path / "quiet.log"
    env.update(EMAILMW_LOG_LEVEL="off", EMAILMW_LOG_FILE=str(quiet))
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    assert quiet.read_text() == ""


def test_every_error_is_an_emailmw_error() -> None:
    for name in emailmw.__all__:
        obj = getattr(emailmw, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, emailmw.EmailMWError), name


def test_curl_trace_redacts_every_line_of_an_authentication_exchange(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Redaction by what a line is: the bare base64 line of AUTH PLAIN kept its first
    'word', which was the whole credential. The credentials fed here were never registered
    as secrets, so the log filter cannot be what hides them."""
    import base64

    import pycurl

    from emailmw._transport.curl import CurlContext

    monkeypatch.setenv("EMAILMW_CURL_VERBOSE", "1")
    options = load_options(
        {
            "user": {
                "url-smtp": "smtps://mail.example.test",
                "url-imap": "imaps://mail.example.test",
                "username": "me@example.test",
                "password": "registered-pw",
            },
            "recipients": {"to": "me@example.test"},
        }
    )
    assert options.user is not None
    plain = base64.b64encode(b"\0u0052@example.test\0other-secret").decode()
    login = base64.b64encode(b"other-secret").decode()
    user = base64.b64encode(b"u0052@example.test").decode()
    out, into = pycurl.INFOTYPE_HEADER_OUT, pycurl.INFOTYPE_HEADER_IN
    exchanges = [
        [(out, f"AUTH PLAIN {plain}"), (into, "235 2.7.0 ok"), (out, "MAIL FROM:<a@b.test>")],
        [(out, "AUTH PLAIN"), (into, "334 "), (out, plain), (into, "235 ok")],
        [(out, "AUTH LOGIN"), (into, "334 VXNlcm5hbWU6"), (out, user), (into, "334 UGFz"),
         (out, login), (into, "235 ok"), (out, "QUIT")],
        [(out, "A001 AUTHENTICATE PLAIN"), (into, "+ "), (out, plain), (into, "A001 OK")],
        [(out, f"A001 AUTHENTICATE PLAIN {plain}"), (into, "A001 OK"), (out, "A002 NOOP")],
        [(out, 'A001 LOGIN "u0052@example.test" "other-secret"'), (into, "A001 OK")],
    ]  # fmt: skip
    with caplog.at_level(logging.DEBUG, logger="emailmw"):
        for exchange in exchanges:
            context = CurlContext(options.user.smtp, options.user, options)
            for kind, line in exchange:
                context._debug(kind, line.encode() + b"\r\n")
            context.close()
    text = caplog.text
    for secret in ("other-secret", plain, login, user):
        assert secret not in text
    assert text.count("[credentials redacted]") == 7  # one per line the client authenticated with
    assert "MAIL FROM:<a@b.test>" in text  # what follows the exchange is logged again
    assert "A002 NOOP" in text
    assert "> QUIT" in text


def test_a_transport_brings_how_its_account_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A transport registered with its own account format (here: a token read from a
    file) is configured with its own ``user:`` keys, read by its own reader; the keys of
    another transport's account are refused with the ones it takes; the secret it read
    never shows in a log line."""
    from emailmw._core import config
    from emailmw._core.config import AccountFormat, ConfigSection, Endpoint, UserInfo
    from emailmw._transport import factory
    from emailmw._transport.intraprocess import intraprocess_transport

    monkeypatch.setattr(factory, "_KINDS", dict(factory._KINDS))  # registered for this test
    monkeypatch.setattr(config, "_TRANSPORTS", dict(config._TRANSPORTS))

    def read_token_account(section: ConfigSection) -> UserInfo:
        server = section.string("server", required=True)
        token_file = section.string("token-file", required=True)
        assert server
        assert token_file
        token = Path(token_file).read_text().strip()
        emailmw._core.log.register_secret(token)
        endpoint = Endpoint("imaps", server, 993)
        return UserInfo(endpoint, endpoint, "robot", token)

    factory.register_transport(factory.TransportKind(
        "tokenmail",
        build=lambda options, budget: intraprocess_transport(options.recipients.from_),
        account=AccountFormat(frozenset({"server", "token-file"}), read_token_account),
    ))  # fmt: skip
    (tmp_path / "token").write_text("tok-3141-secret\n")
    base = {"transport": "tokenmail", "recipients": {"to": "bob@example.test"}}
    user = {"server": "mail.example.test", "token-file": str(tmp_path / "token")}
    options = load_options({"email": {**base, "user": user}})
    assert options.user is not None
    assert (options.user.imap.host, options.user.password) == (
        "mail.example.test",
        "tok-3141-secret",
    )
    with caplog.at_level(logging.INFO, logger="emailmw"):
        get_logger("config").info("read %s", options.user.password)
    assert "tok-3141-secret" not in caplog.text
    with Context({"email": {**base, "user": user}}) as context:  # built by its registry entry
        assert repr(context) == "<emailmw.Context tokenmail running>"
    with pytest.raises(ConfigError, match=r"expected one of: server, token-file") as error:
        load_options({"email": {**base, "user": {"username": "a", "password": "p"}}})
    assert "email.user.password" in str(error.value)
    with pytest.raises(ConfigError, match="required for the tokenmail transport"):
        load_options({"email": base})
