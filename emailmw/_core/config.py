"""Configuration: rmw_email's YAML format plus emailmw's own keys, validated into :class:`Options`.

Where the configuration comes from, first match wins:

1. the ``config`` argument: an :class:`Options`, a mapping, or a path to a YAML file;
2. the file named by ``EMAILMW_CONFIG_FILE`` (or rmw_email's ``EMAIL_CONFIG_FILE``);
3. ``./email.yml``, then ``~/email.yml``;
4. nothing found: the intraprocess transport (the embedded default), logged at INFO.

Every error is a :class:`~emailmw.ConfigError` naming the file, the key and what was expected.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import email_validator
import yaml

from .credentials import MECHANISMS, Credential, Mechanism, command_secret, refresh_token_secret
from .errors import ConfigError, InvalidArgumentError, yaml_error
from .log import get_logger, register_secret
from .protocol import Recipients, address_domain
from .providers import PROVIDERS, with_profile
from .wire import DEFAULT_MAX_MESSAGE_SIZE

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "INTRAPROCESS_ACCOUNT",
    "MAIL_ACCOUNT",
    "NO_BATCH",
    "AccountFormat",
    "BatchPolicy",
    "ConfigSection",
    "RoutingOptions",
    "Endpoint",
    "Options",
    "PollOptions",
    "SecurityOptions",
    "SendLimits",
    "TLSOptions",
    "UserInfo",
    "find_config_file",
    "load_options",
    "read_mail_account",
    "read_yaml",
    "register_transport_name",
]

_log = get_logger("config")


@dataclass(frozen=True, slots=True)
class AccountFormat:
    """How a transport's account is configured (its ``user:`` mapping): the keys it takes,
    and ``read``, which makes the :class:`UserInfo` of a mapping with those keys (checking
    each value, registering secrets so that no log shows them). ``required``: whether the
    transport needs an account (the in-process transport does not)."""

    keys: frozenset[str]
    read: Callable[[ConfigSection], UserInfo]
    required: bool = True


#: the transports' names and account formats, as the transport registry
#: (``_transport.factory``) registers them
_TRANSPORTS: dict[str, AccountFormat] = {}


def register_transport_name(name: str, account: AccountFormat | None = None) -> None:
    """Make ``name`` a transport a configuration may name, its account read as ``account``
    says (default: :data:`MAIL_ACCOUNT`, a password login to an SMTP and an IMAP server).
    The transport registry's call, at import: the configuration layer is below the
    transports, which pass down how their accounts are read."""
    _TRANSPORTS.setdefault(name, account or MAIL_ACCOUNT)


DEFAULT_POLLING_PERIOD_NS: Final = 100_000_000
INTRAPROCESS_ADDRESS: Final = "emailmw@intraprocess.invalid"
_DEFAULT_PORTS: Final = {"smtp": 587, "smtps": 465, "imap": 143, "imaps": 993}
_TOP_KEYS: Final = frozenset(
    {
        "user",
        "recipients",
        "polling-period",
        "intraprocess",
        "transport",
        "from",
        "max-message-size",
        "tls",
        "timeout",
        "folder",
        "state-file",
        "on-receive",
        "poll",
        "outbox-size",
        "quarantine",
        "send-guarantee",
        "spool",
        "reply-domains",
        "queue-limit",
        "queue-bytes",
        "security",
        "routing",
        "batch",
        "limits",
        "provider",
        "max-email-bytes",
        "part-timeout",
        "announce-period",
        "plain-readers",
    }
)
_ROUTING_KEYS: Final = frozenset({"hub", "routes"})
VERIFY_MODES: Final = ("off", "permissive", "enforce")
_SECURITY_KEYS: Final = frozenset(
    {"keystore", "identity", "verify", "permissions", "replay-window", "encrypt", "servers"}
)
#: the quarantine folder of ``verify: enforce`` when ``quarantine`` names none
DEFAULT_QUARANTINE: Final = "Quarantine"
SEND_GUARANTEES: Final = ("memory", "spool", "server")
DEFAULT_QUEUE_LIMIT: Final = 10_000
#: the bound in bytes of received mail a context holds unsettled (256 MiB)
DEFAULT_QUEUE_BYTES: Final = 256 * 1024 * 1024
_SIZE_RE: Final = re.compile(r"\s*(\d+)\s*([KMG]i?B|B)?\s*", re.IGNORECASE)
_SIZE_UNITS: Final = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2,
                      "gb": 1000**3, "gib": 1024**3}  # fmt: skip
_HUB_RE: Final = re.compile(r"[^\s\x00-\x1f\x7f*]+")
_TLS_KEYS: Final = frozenset({"ca-file", "verify", "starttls"})
_POLL_KEYS: Final = frozenset({"interval", "idle-after", "idle-refresh"})
_USER_KEYS: Final = frozenset(
    {"url-smtp", "url-imap", "username", "password", "auth", "password-command",
     "token-command", "oauth2"}
)  # fmt: skip
_OAUTH2_KEYS: Final = frozenset(
    {"token-url", "client-id", "client-secret", "refresh-token", "scope", "ca-file"}
)
_RECIPIENT_KEYS: Final = frozenset({"to", "cc", "bcc"})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A mail server endpoint: ``scheme`` is smtp, smtps, imap or imaps."""

    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.url


@dataclass(frozen=True, slots=True)
class UserInfo:
    """The mail account. ``password`` never appears in ``repr()`` or logs.

    ``credential``, when set, is where the secret comes from instead of ``password``: a
    command (``password-command``), or an OAuth2 token (``auth: oauth2``). Log in with
    :meth:`secret` and :attr:`mechanism`; after a refused login, :meth:`refresh`."""

    smtp: Endpoint
    imap: Endpoint
    username: str
    password: str = field(default="", repr=False)
    credential: Credential | None = field(default=None, repr=False, compare=False)

    @property
    def mechanism(self) -> Mechanism:
        """How to log in: ``password``, ``xoauth2`` or ``oauthbearer``."""
        return self.credential.mechanism if self.credential is not None else "password"

    def secret(self) -> str:
        """The password or access token to log in with now (a credential fetches it when
        needed; raises :class:`~emailmw.AuthenticationError` when that fails)."""
        return self.credential.secret() if self.credential is not None else self.password

    def refresh(self, refused: str) -> str | None:
        """A fresh secret after the server refused ``refused``, or None (none to try)."""
        return self.credential.refresh(refused) if self.credential is not None else None


@dataclass(frozen=True, slots=True)
class TLSOptions:
    """TLS settings. Certificates and host names are verified unless ``verify`` is False.

    ``ca_file`` replaces the system trust store. ``starttls`` applies to ``smtp://`` and
    ``imap://`` URLs: True (default) requires STARTTLS; False sends everything, the password
    included, in clear text (only for a test server on loopback).
    """

    ca_file: str | None = None
    verify: bool = True
    starttls: bool = True


#: IMAP connections per account a process holds at most (Dovecot's default)
DEFAULT_MAX_CONNECTIONS: Final = 10


@dataclass(frozen=True, slots=True)
class SendLimits:
    """What the provider lets an account do (``limits:``; None: no limit): send emails in any
    60 s and in any 24 h (rolling, as providers count), with recipients of one SMTP
    transaction, and hold IMAP connections open at once (per process: ``max-connections``,
    Dovecot's default 10). The outbox paces itself to stay within them; connections wait
    for a slot (``docs/providers.md``)."""

    emails_per_minute: int | None = None
    emails_per_day: int | None = None
    recipients_per_email: int | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.emails_per_minute, self.emails_per_day))


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """Several messages in one email (``docs/batching.md``): the outbox holds a message up
    to ``linger_ms`` for others to the same recipients, and sends at most ``max_messages``
    of them, at most ``max_bytes`` together, as one batch email. ``max_messages`` 1: no
    batching (:data:`NO_BATCH`). Immutable."""

    linger_ms: float = 5.0
    max_messages: int = 100
    max_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if not (isinstance(self.linger_ms, int | float) and 0 <= self.linger_ms <= 60_000):
            raise InvalidArgumentError(f"linger_ms must be 0 to 60000, got {self.linger_ms!r}")
        if isinstance(self.max_messages, bool) or not (
            isinstance(self.max_messages, int) and 1 <= self.max_messages <= 10_000
        ):
            raise InvalidArgumentError(
                f"max_messages must be 1 to 10000, got {self.max_messages!r}"
            )
        if isinstance(self.max_bytes, bool) or not (
            isinstance(self.max_bytes, int) and self.max_bytes >= 1024
        ):
            raise InvalidArgumentError(f"max_bytes must be at least 1024, got {self.max_bytes!r}")

    @property
    def enabled(self) -> bool:
        return self.max_messages > 1


#: no batching: each message its own email
NO_BATCH: Final = BatchPolicy(linger_ms=0, max_messages=1)


@dataclass(frozen=True, slots=True)
class PollOptions:
    """Adaptive receiving (native transport): poll with NOOP every ``interval`` seconds while
    mail flows (each poll costs the server about 0.2 ms of CPU through Dovecot's TLS proxy,
    so the interval trades latency against server load; see ``bench/email_latency.py``);
    after ``idle_after`` quiet seconds, wait in IMAP IDLE (re-issued every ``idle_refresh``
    seconds, under the 29 minutes RFC 2177 allows)."""

    interval: float = 0.012
    idle_after: float = 2.0
    idle_refresh: float = 25 * 60.0


@dataclass(frozen=True, slots=True)
class RoutingOptions:
    """The ``routing`` section (``docs/addressing.md``): the name of the hub this context
    owns (default: the local part of its address) and its route table, hub name (or
    ``DEFAULT``) -> the mail address that reaches that hub from here."""

    hub: str = ""
    routes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SecurityOptions:
    """The ``security`` section (``docs/security.md``). Environment variables fill in what
    the file leaves out: ``EMAILMW_SECURITY_KEYSTORE``, ``EMAILMW_SECURITY_IDENTITY``,
    ``EMAILMW_SECURITY_VERIFY``.

    ``verify`` is ``off`` without a keystore and ``enforce`` with one unless it says
    otherwise; ``permissions`` defaults to the keystore's ``permissions.yaml``;
    ``encrypt`` maps name patterns to the identities whose keys bodies are encrypted to.
    """

    keystore: str | None = None
    identity: str | None = None
    verify: str = "off"
    permissions: str | None = None
    replay_window: float = 600.0
    encrypt: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: service name patterns -> the identities whose responses a client accepts
    servers: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def enabled(self) -> bool:
        return self.keystore is not None


@dataclass(frozen=True, slots=True)
class Options:
    """Validated configuration of a :class:`~emailmw.Context`. Immutable."""

    transport: str = "intraprocess"
    user: UserInfo | None = None
    recipients: Recipients = field(
        default_factory=lambda: Recipients(INTRAPROCESS_ADDRESS, (INTRAPROCESS_ADDRESS,))
    )
    polling_period_ns: int = DEFAULT_POLLING_PERIOD_NS
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    tls: TLSOptions = field(default_factory=TLSOptions)
    timeout: float = 30.0
    folder: str = "INBOX"
    state_file: str | None = None
    on_receive: str = "keep"
    poll: PollOptions = field(default_factory=PollOptions)
    outbox_size: int = 1000
    #: folder that unparseable mail and mail with broken metadata are moved to (None: left
    #: where it is)
    quarantine: str | None = None
    #: when ``send()``/``publish()`` returns: ``server`` once the server accepted the email,
    #: ``spool`` once it is written to the spool directory, ``memory`` once it is queued
    send_guarantee: str = "server"
    spool: str | None = None
    #: domains a service server replies to (None: any domain)
    reply_domains: frozenset[str] | None = None
    #: emails a context holds received and unsettled at most (then it stops fetching)
    queue_limit: int = DEFAULT_QUEUE_LIMIT
    #: bytes of received mail a context holds unsettled at most (then it stops fetching)
    queue_bytes: int = DEFAULT_QUEUE_BYTES
    security: SecurityOptions = field(default_factory=SecurityOptions)
    routing: RoutingOptions = field(default_factory=RoutingOptions)
    #: batching of every message this context sends (``batch``; NO_BATCH: off)
    batch: BatchPolicy = NO_BATCH
    #: what the provider lets the account send (``limits``)
    limits: SendLimits = field(default_factory=SendLimits)
    #: the largest email to send; a larger message goes as parts (None: the server's
    #: advertised SIZE once known, else 10 MB)
    max_email_bytes: int | None = None
    #: seconds a message sent as parts may take to arrive complete (then its parts are
    #: reported and left in the mailbox)
    part_timeout: float = 600.0
    #: seconds between a node's announcements (the graph drops a node silent for three:
    #: killed); a Node's ``announce_period`` argument overrides it
    announce_period: float = 30.0
    #: the provider profile the configuration names (``provider``; None: none)
    provider: str | None = None
    #: accounts read by peers that announce nothing (a C++ rmw_email node): they always
    #: get one uncompressed message per email (``plain-readers``, bare lower-case)
    plain_readers: frozenset[str] = frozenset()
    source: str = "<defaults>"

    @property
    def intraprocess(self) -> bool:
        return self.transport == "intraprocess"


def find_config_file() -> Path | None:
    """The configuration file that applies, or None. Raises if an env var names a missing file."""
    for var in ("EMAILMW_CONFIG_FILE", "EMAIL_CONFIG_FILE"):
        value = os.environ.get(var)
        if value:
            path = Path(value).expanduser()
            if not path.is_file():
                raise ConfigError(f"{var} names a file that does not exist", source=str(path))
            return path
    for candidate in (Path.cwd() / "email.yml", Path.home() / "email.yml"):
        if candidate.is_file():
            return candidate
    return None


def load_options(config: Options | Mapping[str, Any] | str | os.PathLike[str] | None) -> Options:
    """Turn any accepted form of configuration into validated :class:`Options`."""
    if isinstance(config, Options):
        return config
    if config is None:
        path = find_config_file()
        if path is None:
            _log.info(
                "no configuration file found (EMAILMW_CONFIG_FILE, EMAIL_CONFIG_FILE, "
                "./email.yml, ~/email.yml): using the intraprocess transport"
            )
            return Options(
                security=_read_security(ConfigSection({}, "<environment>", "email.", _TOP_KEYS))
            )
        return _load_file(path)
    if isinstance(config, Mapping):
        return _from_mapping(config, "<dict>")
    return _load_file(Path(config).expanduser())


def read_yaml(path: Path) -> Any:
    """The parsed YAML document in ``path``; :class:`ConfigError` naming the file when it
    cannot be read or parsed."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=source) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, source) from exc


def _load_file(path: Path) -> Options:
    source = str(path)
    data = read_yaml(path)
    if not isinstance(data, Mapping):
        raise ConfigError("expected a mapping with an 'email' key", source=source)
    return _from_mapping(data, source)


class ConfigSection:
    """Typed access to one mapping level of a configuration, with errors that name the file
    and the full key (what an :class:`AccountFormat` reads its ``user:`` mapping with)."""

    def __init__(self, data: Mapping[str, Any], source: str, prefix: str, known: frozenset[str]):
        self.data, self.source, self.prefix = data, source, prefix
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ConfigError(
                f"unknown key (expected one of: {', '.join(sorted(known))})",
                source=source,
                key=self.key(unknown[0]),
            )

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def error(self, name: str, message: str) -> ConfigError:
        return ConfigError(message, source=self.source, key=self.key(name))

    def string(self, name: str, *, required: bool = False) -> str | None:
        value = self.data.get(name)
        if value is None:
            if required:
                raise self.error(name, "required, expected a string")
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(name, f"expected a non-empty string, got {type(value).__name__}")
        return value.strip()

    def number(self, name: str, default: float, *, minimum: float = 0.0) -> float:
        value = self.data.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= minimum:
            raise self.error(name, f"expected a number > {minimum}, got {value!r}")
        return float(value)

    def integer(self, name: str, default: int, *, minimum: int = 1) -> int:
        value = self.data.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(name, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def size(self, name: str, default: int) -> int:
        """A size in bytes: an integer, or a string such as ``256 MiB`` or ``64MB``."""
        value = self.data.get(name, default)
        if isinstance(value, str) and (found := _SIZE_RE.fullmatch(value)):
            value = int(found.group(1)) * _SIZE_UNITS[(found.group(2) or "").lower()]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error(name, f"expected a size in bytes such as 268435456 or '256 MiB', "
                             f"got {value!r}")  # fmt: skip
        return value

    def boolean(self, name: str) -> bool | None:
        value = self.data.get(name)
        if value is not None and not isinstance(value, bool):
            raise self.error(name, f"expected true or false, got {value!r}")
        return value

    def mapping(self, name: str, known: frozenset[str]) -> ConfigSection | None:
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.error(name, f"expected a mapping, got {type(value).__name__}")
        return ConfigSection(value, self.source, f"{self.key(name)}.", known)

    def addresses(self, name: str) -> tuple[str, ...]:
        value = self.data.get(name)
        if value is None:
            return ()
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise self.error(name, "expected an email address or a list of them")
        return tuple(self.address(name, item) for item in items)

    def address(self, name: str, value: str) -> str:
        return validate_address(value, source=self.source, key=self.key(name))


def validate_address(value: str, *, source: str = "<dict>", key: str | None = None) -> str:
    """Check an address's syntax (no DNS); return it stripped. Special-use domains are allowed."""
    value = value.strip()
    try:
        email_validator.validate_email(
            value, check_deliverability=False, test_environment=True, globally_deliverable=False
        )
    except email_validator.EmailNotValidError as exc:
        # Syntax-only check: 'localhost', '.invalid', '.local' are valid syntax for a
        # private server even though email-validator refuses them for the public Internet.
        if "special-use or reserved name" not in str(exc):
            raise ConfigError(
                f"not a valid email address {value!r}: {exc}", source=source, key=key
            ) from exc
    return value


def parse_endpoint(value: str, kind: str, *, source: str, key: str) -> Endpoint:
    """``host``, ``host:port`` or ``scheme://host[:port]`` -> :class:`Endpoint`.

    A bare host means the implicit-TLS scheme (smtps/imaps), as in rmw_email.
    """
    text = value if "://" in value else f"{kind}s://{value}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"not a valid URL {value!r}: {exc}", source=source, key=key) from exc
    scheme = parts.scheme.lower()
    if scheme not in (kind, f"{kind}s"):
        raise ConfigError(
            f"expected a {kind}:// or {kind}s:// URL, got {value!r}", source=source, key=key
        )
    if not parts.hostname:
        raise ConfigError(f"no host in {value!r}", source=source, key=key)
    if parts.username or parts.password:
        raise ConfigError(
            "credentials go in user.username/user.password, not in the URL", source=source, key=key
        )
    return Endpoint(scheme, parts.hostname, port or _DEFAULT_PORTS[scheme])


def _email_reader(data: Mapping[str, Any], source: str) -> ConfigSection:
    """The ``email:`` mapping (or the top level, for a file without that key)."""
    if "email" not in data:
        return _with_provider(ConfigSection(data, source, "email.", _TOP_KEYS))
    reader = ConfigSection(data, source, "", frozenset({"email"})).mapping("email", _TOP_KEYS)
    if reader is None:
        raise ConfigError("expected a mapping", source=source, key="email")
    return _with_provider(reader)


def _with_provider(reader: ConfigSection) -> ConfigSection:
    """``provider:``: the profile's defaults under the keys the mapping leaves out."""
    name = reader.string("provider")
    if name is None:
        return reader
    provider = PROVIDERS.get(name)
    if provider is None:
        raise reader.error("provider", f"expected one of {', '.join(PROVIDERS)}, got {name!r}")
    return ConfigSection(with_profile(reader.data, provider), reader.source, reader.prefix,
                         _TOP_KEYS)  # fmt: skip


def _read_transport(reader: ConfigSection) -> str:
    intraprocess = reader.boolean("intraprocess")
    transport = reader.string("transport")
    if transport is not None and transport not in _TRANSPORTS:
        raise reader.error(
            "transport", f"expected one of {', '.join(_TRANSPORTS)}, got {transport!r}"
        )
    if intraprocess:
        return "intraprocess"
    if transport is None:
        return "native" if reader.data.get("user") is not None else "intraprocess"
    return transport


def _read_user(
    reader: ConfigSection, transport: str
) -> tuple[UserInfo | None, ConfigSection | None]:
    """``user:`` (as the transport's :class:`AccountFormat` reads it; required unless the
    transport needs no account), and its section."""
    account = _TRANSPORTS[transport]
    user_reader = reader.mapping("user", account.keys)
    if user_reader is None:
        if account.required:
            raise reader.error("user", f"required for the {transport} transport")
        return None, None
    return account.read(user_reader), user_reader


def read_mail_account(section: ConfigSection) -> UserInfo:
    """A login to an SMTP and an IMAP server (``url-smtp``, ``url-imap``, ``username``)
    with a password (``password``, or ``password-command``: a command printing it), or, with
    ``auth: oauth2`` (XOAUTH2; or ``oauthbearer``), an OAuth2 access token from
    ``token-command`` or from the refresh token of an ``oauth2:`` mapping (``token-url``,
    ``client-id``, ``client-secret``, ``refresh-token``, ``scope``, ``ca-file``)."""
    username = section.string("username", required=True)
    assert username
    source = section.source
    auth = section.string("auth") or "password"
    mechanism = MECHANISMS.get(auth)
    if mechanism is None:
        raise ConfigError(
            f"expected one of: {', '.join(MECHANISMS)}, got {auth!r}",
            source=source,
            key=section.key("auth"),
        )
    given = [k for k in ("password", "password-command", "token-command", "oauth2")
             if section.data.get(k) is not None]  # fmt: skip
    allowed = ("password", "password-command") if mechanism == "password" else (
        "token-command", "oauth2")  # fmt: skip
    wrong = [k for k in given if k not in allowed]
    if wrong:
        raise ConfigError(
            f"not with auth: {auth} (expected {' or '.join(allowed)})",
            source=source,
            key=section.key(wrong[0]),
        )
    if len(given) != 1:
        raise ConfigError(
            f"required (or {allowed[1]})" if not given else f"give only one of {given}",
            source=source,
            key=section.key(allowed[0]),
        )
    smtp_url = section.string("url-smtp", required=True)
    imap_url = section.string("url-imap", required=True)
    assert smtp_url
    assert imap_url
    smtp = parse_endpoint(smtp_url, "smtp", source=source, key=section.key("url-smtp"))
    imap = parse_endpoint(imap_url, "imap", source=source, key=section.key("url-imap"))
    which = given[0]
    if which == "password":
        password = section.string("password", required=True)
        assert password
        return UserInfo(smtp, imap, username, password, Credential.password(password, username))
    if which in ("password-command", "token-command"):
        command = section.string(which, required=True)
        assert command
        fetch = command_secret(command, section.key(which))
        return UserInfo(
            smtp, imap, username,
            credential=Credential.fetched(fetch, mechanism, username, describe=section.key(which)),
        )  # fmt: skip
    oauth = section.mapping("oauth2", _OAUTH2_KEYS)
    assert oauth is not None
    token_url = oauth.string("token-url", required=True)
    client_id = oauth.string("client-id", required=True)
    refresh_token = oauth.string("refresh-token", required=True)
    assert token_url
    assert client_id
    assert refresh_token
    if urlsplit(token_url).scheme != "https":
        raise ConfigError(
            "expected an https:// URL (the refresh token travels to it)",
            source=source,
            key=oauth.key("token-url"),
        )
    client_secret = oauth.string("client-secret")
    for secret in (refresh_token, client_secret):
        if secret:
            register_secret(secret)
    fetch = refresh_token_secret(
        token_url, client_id, client_secret, refresh_token, oauth.string("scope"),
        timeout=30.0, ca_file=oauth.string("ca-file"),
    )  # fmt: skip
    return UserInfo(
        smtp, imap, username,
        credential=Credential.fetched(fetch, mechanism, username, describe=oauth.key("token-url")),
    )  # fmt: skip


#: the mail transports' account: a password login to an SMTP and an IMAP server
MAIL_ACCOUNT: Final = AccountFormat(_USER_KEYS, read_mail_account)
#: the in-process pair's: none needed (``user:``, when given, names the sender's address)
INTRAPROCESS_ACCOUNT: Final = AccountFormat(_USER_KEYS, read_mail_account, required=False)
# the built-in transports' names, known before their builders are imported (a program
# reads its configuration before it sends anything: _transport/factory registers those)
for _name, _account in (("native", MAIL_ACCOUNT), ("curl", MAIL_ACCOUNT),
                        ("intraprocess", INTRAPROCESS_ACCOUNT)):  # fmt: skip
    register_transport_name(_name, _account)


def _read_recipients(
    reader: ConfigSection, transport: str, user: UserInfo | None, user_reader: ConfigSection | None
) -> Recipients:
    """``from`` (else the username, when it is an address) and ``recipients:``."""
    from_ = reader.string("from")
    if from_ is not None:
        from_ = reader.address("from", from_)
    elif user is not None and "@" in user.username:
        from_ = user_reader.address("username", user.username) if user_reader else user.username
    else:
        from_ = INTRAPROCESS_ADDRESS
    rec_reader = reader.mapping("recipients", _RECIPIENT_KEYS)
    to: tuple[str, ...] = ()
    cc: tuple[str, ...] = ()
    bcc: tuple[str, ...] = ()
    if rec_reader is not None:
        to, cc, bcc = (rec_reader.addresses(k) for k in ("to", "cc", "bcc"))
    if transport == "intraprocess" and not to:
        to = (from_,)
    if not (to or cc or bcc):
        raise ConfigError(
            "expected at least one recipient (to, cc or bcc)",
            source=reader.source,
            key="email.recipients",
        )
    return Recipients(from_, to, cc, bcc)


def _read_tls(reader: ConfigSection) -> TLSOptions:
    tls_reader = reader.mapping("tls", _TLS_KEYS)
    if tls_reader is None:
        return TLSOptions()
    ca_file = tls_reader.string("ca-file")
    if ca_file is not None and not Path(ca_file).expanduser().is_file():
        raise tls_reader.error("ca-file", f"expected a readable CA file, {ca_file!r} is not")
    verify, starttls = tls_reader.boolean("verify"), tls_reader.boolean("starttls")
    return TLSOptions(
        str(Path(ca_file).expanduser()) if ca_file else None,
        True if verify is None else verify,
        True if starttls is None else starttls,
    )


def _read_poll(reader: ConfigSection) -> PollOptions:
    poll = PollOptions()
    poll_reader = reader.mapping("poll", _POLL_KEYS)
    if poll_reader is None:
        return poll
    poll = PollOptions(
        poll_reader.number("interval", poll.interval),
        poll_reader.number("idle-after", poll.idle_after),
        poll_reader.number("idle-refresh", poll.idle_refresh),
    )
    if poll.idle_refresh >= 29 * 60:
        raise poll_reader.error("idle-refresh", "expected under 1740 s (RFC 2177: 29 min)")
    return poll


def _read_on_receive(reader: ConfigSection) -> str:
    on_receive = reader.string("on-receive") or "keep"
    if on_receive not in ("keep", "seen", "delete") and not (
        on_receive.startswith("move:") and on_receive[5:].strip()
    ):
        raise reader.error(
            "on-receive", f"expected keep, seen, delete or move:FOLDER, got {on_receive!r}"
        )
    return on_receive


def _read_sending(reader: ConfigSection) -> tuple[str, str | None]:
    """``send-guarantee`` and ``spool`` (required with the spool guarantee)."""
    send_guarantee = reader.string("send-guarantee") or "server"
    if send_guarantee not in SEND_GUARANTEES:
        raise reader.error(
            "send-guarantee",
            f"expected one of {', '.join(SEND_GUARANTEES)}, got {send_guarantee!r}",
        )
    spool = reader.string("spool")
    if send_guarantee == "spool" and spool is None:
        raise reader.error("spool", "required with send-guarantee: spool (a directory)")
    return send_guarantee, str(Path(spool).expanduser()) if spool else None


def _from_mapping(data: Mapping[str, Any], source: str) -> Options:
    """The options of a configuration mapping, one reader per section."""
    # (read in this order, so that of several mistakes the same one is reported first)
    reader = _email_reader(data, source)
    transport = _read_transport(reader)
    polling_period_ns = reader.integer("polling-period", DEFAULT_POLLING_PERIOD_NS)
    max_size = reader.size("max-message-size", DEFAULT_MAX_MESSAGE_SIZE)
    user, user_reader = _read_user(reader, transport)
    recipients = _read_recipients(reader, transport, user, user_reader)
    tls, poll, on_receive = _read_tls(reader), _read_poll(reader), _read_on_receive(reader)
    state_file = reader.string("state-file")
    send_guarantee, spool = _read_sending(reader)
    security = _read_security(reader)
    quarantine = reader.string("quarantine")
    if security.verify == "enforce" and quarantine is None:
        quarantine = DEFAULT_QUARANTINE
    return Options(
        transport=transport,
        user=user,
        recipients=recipients,
        polling_period_ns=polling_period_ns,
        max_message_size=max_size,
        tls=tls,
        timeout=reader.number("timeout", 30.0),
        folder=reader.string("folder") or "INBOX",
        state_file=str(Path(state_file).expanduser()) if state_file else None,
        on_receive=on_receive,
        poll=poll,
        outbox_size=reader.integer("outbox-size", 1000),
        quarantine=quarantine,
        send_guarantee=send_guarantee,
        spool=spool,
        reply_domains=_reply_domains(reader, recipients),
        queue_limit=reader.integer("queue-limit", DEFAULT_QUEUE_LIMIT),
        queue_bytes=reader.size("queue-bytes", DEFAULT_QUEUE_BYTES),
        security=security,
        routing=_read_routing(reader, recipients),
        batch=_read_batch(reader),
        plain_readers=frozenset(a.lower() for a in reader.addresses("plain-readers")),
        limits=_read_limits(reader),
        max_email_bytes=_read_max_email_bytes(reader),
        part_timeout=reader.number("part-timeout", 600.0),
        announce_period=reader.number("announce-period", 30.0),
        provider=reader.string("provider"),
        source=source,
    )


def _read_max_email_bytes(reader: ConfigSection) -> int | None:
    if "max-email-bytes" not in reader.data:
        return None
    size = reader.size("max-email-bytes", 1)
    if size < 256 * 1024:
        raise reader.error("max-email-bytes", f"expected at least 262144 (256 KiB), got {size}")
    return size


_BATCH_KEYS: Final = frozenset({"linger-ms", "max-messages", "max-bytes"})
_LIMIT_KEYS: Final = frozenset(
    {"emails-per-minute", "emails-per-day", "recipients-per-email", "max-connections"}
)


def _read_limits(reader: ConfigSection) -> SendLimits:
    """The ``limits`` section: ``emails-per-minute``, ``emails-per-day``,
    ``recipients-per-email`` (each a positive integer; absent: no limit), and
    ``max-connections`` (a positive integer; absent: 10)."""
    section = reader.mapping("limits", _LIMIT_KEYS)
    if section is None:
        return SendLimits()
    per_minute, per_day, recipients = (
        section.integer(key, 1) if key in section.data else None
        for key in ("emails-per-minute", "emails-per-day", "recipients-per-email")
    )
    return SendLimits(
        per_minute, per_day, recipients,
        max_connections=section.integer("max-connections", DEFAULT_MAX_CONNECTIONS),
    )  # fmt: skip


def _read_batch(reader: ConfigSection) -> BatchPolicy:
    """The ``batch`` section: ``linger-ms``, ``max-messages``, ``max-bytes`` (absent: off)."""
    section = reader.mapping("batch", _BATCH_KEYS)
    if section is None:
        return NO_BATCH
    default = BatchPolicy()
    linger = section.number("linger-ms", default.linger_ms)
    if linger > 60_000:
        raise section.error("linger-ms", f"expected at most 60000, got {linger!r}")
    most = section.integer("max-messages", default.max_messages)
    if most > 10_000:
        raise section.error("max-messages", f"expected at most 10000, got {most!r}")
    size = section.size("max-bytes", default.max_bytes)
    if size < 1024:
        raise section.error("max-bytes", f"expected at least 1024, got {size!r}")
    return BatchPolicy(linger, most, size)


def _read_routing(reader: ConfigSection, recipients: Recipients) -> RoutingOptions:
    """The ``routing`` section: ``hub`` (a name) and ``routes`` (hub name -> address)."""
    default_hub = recipients.from_.partition("@")[0] or "hub"
    section = reader.mapping("routing", _ROUTING_KEYS)
    if section is None:
        return RoutingOptions(default_hub)
    hub = section.string("hub") or default_hub
    if not _HUB_RE.fullmatch(hub):
        raise section.error("hub", f"expected a name without white space or '*', got {hub!r}")
    raw = section.data.get("routes") or {}
    if not isinstance(raw, Mapping):
        raise section.error("routes", "expected a mapping of hub names to mail addresses")
    routes: list[tuple[str, str]] = []
    for name, address in raw.items():
        key = f"routes.{name}"
        if not isinstance(name, str) or not _HUB_RE.fullmatch(name):
            raise section.error(key, "expected a hub name without white space or '*'")
        if not isinstance(address, str):
            raise section.error(key, "expected the mail address that reaches this hub")
        routes.append((name, section.address(key, address)))
    return RoutingOptions(hub, tuple(routes))


def _read_security(reader: ConfigSection) -> SecurityOptions:
    """The ``security`` section, with the ``EMAILMW_SECURITY_*`` variables filling in."""
    sec = reader.mapping("security", _SECURITY_KEYS)
    data: Mapping[str, Any] = sec.data if sec is not None else {}
    sec = sec or ConfigSection({}, reader.source, reader.key("security."), _SECURITY_KEYS)
    env = os.environ.get
    keystore = sec.string("keystore") or env("EMAILMW_SECURITY_KEYSTORE") or None
    identity = sec.string("identity") or env("EMAILMW_SECURITY_IDENTITY") or None
    default_mode = "enforce" if keystore else "off"
    mode = sec.string("verify") or env("EMAILMW_SECURITY_VERIFY") or default_mode
    if mode not in VERIFY_MODES:
        raise sec.error("verify", f"expected one of {', '.join(VERIFY_MODES)}, got {mode!r}")
    if keystore is None and (identity or mode != "off" or data.get("permissions")):
        raise sec.error("keystore", "required with identity, permissions or verify (a directory)")
    if keystore is not None and not Path(keystore).expanduser().is_dir():
        raise sec.error(
            "keystore",
            f"{keystore!r} is not a directory: create it with "
            f"'emailmw security create-keystore {keystore}'",
        )
    permissions = sec.string("permissions")
    if permissions is not None and not Path(permissions).expanduser().is_file():
        raise sec.error("permissions", f"expected a readable file, {permissions!r} is not")
    encrypt = _identity_lists(sec, data, "encrypt")
    servers = _identity_lists(sec, data, "servers")
    if servers and keystore is None:
        raise sec.error("keystore", "required with servers (whose signatures are checked)")
    return SecurityOptions(
        keystore=str(Path(keystore).expanduser()) if keystore else None,
        identity=identity,
        verify=mode,
        permissions=str(Path(permissions).expanduser()) if permissions else None,
        replay_window=sec.number("replay-window", 600.0),
        encrypt=encrypt,
        servers=servers,
    )


def _identity_lists(
    sec: ConfigSection, data: Mapping[str, Any], key: str
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A mapping of ROS name patterns to lists of identities (``encrypt``, ``servers``)."""
    found: list[tuple[str, tuple[str, ...]]] = []
    raw = data.get(key)
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise sec.error(key, "expected a mapping of name patterns to identity lists")
    for pattern, names in raw.items():
        items = [names] if isinstance(names, str) else names
        if (
            not isinstance(pattern, str)
            or not pattern.startswith("/")
            or not isinstance(items, list)
            or not items
            or not all(isinstance(n, str) and n for n in items)
        ):
            raise sec.error(
                f"{key}.{pattern}", "expected a ROS name pattern and a list of identities"
            )
        found.append((pattern, tuple(items)))
    return tuple(found)


def _reply_domains(reader: ConfigSection, recipients: Recipients) -> frozenset[str] | None:
    """``reply-domains``: a list of domains, or ``"*"`` for any; by default the domains of
    the configured From and recipients (a server answers its own organisation only)."""
    value = reader.data.get("reply-domains")
    if value is None:
        addresses = (recipients.from_, *recipients.to, *recipients.cc, *recipients.bcc)
        return frozenset(filter(None, map(address_domain, addresses)))
    if value == "*":
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
        raise reader.error("reply-domains", 'expected "*" or a list of domains')
    return frozenset(i.strip().lower() for i in items)
