"""``emailmw doctor``: what stands between this machine and working emailmw, one check a
line, PASS, WARN or FAIL with what to do.

The facts come from the transport's probe (the servers), the file system (keystore,
permissions file, spool) and the graph in the mailbox; the judgement of each is a pure
function of its facts and the current time (:func:`judge_server`, :func:`judge_clock`,
:func:`judge_keystore`, :func:`judge_graph`, :func:`judge_spool` ...), tested without a
server. :func:`run` gathers and judges; :func:`report` is the block for a bug report,
with no secret in it (no password, no key, no message; the user name as its domain).
"""

from __future__ import annotations

import datetime as dt
import enum
import importlib.metadata
import os
import platform
import stat
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from .._core.config import Options, find_config_file, load_options, read_yaml
from .._core.errors import EmailMWError
from .._core.log import redact
from .._core.providers import PROVIDERS, filled_in
from .._core.qos import (
    DurabilityPolicy,
    QoSCompatibility,
    QoSProfile,
    ReliabilityPolicy,
    qos_check_compatible,
)
from .._delivery.graph import Endpoint, Graph, read_graph
from .._security import Keystore, PublicIdentity, load_permissions
from .._transport.factory import make_receiver, transport_kind
from .._transport.imap import is_courier
from .._transport.ledger import ledger_path, sent_within
from .._transport.probe import ServerProbe

__all__ = [
    "Check",
    "Status",
    "judge_certificate",
    "judge_clock",
    "judge_graph",
    "judge_keystore",
    "judge_quota",
    "judge_server",
    "judge_spool",
    "report",
    "run",
]

#: a certificate or key that expires sooner than this is a warning
EXPIRY_WARNING = dt.timedelta(days=14)
#: clocks further apart than this are a warning; further than CLOCK_FAIL a failure
CLOCK_WARN_S = 2.0
CLOCK_FAIL_S = 60.0


class Status(enum.Enum):
    PASS = "PASS"  # noqa: S105 - a status, not a password
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Check:
    """One line of the doctor: its status, what was checked, what it found or what to do."""

    status: Status
    name: str
    message: str

    def line(self) -> str:
        return f"{self.status.value}  {self.name:<16} {self.message}"


def _pass(name: str, message: str) -> Check:
    return Check(Status.PASS, name, message)


def _warn(name: str, message: str) -> Check:
    return Check(Status.WARN, name, message)


def _fail(name: str, message: str) -> Check:
    return Check(Status.FAIL, name, message)


def _date(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


# ----------------------------------------------------------------------- servers


def judge_certificate(probe: ServerProbe, now: dt.datetime) -> Check:
    """The validity period of the presented certificate."""
    name = f"{probe.protocol} certificate"
    cert = probe.certificate
    if cert is None:
        return _warn(name, f"{probe.endpoint} presented no certificate to read")
    if now > cert.not_after:
        return _fail(
            name,
            f"{probe.endpoint}'s certificate expired on {_date(cert.not_after)}: the "
            "server's administrator must renew it",
        )
    if now < cert.not_before:
        return _fail(
            name,
            f"{probe.endpoint}'s certificate is valid only from {_date(cert.not_before)}: "
            "check this machine's clock, else the server's certificate",
        )
    if cert.not_after - now < EXPIRY_WARNING:
        return _warn(
            name,
            f"{probe.endpoint}'s certificate expires on {_date(cert.not_after)}: ask the "
            "server's administrator to renew it",
        )
    return _pass(name, f"valid until {_date(cert.not_after)} ({cert.subject})")


def judge_server(probe: ServerProbe, options: Options, now: dt.datetime) -> list[Check]:
    """Resolving, TCP, TLS (chain and host name, the certificate's dates) and login of
    one server, up to the first step that failed."""
    p, key = probe.protocol, f"email.user.url-{probe.protocol}"
    if probe.resolve_error:
        return [_fail(f"{p} dns", f"{probe.resolve_error}: check {key}")]
    out = (
        [_pass(f"{p} dns", f"{probe.endpoint.host} is {', '.join(probe.addresses)}")]
        if probe.addresses
        else []
    )
    if probe.connect_error:
        return [*out, _fail(f"{p} tcp", f"{probe.connect_error}: check {key} and firewalls")]
    out.append(_pass(f"{p} tcp", f"{probe.endpoint.host}:{probe.endpoint.port} answers"))
    if probe.tls == "none":
        out.append(
            _warn(
                f"{p} tls",
                "no TLS (tls.starttls: false): the password crosses the network in clear; "
                "use an smtps/imaps URL or STARTTLS",
            )
        )
    elif probe.certificate_error:
        return [*out, _fail(f"{p} tls", f"{probe.certificate_error}: is {key} a TLS port?")]
    else:
        if probe.certificate is not None or probe.verify_error:
            out.append(judge_certificate(probe, now))
        if probe.verify_error:
            return [*out, _verify_failure(probe, options)]
        if not options.tls.verify:
            out.append(
                _warn(
                    f"{p} tls",
                    "certificates are not verified (tls.verify: false): anyone on the path "
                    "can read the password; remove it and give tls.ca-file if needed",
                )
            )
        else:
            out.append(_pass(f"{p} tls", f"{probe.tls} TLS, chain and host name verified"))
    if probe.login_error:
        secret = (
            "email.user.password (or password-command)"
            if options.user is None or options.user.mechanism == "password"
            else "the token email.user's token-command or oauth2 gives"
        )
        return [*out, _fail(f"{p} login", f"{probe.login_error}: check email.user.username "
                                          f"and {secret}")]  # fmt: skip
    oauth = options.user is not None and options.user.mechanism != "password"
    how = f" ({options.user.mechanism.upper()})" if oauth and options.user else ""
    out.append(_pass(f"{p} login", f"logged in{how}"))
    return out


def _verify_failure(probe: ServerProbe, options: Options) -> Check:
    reason = probe.verify_error or "verification failed"
    host = probe.endpoint.host
    low = reason.lower()
    if "hostname" in low or "ip address mismatch" in low:
        names = ", ".join(probe.certificate.names) if probe.certificate else "?"
        advice = f"the certificate is for {names}, not {host}: use one of those names in the URL"
    elif "expired" in low:
        advice = "the certificate expired: the server's administrator must renew it"
    elif "issuer" in low or "self-signed" in low or "self signed" in low:
        advice = (
            "this machine does not trust the certificate's issuer: give its CA as "
            "tls.ca-file" + (f" (now {options.tls.ca_file})" if options.tls.ca_file else "")
        )
    else:
        advice = "see the reason; tls.ca-file names the CA to trust"
    return _fail(
        f"{probe.protocol} tls", f"certificate of {probe.endpoint} refused ({reason}): {advice}"
    )


def judge_folders(probe: ServerProbe, options: Options) -> Check:
    if probe.folder_error:
        return _fail("imap folders", f"{probe.folder_error}: check the account on the server")
    if options.folder not in probe.folders:
        return _fail(
            "imap folders",
            f"no folder {options.folder!r} on the account (it has: "
            f"{', '.join(sorted(probe.folders)) or 'none'}): fix email.folder",
        )
    return _pass("imap folders", f"{options.folder} is there ({len(probe.folders)} folders)")


_WITHOUT: dict[str, str] = {
    "IDLE": "receivers poll every polling-period",
    "MOVE": "a move is COPY + expunge (not atomic: a copy a dropped connection leaves is "
    "handed out again, flagged as a repeat)",
    "UIDPLUS": "an expunge removes every message flagged \\Deleted in the folder",
    "SPECIAL-USE": "no folder can be named by its role (move:\\Trash)",
}


def judge_capabilities(probe: ServerProbe) -> Check:
    """The IMAP extensions emailmw uses, and what it does without each one missing."""
    missing = [c for c in _WITHOUT if c not in probe.capabilities]
    notes = [f"no {c}: {_WITHOUT[c]}" for c in missing]
    if is_courier(probe.greeting):
        notes.append(_COURIER)
    if not notes:
        return _pass("imap features", "IDLE, MOVE, UIDPLUS and SPECIAL-USE offered")
    return _warn("imap features", "; ".join(notes))


_COURIER: Final = (
    "Courier-IMAP: its IDLE looks for new mail only every IMAP_IDLE_TIMEOUT s (receivers "
    "poll instead), and it takes 2 s to delete or rename a folder (a group's claim round "
    "waits that long to release its lock: give groups an expiry of 5 s or more)"
)


def judge_roles(probe: ServerProbe, options: Options) -> list[Check]:
    """Each folder the configuration names by its role (``move:\\Trash``, a quarantine
    ``\\Junk``; the Gmail profile's delete) has a folder with that role on the server."""
    named = []
    if options.on_receive.startswith("move:\\"):
        named.append(("on-receive", options.on_receive[5:]))
    if options.quarantine and options.quarantine.startswith("\\"):
        named.append(("quarantine", options.quarantine))
    out = []
    for key, role in named:
        folder = probe.roles.get(role.lower())
        if folder is None:
            have = ", ".join(f"{r} {f}" for r, f in sorted(probe.roles.items())) or "none"
            text = (
                f"{key}: {role} names a role no folder has on the server (roles there: "
                f"{have}): name the folder itself"
            )
            out.append(_fail("imap roles", text))
        else:
            out.append(_pass("imap roles", f"{key}: {role} is the server's {folder!r}"))
    return out


def judge_profile(options: Options, given: Mapping[str, Any] | None = None) -> Check | None:
    """With ``provider:``, whether the servers are the provider's (else its limits and
    quirks are another provider's), and what the profile filled in of ``given`` (the
    ``email:`` mapping as the file gives it): servers, login, limits, folder roles."""
    provider = PROVIDERS.get(options.provider or "")
    if provider is None or options.user is None or not provider.user:
        return None
    filled = filled_in(given, provider) if given is not None else []
    said = (
        "; it filled in " + ", ".join(f"{key} {value}" for key, value in filled)
        if filled
        else "; it filled in nothing (the file gives every value)"
        if given is not None
        else ""
    )
    wrong = []
    for key, url in (("url-smtp", options.user.smtp), ("url-imap", options.user.imap)):
        expected = provider.user.get(key, "")
        host = expected.partition("://")[2].rpartition(":")[0]
        if host and url.host.lower() != host:
            wrong.append(f"{key} is {url.host}, the profile's {host}")
    if wrong:
        return _warn(
            "provider",
            f"provider {provider.name}, but {'; '.join(wrong)}: its limits and quirks are "
            f"{provider.name}'s; remove provider: or fix the URL{said}",
        )
    return _pass("provider", f"{provider.name}: the servers are the profile's{said}")


def _email_mapping(path: Path) -> Mapping[str, Any] | None:
    """The ``email:`` mapping of the configuration file as it is written (read again: the
    options hold it with the profile merged in); None if it cannot be had."""
    try:
        data = read_yaml(path)
    except EmailMWError:
        return None
    if isinstance(data, Mapping) and isinstance(data.get("email"), Mapping):
        return cast("Mapping[str, Any]", data["email"])
    return data if isinstance(data, Mapping) else None


def judge_sending(options: Options, now: float) -> Check | None:
    """The day's (and minute's) use of the sending budget, from this machine's ledger
    (every process that sent as the account here; ``_transport/ledger.py``)."""
    limits = options.limits
    if not limits.any or options.user is None:
        return None
    path = ledger_path(options.user.username, options.user.smtp.url)
    parts, share = [], 0.0
    for name, most, seconds in (("emails-per-day", limits.emails_per_day, 86_400.0),
                                ("emails-per-minute", limits.emails_per_minute, 60.0)):  # fmt: skip
        if most:
            used = sent_within(path, now, seconds)
            share = max(share, used / most) if seconds > 60 else share
            span = "24 h" if seconds > 60 else "minute"
            parts.append(f"{used} of {most} emails in the last {span} ({name})")
    text = "sent from this machine: " + ", ".join(parts)
    if share >= 1:
        return _fail("sending", f"{text}: the day's budget is spent; sending waits for the "
                                "oldest of the day to age out")  # fmt: skip
    if share >= 0.8:
        return _warn("sending", f"{text}: most of the day's budget is spent")
    return _pass("sending", text)


def judge_quota(quota: tuple[int, int] | None) -> Check:
    """``quota``: (used, limit) in KiB."""
    if quota is None or quota[1] <= 0:
        return _pass("imap quota", "the server reports no storage quota")
    used, limit = quota
    share = used / limit
    text = f"{used / 1024:.1f} of {limit / 1024:.1f} MiB used ({share:.0%})"
    if share >= 0.95:
        return _fail(
            "imap quota",
            f"{text}: mail to the account bounces soon; settle "
            "messages with on-receive: delete or move, or raise the quota",
        )
    if share >= 0.8:
        return _warn("imap quota", f"{text}: free space (on-receive: delete or move)")
    return _pass("imap quota", text)


def judge_clock(
    server_time: float | None,
    local_time: float | None,
    source: str,
    *,
    replay_window: float | None = None,
    error: str | None = None,
) -> Check:
    """This machine's clock against the server's: emailmw stamps every message with it
    (Source-Timestamp: lifespans, deadlines, the replay window of signed mail)."""
    if server_time is None or local_time is None:
        return _warn("clock", f"could not read the server's clock ({error or 'no source'})")
    skew = local_time - server_time
    ahead = "ahead of" if skew > 0 else "behind"
    text = f"this machine is {abs(skew):.1f} s {ahead} the server (by {source})"
    if replay_window is not None and abs(skew) >= replay_window:
        return _fail(
            "clock",
            f"{text}: signed mail is refused as replayed; sync the clock "
            "(NTP: timedatectl set-ntp true)",
        )
    if abs(skew) >= CLOCK_FAIL_S:
        return _fail(
            "clock",
            f"{text}: timestamps, lifespans and deadlines are wrong; sync "
            "the clock (NTP: timedatectl set-ntp true)",
        )
    if abs(skew) >= CLOCK_WARN_S:
        return _warn(
            "clock", f"{text}: delays and lifespans are off by as much; sync the clock (NTP)"
        )
    return _pass("clock", f"within {CLOCK_WARN_S:g} s of the server ({source})")


# ----------------------------------------------------------------------- security


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def judge_keystore(options: Options, now: float) -> list[Check]:
    """The keystore's permissions, this process's identity and the expiry of every key."""
    security = options.security
    if security.keystore is None:
        return [_pass("keystore", "none configured: messages are not signed (security.md)")]
    try:
        store = Keystore(security.keystore)
        store.check()
    except EmailMWError as exc:
        return [_fail("keystore", str(exc))]
    out: list[Check] = []
    private = store.path / "private"
    loose = [p for p in sorted(private.glob("*.pem")) if _mode(p) & 0o077]
    if _mode(private) & 0o077:
        loose.insert(0, private)
    for path in loose:
        wanted = "700" if path.is_dir() else "600"
        out.append(
            _fail(
                "keystore",
                f"{path} may be read by others (mode {_mode(path):o}): run 'chmod {wanted} {path}'",
            )
        )
    for problem in store.problems:
        out.append(_warn("keystore", problem))
    if security.identity is not None:
        try:
            store.identity(security.identity)
        except EmailMWError as exc:
            if not loose:
                out.append(_fail("keystore", str(exc)))
    if not out:
        who = f"identity {security.identity}" if security.identity else "no identity (verify only)"
        out.append(_pass("keystore", f"{store.path}: private, {who}, verify {security.verify}"))
    out.extend(_judge_keys(store.trusted().values(), security.identity, now))
    return out


def _judge_keys(keys: Iterable[PublicIdentity], own: str | None, now: float) -> list[Check]:
    out = []
    soon = now + EXPIRY_WARNING.total_seconds()
    for key in sorted(keys, key=lambda k: k.name):
        if key.not_after is None:
            continue
        whose = "this process's identity" if key.name == own else f"identity {key.name}"
        renew = f"create a new key ('emailmw security create-key') for {key.name}"
        if key.expired(now):
            status = Status.FAIL if key.name == own else Status.WARN
            out.append(
                Check(
                    status,
                    "keys",
                    f"{whose} expired on {key.expiry_text()}: its messages are refused; {renew}",
                )
            )
        elif key.not_after < soon:
            out.append(_warn("keys", f"{whose} expires on {key.expiry_text()}: {renew}"))
    if not out:
        out.append(_pass("keys", "no trusted key expired or expiring within 14 days"))
    return out


def judge_permissions(options: Options) -> Check:
    security = options.security
    path: Path | None = Path(security.permissions) if security.permissions else None
    if path is None and security.keystore is not None:
        candidate = Path(security.keystore).expanduser() / "permissions.yaml"
        path = candidate if candidate.is_file() else None
    if path is None:
        return _pass("permissions", "no permissions file: any trusted identity may do anything")
    try:
        permissions = load_permissions(path)
    except EmailMWError as exc:
        return _fail("permissions", f"{exc}: fix the file (security.md: permissions)")
    if _mode(path) & 0o022:
        return _fail(
            "permissions",
            f"{path} may be written by others (mode {_mode(path):o}): run 'chmod 644 {path}'",
        )
    own = security.identity
    if own is not None and own not in permissions.grants:
        return _warn(
            "permissions",
            f"{path} grants nothing to this process's identity {own}: "
            "receivers that enforce it refuse its messages",
        )
    return _pass("permissions", f"{path}: grants for {len(permissions.grants)} identities")


# ----------------------------------------------------------------------- graph, spool


def _profile(endpoint: Endpoint) -> QoSProfile | None:
    qos = dict(endpoint.qos)
    try:
        return QoSProfile(
            reliability=ReliabilityPolicy[qos["reliability"].upper()],
            durability=DurabilityPolicy[qos["durability"].upper()],
        )
    except KeyError:
        return None


def judge_graph(graph: Graph) -> list[Check]:
    """Publishers and subscriptions of one topic whose QoS ROS 2 deems incompatible (as
    ``ros2 doctor`` reports them)."""
    endpoints: dict[str, dict[str, list[tuple[str, QoSProfile]]]] = {}
    for node, record in graph.nodes.items():
        for kind, endpoint in record.endpoints:
            profile = _profile(endpoint)
            if profile is not None:
                endpoints.setdefault(endpoint.topic, {}).setdefault(kind, []).append(
                    (node, profile)
                )
    out = []
    for topic, kinds in sorted(endpoints.items()):
        for publisher, offered in kinds.get("publisher", []):
            for subscriber, asked in kinds.get("subscription", []):
                verdict, reason = qos_check_compatible(offered, asked)
                if verdict is QoSCompatibility.ERROR:
                    out.append(
                        _warn(
                            "graph",
                            f"{topic}: publisher {publisher} and subscription "
                            f"{subscriber} have incompatible QoS ({reason.strip()}); "
                            "ROS 2 would not connect them: align them",
                        )
                    )
    if not out:
        out.append(_pass("graph", f"{len(graph.nodes)} nodes, no incompatible QoS"))
    return out


def judge_spool(spool: str | None, now: float) -> Check:
    """Emails waiting in the spool, and emails the server refused for good."""
    if spool is None:
        return _pass("spool", "none configured")
    directory = Path(spool).expanduser()
    if not directory.is_dir():
        return _pass("spool", f"{directory} does not exist yet (made on first use)")
    waiting = sorted(directory.glob("*.msg"))
    failed = sorted((directory / "failed").glob("*.msg"))
    if failed:
        return _warn(
            "spool",
            f"{len(failed)} email(s) the server refused for good in "
            f"{directory / 'failed'}: read the log for why, then delete them",
        )
    if waiting:
        age = now - int(waiting[0].name.split("-", 1)[0]) / 1e9
        return _warn(
            "spool",
            f"{len(waiting)} email(s) waiting, the oldest {age:.0f} s: start "
            "the process that owns the spool, or check its SMTP login",
        )
    return _pass("spool", f"{directory}: nothing waiting")


# ----------------------------------------------------------------------- run, report


Probe = Callable[[Options], ServerProbe]


def run(
    config: str | os.PathLike[str] | None,
    *,
    smtp: Probe | None = None,
    imap: Probe | None = None,
    now: Callable[[], float] = time.time,
) -> tuple[list[Check], Options | None]:
    """Every check, in order; the options when the configuration could be read. The
    servers are checked by the probes the transport registered (``smtp``/``imap``: others,
    for a test)."""
    try:
        path = Path(config) if config is not None else find_config_file()
    except EmailMWError as exc:
        return [_fail("config", str(exc))], None
    if path is None:
        return [
            _fail(
                "config",
                "no configuration file: give --config FILE or "
                "EMAILMW_CONFIG_FILE, or write ./email.yml (README: Configuration)",
            )
        ], None
    if not path.is_file():
        return [_fail("config", f"{path} does not exist: give the path of your email.yml")], None
    try:
        options = load_options(path)
    except EmailMWError as exc:
        return [_fail("config", str(exc))], None
    checks = [_config_check(options, path)]
    profile = judge_profile(options, _email_mapping(path))
    if profile is not None:
        checks.append(profile)
    if _mode(path) & 0o077 and options.user is not None:
        checks.append(
            _warn(
                "config",
                f"{path} holds the password and may be read by others "
                f"(mode {_mode(path):o}): run 'chmod 600 {path}'",
            )
        )
    if options.user is None:
        return checks, options
    try:
        probes = dict(transport_kind(options.transport).probes)
    except EmailMWError as exc:
        return [*checks, _fail("config", str(exc))], options
    smtp, imap = smtp or probes.get("smtp"), imap or probes.get("imap")
    if smtp is None or imap is None:
        return [
            *checks,
            _warn(
                "servers",
                f"the {options.transport} transport has no probes "
                "of its servers: they are not checked",
            ),
        ], options
    moment = dt.datetime.fromtimestamp(now(), dt.UTC)
    sent = _guarded(smtp, options, "smtp")
    checks += judge_server(sent, options, moment)
    got = _guarded(imap, options, "imap")
    checks += judge_server(got, options, moment)
    if got.logged_in:
        checks += [judge_folders(got, options), *judge_roles(got, options)]
        checks += [judge_capabilities(got), judge_quota(got.quota)]
    sending = judge_sending(options, now())
    if sending is not None:
        checks.append(sending)
    clock = sent if sent.server_time is not None else got
    if sent.logged_in or got.logged_in:
        window = options.security.replay_window if options.security.enabled else None
        checks.append(
            judge_clock(
                clock.server_time,
                clock.local_time,
                clock.time_source,
                replay_window=window,
                error=got.time_error,
            )
        )
    checks += judge_keystore(options, now())
    checks.append(judge_permissions(options))
    if got.logged_in:
        checks += _graph_checks(options)
    checks.append(judge_spool(options.spool, now()))
    return [_scrubbed(c, options) for c in checks], options


def _scrubbed(check: Check, options: Options) -> Check:
    """``check`` with every secret cut out, should a server's message have quoted one."""
    message = redact(check.message)
    return check if message == check.message else Check(check.status, check.name, message)


def _guarded(probe: Probe, options: Options, protocol: str) -> ServerProbe:
    """``probe(options)``; a failure the probe did not foresee is its TCP step's, with the
    exception's type (a doctor reports, it does not crash)."""
    try:
        return probe(options)
    except Exception as exc:  # noqa: BLE001 - anything a backend raises becomes a FAIL line
        assert options.user is not None
        endpoint = options.user.smtp if protocol == "smtp" else options.user.imap
        return ServerProbe(
            protocol, endpoint, connect_error=f"probing failed: {type(exc).__name__}: {exc}"
        )


def _config_check(options: Options, path: Path) -> Check:
    if options.user is None:
        return _warn(
            "config",
            f"{path}: no mail account (intraprocess transport): add "
            "email.user to talk to other processes",
        )
    return _pass(
        "config", f"{path}: {options.transport} transport, account {options.user.username}"
    )


def _graph_checks(options: Options) -> list[Check]:
    try:
        receiver = make_receiver(options)
    except EmailMWError as exc:
        return [_warn("graph", f"could not read the graph: {exc}")]
    try:
        return judge_graph(read_graph(receiver))
    except EmailMWError as exc:
        return [_warn("graph", f"could not read the graph: {exc}")]
    finally:
        receiver.close()


def summary(checks: list[Check]) -> str:
    failed = sum(c.status is Status.FAIL for c in checks)
    warned = sum(c.status is Status.WARN for c in checks)
    if not failed and not warned:
        return f"All {len(checks)} checks passed"
    return f"{failed}/{len(checks)} checks failed, {warned} warned"


def _versions() -> str:
    names = (
        "aiosmtplib",
        "imapclient",
        "cryptography",
        "PyYAML",
        "pycurl",
        "pyspark",
        "mcap",
        "rosbags",
    )
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def report(checks: list[Check], options: Options | None) -> str:
    """The block to paste in a bug report: versions, the configuration's shape and the
    checks. No secret: no password, no key material; the user name shows its domain."""
    from .. import __version__

    lines = [
        "emailmw doctor report",
        f"emailmw: {__version__}",
        f"python: {sys.version.split()[0]} ({platform.python_implementation()})",
        f"platform: {platform.platform()}",
        f"packages: {_versions()}",
    ]
    if options is not None:
        lines.append(f"transport: {options.transport}")
        if options.user is not None:
            domain = options.user.username.rpartition("@")[2] or "(no domain)"
            lines += [
                f"smtp: {options.user.smtp}",
                f"imap: {options.user.imap}",
                f"user: <redacted>@{domain}",
            ]
        lines += [
            f"tls: verify {options.tls.verify}, starttls {options.tls.starttls}, "
            f"ca-file {'set' if options.tls.ca_file else 'system'}",
            f"folder: {options.folder}, on-receive {options.on_receive}, "
            f"send-guarantee {options.send_guarantee}, spool {'set' if options.spool else 'none'}",
            f"security: verify {options.security.verify}, keystore "
            f"{'set' if options.security.keystore else 'none'}, identity "
            f"{'set' if options.security.identity else 'none'}",
        ]
    lines += ["checks:", *(f"  {c.line()}" for c in checks), summary(checks)]
    text = "\n".join(lines)
    if options is not None and options.user is not None:
        user = options.user.username
        text = text.replace(user, f"<redacted>@{user.rpartition('@')[2]}")
    return text
