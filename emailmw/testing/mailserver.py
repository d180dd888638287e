"""A real mail server on loopback for tests, benchmarks and the demo: Postfix + Dovecot
(or, with ``imap_server="cyrus"`` / ``--server cyrus``, Cyrus IMAP for IMAP: ``cyrus.py``;
``"courier"``, Courier-IMAP: ``courier.py``).

Debian's Postfix (SMTP with STARTTLS, SMTPS; AUTH required, SASL through Dovecot, LMTP
delivery) and Dovecot (IMAP with STARTTLS, IMAPS), run as private instances with their
configuration and state under one directory (default ``/tmp/emailmw-testmail``). A port left
at 0 (the default) is one free when the server starts; the ports in use are recorded in the
state directory (``ports.json``), so ``MailServer(state_dir=...)`` in another process, and the
command line's ``config`` and ``status``, find a running instance's ports.
``/etc/postfix`` and ``/etc/dovecot`` are never used, and Debian's system services are never
started. A private CA signs the server certificate (SAN ``localhost``, ``127.0.0.1``, ``::1``);
clients verify it with :attr:`MailServer.ca_file`.

Accounts ``alice``, ``bob``, ``robot`` and ``u0001`` ... ``u1000`` at ``example.test``, password
``secret``. :meth:`MailServer.fresh_account` hands out accounts nobody used since the start.

Several servers stand for sites of different providers: each has its own domain, and
:func:`federate` makes them deliver to each other's domains over SMTP on loopback (each
server's MX port; every server on the way adds its ``Received``), as mail between providers
goes.

Needs root (the daemons' masters do) and the Debian packages, which :func:`ensure_installed`
installs. Command line::

    python -m emailmw.testing.mailserver install | start [--keep] [--smtp-port N ...] | stop
    python -m emailmw.testing.mailserver status          # running or not, and the ports
    python -m emailmw.testing.mailserver config USER     # an email.yml for that account
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import grp
import json
import os
import pwd
import random
import re
import shlex
import shutil
import socket
import ssl
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import yaml

from .._core.errors import EmailMWError
from ._debian import apt_install, ensure
from ._processes import alive, read_pid, wait_gone
from .courier import CourierIMAP, ensure_courier
from .cyrus import CyrusIMAP, ensure_cyrus

__all__ = [
    "MailServer",
    "MailServerError",
    "ensure_installed",
    "federate",
    "free_ports",
    "main",
    "unavailable",
]

PACKAGES = ("postfix", "dovecot-core", "dovecot-imapd", "dovecot-lmtpd", "openssl")
_SBIN = "/usr/sbin:/sbin"
_TEMPLATES = ("dovecot.conf", "main.cf", "master.cf")
#: what Dovecot 2.3 offers after login (its own list, for a server that drops some)
_DOVECOT_CAPABILITIES: Final = (
    "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE SORT SORT=DISPLAY THREAD=REFERENCES "
    "THREAD=REFS THREAD=ORDEREDSUBJECT MULTIAPPEND URL-PARTIAL CATENATE UNSELECT CHILDREN "
    "NAMESPACE UIDPLUS LIST-EXTENDED I18NLEVEL=1 CONDSTORE QRESYNC ESEARCH ESORT SEARCHRES "
    "WITHIN CONTEXT=SEARCH LIST-STATUS BINARY MOVE SNIPPET=FUZZY PREVIEW=FUZZY PREVIEW "
    "STATUS=SIZE SAVEDATE LITERAL+ NOTIFY SPECIAL-USE"
)
_PORTS = ("smtp_port", "smtps_port", "imap_port", "imaps_port", "mx_port")
#: the IMAP servers :class:`MailServer` runs (``imap_server``)
IMAP_SERVERS: Final = ("dovecot", "cyrus", "courier")
#: taken by every server of this machine while it makes or reads its mail user
USER_LOCK: Final = Path("/run/lock/emailmw-mail-user.lock")
#: the refusals of :meth:`MailServer.refused_address`, by their reply code
_REFUSED: Final = {
    "552": "552 5.2.2 Mailbox full: quota exceeded",
    "452": "452 4.2.2 Mailbox full for now: quota exceeded",
}


class MailServerError(EmailMWError):
    """The local mail server could not be installed, started or stopped."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{env.get('PATH', '/usr/bin:/bin')}:{_SBIN}"
    return env


def _which(command: str) -> str | None:
    return shutil.which(command, path=_env()["PATH"])


def missing_packages() -> list[str]:
    """The Debian packages this server needs that are not installed."""
    need = []
    if not _which("postfix"):
        need.append("postfix")
    if not _which("dovecot"):
        need.append("dovecot-core")
    if not os.access("/usr/lib/dovecot/imap", os.X_OK):
        need.append("dovecot-imapd")
    if not os.access("/usr/lib/dovecot/lmtp", os.X_OK):
        need.append("dovecot-lmtpd")
    if not _which("openssl"):
        need.append("openssl")
    return need


def unavailable() -> str | None:
    """Why this machine cannot run the server (not root: the daemons' masters need it), or
    None. Missing packages are not a reason as root: :func:`ensure_installed` installs them."""
    if os.geteuid() != 0:
        return "the local Postfix + Dovecot must be started as root"
    return None


def ensure_installed() -> None:
    """Install the Debian packages when missing (as root); otherwise say what to install."""
    need = missing_packages()
    if not need:
        return
    if os.geteuid() != 0:
        raise MailServerError(
            f"missing Debian packages: {' '.join(need)}; install them as root with "
            f"'apt-get install -y --no-install-recommends {' '.join(PACKAGES)}'"
        )
    env = _env() | {"DEBIAN_FRONTEND": "noninteractive"}

    def install() -> None:
        # 'No configuration': Debian writes no /etc/postfix/main.cf; we never use it
        subprocess.run(
            ["debconf-set-selections"],
            input="postfix postfix/main_mailer_type select No configuration\n"
            "postfix postfix/mailname string mail.example.test\n",
            text=True,
            check=False,
            env=env,
        )
        print(f"[mailserver] installing {' '.join(PACKAGES)}", file=sys.stderr)
        apt_install(PACKAGES)

    ensure(lambda: not missing_packages(), install)
    if missing_packages():
        raise MailServerError(f"still missing after apt-get install: {missing_packages()}")


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands to outgoing connections (Linux's
    ``ip_local_port_range``; the IANA range elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports nothing is bound to right now, chosen at random outside
    the kernel's ephemeral range (10000 and up): a server stopped and started again on them
    (``start(fresh=False)``) finds them free, where a port of the ephemeral range can be
    taken meanwhile as the local port of any outgoing connection on the machine. Falls back
    to the kernel's choice when that range leaves no room."""
    low, high = _ephemeral_range()
    candidates = [*range(10_000, min(low, 65_536)), *range(high + 1, 65_536)]
    chosen: list[int] = []
    rng = random.SystemRandom()
    for port in rng.sample(candidates, min(len(candidates), 50 * count + 200)):
        if len(chosen) == count:
            break
        if _bindable(host, port) and _reserve_port(port):
            chosen.append(port)
    sockets = []
    try:
        while len(chosen) < count:  # (the kernel's choice, where the range left no room)
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
            chosen.append(sock.getsockname()[1])
        return chosen
    finally:
        for sock in sockets:
            sock.close()


#: a port chosen by :func:`free_ports` is not chosen again (by any process of this user)
#: for this long, so a server stopped for a restart gets its ports back
RESERVATION_S: Final = 3600.0


def _bindable(host: str, port: int, *, reuse: bool = False) -> bool:
    """Whether a socket can bind ``port`` now (``reuse``: with ``SO_REUSEADDR``, as the
    servers bind, which a closed connection's TIME_WAIT does not stop)."""
    with socket.socket() as sock:
        if reuse:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _reserve_port(port: int, *, renew: bool = False) -> bool:
    """Mark ``port`` as chosen (a file in a private directory of ``/tmp``) so that
    :func:`free_ports` in any process passes it over for :data:`RESERVATION_S`. False if
    it is reserved already (``renew``: take it over, as its own server does at a restart)."""
    folder = Path(tempfile.gettempdir()) / f"emailmw-ports-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / str(port)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except FileExistsError:
        pass
    try:
        stale = time.time() - path.stat().st_mtime > RESERVATION_S
    except FileNotFoundError:
        stale = True
    if not (renew or stale):
        return False
    path.touch()
    return True


def _ports_released(ports: Iterable[int], host: str = "127.0.0.1", timeout: float = 10.0) -> bool:
    """Wait until nothing listens on ``ports`` any more (a stopped daemon's children may
    hold its listening sockets for a moment after the master ended); False at ``timeout``."""
    deadline = time.monotonic() + timeout
    pending = set(ports)
    while True:
        pending = {port for port in pending if not _bindable(host, port, reuse=True)}
        if not pending:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@dataclass
class MailServer:
    """One private Postfix + Dovecot instance. ``start()`` returns once all four ports
    answer (TLS ports with a verified handshake) or raises :class:`MailServerError` with the
    servers' log tails. A context manager: leaving it stops the servers."""

    state_dir: Path = field(default_factory=lambda: Path("/tmp/emailmw-testmail"))
    host: str = "127.0.0.1"
    # 0: a port free at start (the one in use is recorded, see the module's docstring)
    smtp_port: int = 0
    smtps_port: int = 0
    imap_port: int = 0
    imaps_port: int = 0
    #: where other sites' servers deliver mail for this one's domain (:meth:`federate`): an
    #: SMTP port without AUTH that takes mail for this domain only, as a provider's MX does
    mx_port: int = 0
    domain: str = "example.test"
    password: str = field(default="secret", repr=False)
    pool_size: int = 1000
    vmail_user: str = "vmail"
    ready_timeout: float = 30.0
    #: Postfix's message_size_limit (it advertises it as SIZE)
    message_size_limit: int = 52_428_800
    #: a provider's sending rate: at most this many messages per client in
    #: ``rate_time_unit`` seconds, then ``450 4.7.1`` (0: no limit)
    message_rate_limit: int = 0
    rate_time_unit: int = 60
    #: Dovecot's mail_max_userip_connections: IMAP sessions per account and client IP
    #: (Dovecot's default is 10; tests that open many sessions need more)
    max_userip_connections: int = 500
    #: capabilities the IMAP server does not offer (of IDLE, MOVE, UIDPLUS, CONDSTORE ...):
    #: it advertises Dovecot's list without them (:meth:`without_capabilities`)
    dropped_capabilities: tuple[str, ...] = ()
    #: the IMAP server: ``dovecot``, ``cyrus`` (Cyrus IMAP 3.6 from Debian's packages,
    #: ``testing/cyrus.py``: Postfix delivers to it over LMTP) or ``courier``
    #: (Courier-IMAP 5.0, ``testing/courier.py``: Postfix delivers to its Maildirs); beside
    #: either, Dovecot only authenticates Postfix's submission
    imap_server: str = "dovecot"

    def __post_init__(self) -> None:
        if self.imap_server not in IMAP_SERVERS:
            raise MailServerError(
                f"imap_server is one of {', '.join(IMAP_SERVERS)}, not {self.imap_server!r}"
            )
        self._dovecot_imap: tuple[int, int] | None = None  # (Dovecot's own, beside another)
        self.state_dir = Path(self.state_dir)
        if not self.state_dir.is_absolute() or len(str(self.state_dir)) > 60:
            raise MailServerError("state_dir must be absolute and at most 60 characters")
        self._pool = (f"u{i:04d}" for i in range(1, self.pool_size + 1))
        self._chosen = tuple(name for name in _PORTS if not getattr(self, name))
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, KeyError):
            recorded = json.loads((self.state_dir / "ports.json").read_text())
            for name in self._chosen:
                setattr(self, name, int(recorded[name]))

    # ------------------------------------------------------------------ accounts

    @property
    def ports(self) -> dict[str, int]:
        """The four ports by name (``smtp_port`` ...); 0 for one not chosen yet."""
        return {name: getattr(self, name) for name in _PORTS}

    @property
    def users(self) -> list[str]:
        return ["alice", "bob", "robot", *(f"u{i:04d}" for i in range(1, self.pool_size + 1))]

    def address(self, user: str) -> str:
        return f"{user}@{self.domain}"

    def fresh_account(self) -> str:
        """An account (``user@domain``) no test has used since the server started."""
        try:
            address = self.address(next(self._pool))
        except StopIteration:
            raise MailServerError(f"all {self.pool_size} fresh accounts are used") from None
        if self.imap_server == "cyrus":
            cyrus = self._cyrus()
            cyrus.add_account(address)
            cyrus.make_mailboxes(address)
        return address

    def _cyrus(self) -> CyrusIMAP:
        return CyrusIMAP(self.state_dir / "cyrus", host=self.host, imap_port=self.imap_port,
                         imaps_port=self.imaps_port, tls=self.state_dir / "tls",
                         user=self.vmail_user, password=self.password)  # fmt: skip

    def _courier(self) -> CourierIMAP:
        return CourierIMAP(self.state_dir / "courier", host=self.host, imap_port=self.imap_port,
                           imaps_port=self.imaps_port, tls=self.state_dir / "tls",
                           mail=self.state_dir / "mail", user=self.vmail_user,
                           password=self.password)  # fmt: skip

    @property
    def ca_file(self) -> Path:
        return self.state_dir / "tls" / "ca.pem"

    def issue_certificate(
        self,
        directory: Path,
        *,
        names: tuple[str, ...] = ("localhost", "127.0.0.1"),
        valid_from_days: float = -1.0,
        valid_until_days: float = 365.0,
    ) -> tuple[Path, Path]:
        """A server certificate signed by this server's CA (its files ``cert.pem`` and
        ``key.pem`` in ``directory``), for ``names`` (DNS names and IP addresses), valid
        from ``valid_from_days`` to ``valid_until_days`` days from now (negative: past):
        an expired or misnamed certificate a test's own TLS listener can present."""
        import datetime as dt
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        tls = self.state_dir / "tls"
        ca_key = serialization.load_pem_private_key((tls / "ca.key").read_bytes(), None)
        ca = x509.load_pem_x509_certificate((tls / "ca.pem").read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        alt: list[x509.GeneralName] = []
        for name in names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alt.append(x509.DNSName(name))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now + dt.timedelta(days=valid_from_days))
            .not_valid_after(now + dt.timedelta(days=valid_until_days))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / "cert.pem", directory / "key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private(
            key_path,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        return cert_path, key_path

    def maildir(self, address: str) -> Path:
        user, _, domain = address.partition("@")
        return self.state_dir / "mail" / domain / user / "Maildir"

    def config(
        self,
        address: str,
        *,
        to: str | list[str] | None = None,
        transport: str = "native",
        tls: bool = True,
        auth: str = "password",
        token_lifetime: float = 3600.0,
        quick_token: bool = True,
        **extra: Any,
    ) -> dict[str, Any]:
        """An emailmw configuration (the ``email:`` mapping) for ``address`` on this server.

        ``tls=True`` uses implicit TLS (smtps/imaps) verified against :attr:`ca_file`;
        ``False`` uses the plain ports with STARTTLS, still verified. ``auth``:
        ``password``, or ``oauth2`` / ``oauthbearer`` with a ``token-command`` giving a
        token living ``token_lifetime`` seconds (:meth:`oauth2_token`): one minted now and
        read from a file (``quick_token``, for a life of 10 minutes or more: what tests use,
        no Python start per login), or a fresh one each time (:meth:`token_command`).
        """
        smtp = (
            f"smtps://{self.host}:{self.smtps_port}"
            if tls
            else (f"smtp://{self.host}:{self.smtp_port}")
        )
        imap = (
            f"imaps://{self.host}:{self.imaps_port}"
            if tls
            else (f"imap://{self.host}:{self.imap_port}")
        )
        command = ""
        if auth != "password":
            command = (
                self.token_file_command(address, token_lifetime)
                if quick_token and token_lifetime >= 600
                else self.token_command(address, token_lifetime)
            )
        config: dict[str, Any] = {
            "transport": transport,
            "user": {
                "url-smtp": smtp,
                "url-imap": imap,
                "username": address,
                **(
                    {"password": self.password}
                    if auth == "password"
                    else {"auth": auth, "token-command": command}
                ),
            },
            "recipients": {"to": to if to is not None else address},
            "tls": {"ca-file": str(self.ca_file)},
        }
        config.update(extra)
        return config

    # ------------------------------------------------------------------ life cycle

    @property
    def _pf_conf(self) -> Path:
        return self.state_dir / "postfix" / "conf"

    @property
    def _dc_conf(self) -> Path:
        return self.state_dir / "dovecot" / "dovecot.conf"

    @property
    def _dc_pid(self) -> Path:
        return self.state_dir / "dovecot" / "run" / "master.pid"

    def _run(
        self, *args: str, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        # Never let a daemon inherit a pipe of ours: readers would wait for EOF forever.
        try:
            result = subprocess.run(
                list(args),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=_env(),
                check=False,
                start_new_session=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            if check:
                raise MailServerError(f"{' '.join(args)} did not end in {timeout:g} s") from exc
            return subprocess.CompletedProcess(list(args), -9, str(exc.output or ""))
        if check and result.returncode:
            raise MailServerError(f"{' '.join(args)} failed: {result.stdout.strip()}")
        return result

    def _run_daemon(self, *args: str, log: Path) -> None:
        with open(log, "ab") as out:
            code = subprocess.run(
                list(args),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=_env(),
                check=False,
                start_new_session=True,
            ).returncode
        if code:
            raise MailServerError(f"{' '.join(args)} exited {code}\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for log in (
            self.state_dir / "dovecot" / "dovecot.log",
            self.state_dir / "postfix" / "maillog",
            self.state_dir / "postfix" / "start.log",  # what `postfix start` printed
        ):
            with contextlib.suppress(OSError):
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {log}\n" + "\n".join(tail))
        return "\n".join(out)

    def running(self) -> bool:
        pid = read_pid(self._dc_pid)
        dovecot = pid is not None and alive(pid)
        postfix = (self._pf_conf / "main.cf").exists() and not self._run(
            "postfix", "-c", str(self._pf_conf), "status", check=False
        ).returncode
        return dovecot and postfix

    def start(self, *, fresh: bool = True) -> Self:
        """Write the configuration, (re)start both daemons and wait until they answer.

        ``fresh`` (the default) stops a running instance of this state dir and deletes every
        mailbox first, so each run starts from empty mailboxes. ``fresh=False`` is a restart,
        as a provider's: the mail stays and so do the ports it had (its clients and the
        sites it is federated with reach it where they did), unless another process took
        one meanwhile.
        """
        if os.geteuid() != 0:
            raise MailServerError("the mail server must be started as root")
        ensure_installed()
        if self.imap_server == "cyrus":
            ensure_cyrus()
        elif self.imap_server == "courier":
            ensure_courier()
        self.stop()
        if fresh:
            shutil.rmtree(self.state_dir / "mail", ignore_errors=True)
            shutil.rmtree(self.state_dir / "postfix" / "spool", ignore_errors=True)
            # (the sites of an earlier run: their ports are others now; federate again)
            (self.state_dir / "postfix/conf/transport").unlink(missing_ok=True)
        keep = not fresh and all(getattr(self, name) for name in self._chosen)
        if keep:
            kept = [getattr(self, name) for name in self._chosen]
            for port in kept:
                _reserve_port(port, renew=True)
            # the stopped daemons' children may hold the ports a moment longer
            _ports_released(kept)
        for attempt in range(3):
            # a chosen port another process took between the choice and the bind: choose again
            if not (keep and attempt == 0):
                for name, port in zip(self._chosen, free_ports(len(self._chosen)), strict=True):
                    setattr(self, name, port)
            self._prepare()
            (self.state_dir / "ports.json").write_text(json.dumps(self.ports))
            try:
                self.start_dovecot()
                if self.imap_server == "cyrus":
                    self._start_cyrus(fresh=not (keep and attempt == 0))
                elif self.imap_server == "courier":
                    self._start_courier()
                self.start_postfix()
            except MailServerError as exc:
                self.stop()
                if not self._chosen or attempt == 2 or "in use" not in str(exc):
                    raise
            else:
                break
        return self

    def start_dovecot(self) -> None:
        """Start Dovecot (configured by :meth:`start`) and wait until IMAP answers."""
        for socket_file in ("auth-postfix", "lmtp"):  # a killed instance leaves them behind
            (self.state_dir / "dovecot/run" / socket_file).unlink(missing_ok=True)
        self._dc_pid.unlink(missing_ok=True)
        self._run_daemon(
            "dovecot", "-c", str(self._dc_conf), log=self.state_dir / "dovecot" / "start.log"
        )
        self._wait(
            lambda: (
                (self.state_dir / "dovecot/run/auth-postfix").exists()
                and (self.state_dir / "dovecot/run/lmtp").exists()
            ),
            "dovecot sockets",
        )
        imap, imaps = self._dovecot_imap or (self.imap_port, self.imaps_port)
        self._wait(lambda: self._banner(imap, b"* OK", tls=False), "imap")
        self._wait(lambda: self._banner(imaps, b"* OK", tls=True), "imaps")

    def _start_cyrus(self, *, fresh: bool = True) -> None:
        """Start Cyrus on the IMAP ports and wait until it answers and its LMTP socket is
        there. ``fresh``: no mailbox, the fixed accounts; else (a restart on the same ports)
        its mailboxes and accounts as they were."""
        cyrus = self._cyrus()
        fresh = fresh or not (cyrus.directory / "imapd.conf").exists()
        if fresh:
            cyrus.prepare([self.address(u) for u in ("alice", "bob", "robot")])
        cyrus.start()
        self._wait(cyrus.lmtp.exists, "cyrus lmtp socket")
        self._wait(lambda: self._banner(self.imap_port, b"* OK", tls=False), "cyrus imap")
        self._wait(lambda: self._banner(self.imaps_port, b"* OK", tls=True), "cyrus imaps")
        for user in ("alice", "bob", "robot") if fresh else ():
            cyrus.make_mailboxes(self.address(user))

    def _start_courier(self) -> None:
        """Start Courier on the IMAP ports (fresh: every account with an empty Maildir)
        and wait until it answers."""
        courier = self._courier()
        courier.prepare([self.address(u) for u in self.users])
        try:
            courier.start()
        except RuntimeError as exc:
            raise MailServerError(str(exc)) from exc
        self._wait(lambda: self._banner(self.imap_port, b"* OK", tls=False), "courier imap")
        self._wait(lambda: self._banner(self.imaps_port, b"* OK", tls=True), "courier imaps")

    def stop_dovecot(self) -> None:
        """Stop Dovecot only (every IMAP session ends; Postfix queues what it cannot
        deliver). Idempotent."""
        pid = read_pid(self._dc_pid)
        if pid and alive(pid):
            if self._dc_conf.exists():
                # (doveadm waits for the master to end; it has hung for minutes when a
                # client was stopped with SIGSTOP mid-session: the kill below ends it)
                self._run("doveadm", "-c", str(self._dc_conf), "stop", check=False, timeout=15)
            if not wait_gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
        # a stale pid file pointing at a zombie makes dovecot refuse to start
        self._dc_pid.unlink(missing_ok=True)

    def start_postfix(self) -> None:
        """Start Postfix (configured by :meth:`start`) and wait until SMTP answers."""
        self._run_daemon(
            "postfix",
            "-c",
            str(self._pf_conf),
            "start",
            log=self.state_dir / "postfix" / "start.log",
        )
        self._wait(lambda: self._banner(self.smtp_port, b"220 ", tls=False), "smtp")
        self._wait(lambda: self._banner(self.smtps_port, b"220 ", tls=True), "smtps")

    def stop_postfix(self) -> None:
        """Stop Postfix only (sending fails until it is back)."""
        pid = read_pid(self.state_dir / "postfix/spool/pid/master.pid")
        self._run("postfix", "-c", str(self._pf_conf), "stop", check=False)
        if pid and not wait_gone(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

    def federate(self, *others: MailServer) -> None:
        """Mail for the domains of ``others`` goes from this server to theirs, over SMTP
        on loopback to each one's :attr:`mx_port`, as between providers (each server on the
        way adds its ``Received``; STARTTLS where offered, as MTAs do). Call it on each side
        for mail both ways (:func:`federate` does). Takes effect at once (a reload)."""
        known = {line.split()[0]: line for line in self._transport_lines()}
        for other in others:
            if other.domain == self.domain:
                raise MailServerError(f"{other.domain} is this server's own domain")
            known[other.domain] = f"{other.domain} smtp:[{other.host}]:{other.mx_port}"
        (self.state_dir / "postfix/conf/transport").write_text(
            "".join(line + "\n" for line in known.values())
        )
        if self.running():
            self._run("postfix", "-c", str(self._pf_conf), "reload")

    def _transport_lines(self) -> list[str]:
        path = self.state_dir / "postfix/conf/transport"
        text = path.read_text() if path.exists() else ""
        return [line for line in text.splitlines() if line.strip()]

    def refused_address(self, address: str, answer: str = "552") -> str:
        """An address of ``address``'s account to which Postfix answers every ``RCPT TO``
        with a refusal, as a provider does for a full mailbox: ``"552"``, ``552 5.2.2
        Mailbox full: quota exceeded`` (Gmail's words for an account over its quota);
        ``"452"``, the same for now (``452 4.2.2``). (The address has a ``+full552``
        extension; a static map of the helper's Postfix refuses it.)"""
        if answer not in _REFUSED:
            raise MailServerError(f"refused_address takes one of {', '.join(_REFUSED)}")
        user, _, domain = address.partition("@")
        return f"{user}+full{answer}@{domain}"

    def doveadm(self, *args: str) -> str:
        """Run ``doveadm`` against this instance; its output."""
        return self._run("doveadm", "-c", str(self._dc_conf), *args).stdout

    def sessions(self, address: str) -> int:
        """The IMAP sessions the server counts for ``address`` now (``doveadm who``)."""
        for line in self.doveadm("who").splitlines():
            if line.split()[:1] == [address]:
                return int(line.split()[1])
        return 0

    def kick(self, address: str) -> None:
        """Disconnect every IMAP session of ``address`` (``doveadm kick``); none is fine."""
        result = self._run("doveadm", "-c", str(self._dc_conf), "kick", address, check=False)
        if result.returncode and "no users kicked" not in result.stdout:
            raise MailServerError(f"doveadm kick {address} failed: {result.stdout.strip()}")

    def set_password(self, address: str, password: str) -> None:
        """Give ``address`` another password (Dovecot rereads its users file when it
        changes): the old one is refused from the next login on."""
        users = self.state_dir / "dovecot/users"
        lines = users.read_text().splitlines(keepends=True)
        prefix = f"{address}:"
        changed = [
            f"{address}:{{PLAIN}}{password}::::::\n" if line.startswith(prefix) else line
            for line in lines
        ]
        if changed == lines:
            raise MailServerError(f"no account {address} on this server")
        users.write_text("".join(changed))
        deadline = time.monotonic() + self.ready_timeout
        while not self._login_works(address, password):  # Dovecot rereads it on its own time
            if time.monotonic() > deadline:
                raise MailServerError(f"the new password of {address} is still refused")
            time.sleep(0.05)

    def _login_works(self, address: str, password: str) -> bool:
        import imaplib

        context = ssl.create_default_context(cafile=str(self.ca_file))
        with imaplib.IMAP4_SSL(self.host, self.imaps_port, ssl_context=context) as imap:
            try:
                imap.login(address, password)
            except imaplib.IMAP4.error:
                return False
            return True

    def set_uidvalidity(self, address: str, uidvalidity: int, folder: str = "INBOX") -> None:
        """Give ``folder`` of ``address`` a new UIDVALIDITY, as a recreated folder has; an
        open session is told its state is inconsistent and disconnected."""
        self.doveadm("mailbox", "update", "-u", address, "--uid-validity", str(uidvalidity), folder)

    def stop(self) -> None:
        """Stop both daemons of this state dir (only those). Idempotent."""
        postfix_up = (
            (self._pf_conf / "main.cf").exists()
            and _which("postfix") is not None
            and not self._run("postfix", "-c", str(self._pf_conf), "status", check=False).returncode
        )
        if postfix_up:
            self.stop_postfix()
        self._cyrus().stop()
        self._courier().stop()
        self.stop_dovecot()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ helpers

    def _wait(self, check: Any, what: str) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while not check():
            if time.monotonic() > deadline:
                raise MailServerError(
                    f"{what} not ready after {self.ready_timeout} s\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def _banner(self, port: int, expected: bytes, *, tls: bool) -> bool:
        try:
            with socket.create_connection((self.host, port), timeout=2) as raw:
                sock: socket.socket = raw
                if tls:
                    context = ssl.create_default_context(cafile=str(self.ca_file))
                    sock = context.wrap_socket(raw, server_hostname=self.host)
                line = sock.recv(512)
                sock.sendall(b"a LOGOUT\r\n" if expected.startswith(b"*") else b"QUIT\r\n")
                return line.startswith(expected)
        except OSError:
            return False

    def _prepare(self) -> None:
        state = self.state_dir
        env = _env()
        uid, gid = self._vmail_ids()
        for d in ("", "tls", "dovecot", "postfix", "postfix/conf", "postfix/spool"):
            (state / d).mkdir(parents=True, exist_ok=True)
            os.chmod(state / d, 0o755)
        self._mkdir(state / "postfix/data", 0o700, "postfix", "postfix")
        # Postfix's own commands write the maillog as the mail owner: the queue check at
        # start (postsuper) warns of a file a killed cleanup left in incoming/, and a
        # maillog it cannot open makes that warning fatal, and the start fail
        maillog = state / "postfix/maillog"
        maillog.touch()
        os.chmod(maillog, 0o600)
        shutil.chown(maillog, "postfix", "postfix")
        self._mkdir(state / "mail", 0o770, uid, gid)
        self._mkdir(state / "dovecot/lib", 0o750, "root", "dovecot")
        self._make_certificates()
        self._make_oauth2_key()

        users = "".join(f"{self.address(u)}:{{PLAIN}}{self.password}::::::\n" for u in self.users)
        (state / "dovecot/users").write_text(users)
        shutil.chown(state / "dovecot/users", "root", "dovecot")
        os.chmod(state / "dovecot/users", 0o640)
        # (Postfix's virtual agent, delivering for Courier, reads the Maildir from the map)
        vmailbox = "".join(
            f"{self.address(u)} {self.domain}/{u}/Maildir/\n" for u in [*self.users, "postmaster"]
        )
        (state / "postfix/conf/vmailbox").write_text(vmailbox)
        (state / "postfix/conf/refused").write_text(  # (refused_address)
            "".join(f"/\\+full{code}@/ {text}\n" for code, text in _REFUSED.items())
        )
        sites = state / "postfix/conf/transport"  # (other sites' domains: federate)
        if not sites.exists():
            sites.touch()

        dh = "/usr/share/dovecot/dh.pem"
        lmtp = f"{state}/dovecot/run/lmtp"
        imap_ports = (self.imap_port, self.imaps_port)
        transport, delivery = f"lmtp:unix:{lmtp}", ""
        if self.imap_server != "dovecot":  # Dovecot's IMAP aside
            self._dovecot_imap = imap_ports = tuple(free_ports(2))  # type: ignore[assignment]
        if self.imap_server == "cyrus":  # Postfix delivering to Cyrus
            transport = f"lmtp:unix:{self._cyrus().lmtp}"
        elif self.imap_server == "courier":  # Postfix writing the Maildirs Courier reads
            transport = "virtual"
            delivery = (
                f"virtual_mailbox_base = {state}/mail\nvirtual_uid_maps = static:{uid}\n"
                f"virtual_gid_maps = static:{gid}\nvirtual_minimum_uid = {min(uid, 100)}\n"
                "virtual_mailbox_limit = 0\n"
            )
        values = {
            "state": str(state),
            "host": self.host,
            "domain": self.domain,
            "smtp_port": self.smtp_port,
            "smtps_port": self.smtps_port,
            "mx_port": self.mx_port,
            "imap_port": imap_ports[0],
            "imaps_port": imap_ports[1],
            "virtual_transport": transport,
            "virtual_delivery": delivery,
            "vmail_user": self.vmail_user,
            "message_size_limit": self.message_size_limit,
            "message_rate_limit": self.message_rate_limit,
            "rate_time_unit": self.rate_time_unit,
            "max_userip_connections": self.max_userip_connections,
            "imap_capability": self._capability_list(),
            "vmail_uid": uid,
            "vmail_gid": gid,
            "ssl_dh": f"ssl_dh = <{dh}" if os.access(dh, os.R_OK) else "",
        }
        templates = resources.files("emailmw.testing") / "mailserver_templates"
        targets = {
            "dovecot.conf": self._dc_conf,
            "main.cf": self._pf_conf / "main.cf",
            "master.cf": self._pf_conf / "master.cf",
        }
        for name in _TEMPLATES:
            text = string.Template(templates.joinpath(name).read_text()).substitute(values)
            targets[name].write_text(text)
        check = subprocess.run(
            ["dovecot", "-c", str(self._dc_conf), "-n"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if check.returncode:
            raise MailServerError(f"dovecot rejects its configuration: {check.stderr.strip()}")

    def _capability_list(self) -> str:
        if not self.dropped_capabilities:
            return ""
        dropped = {c.upper() for c in self.dropped_capabilities}
        if "CONDSTORE" in dropped:
            dropped.add("QRESYNC")  # (QRESYNC implies CONDSTORE)
        return " ".join(c for c in _DOVECOT_CAPABILITIES.split() if c not in dropped)

    def without_capabilities(self, *names: str) -> None:
        """Make the running IMAP server stop offering ``names`` (none: all again), as a
        server without them would; new sessions see it (Dovecot reloads its
        configuration). Dovecot still answers the commands: what a client sends tells
        whether it degrades."""
        self.dropped_capabilities = tuple(names)
        text = self._dc_conf.read_text()
        line = f"  imap_capability = {self._capability_list()}"
        text = re.sub(r"(?m)^  imap_capability = .*$", line, text)
        self._dc_conf.write_text(text)
        self.doveadm("reload")
        self.kick_all()

    def kick_all(self) -> None:
        """End every IMAP session (``doveadm kick``)."""
        self._run("doveadm", "-c", str(self._dc_conf), "kick", "*", check=False)

    def _make_oauth2_key(self) -> None:
        """The key that signs the OAuth2 access tokens of :meth:`oauth2_token` (kept across
        restarts), its public half where Dovecot's ``oauth2`` passdb validates tokens
        locally (``introspection_mode = local``: no token endpoint is asked)."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        private = self.state_dir / "tls" / "oauth2.key"
        if not private.exists():
            key = ec.generate_private_key(ec.SECP256R1())
            _write_private(
                private,
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ),
            )
        loaded = serialization.load_pem_private_key(private.read_bytes(), None)
        public = loaded.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        keys = self.state_dir / "dovecot" / "oauth2-keys"
        # Dovecot looks the key up as <azp>/<alg>/<kid> ("default" when the token has none)
        (keys / "default" / "ES256").mkdir(parents=True, exist_ok=True)
        for d in (keys, keys / "default", keys / "default" / "ES256"):
            os.chmod(d, 0o755)
        (keys / "default" / "ES256" / "default").write_bytes(public)
        (self.state_dir / "dovecot" / "oauth2.conf.ext").write_text(
            "introspection_mode = local\n"
            f"local_validation_key_dict = fs:posix:prefix={keys}/\n"
            "username_attribute = email\n"
        )

    def token_file_command(self, address: str, lifetime: float = 3600.0) -> str:
        """A ``token-command`` printing a token minted now (kept in a private file of the
        state directory, minted again once less than half its life is left)."""
        tokens = self.state_dir / "tokens"
        tokens.mkdir(mode=0o700, exist_ok=True)
        path = tokens / f"{address}.{round(lifetime)}.jwt"
        try:
            fresh = time.time() - path.stat().st_mtime < lifetime / 2
        except OSError:
            fresh = False
        if not fresh:
            _write_private(path, (self.oauth2_token(address, lifetime=lifetime) + "\n").encode())
        return shlex.join(["cat", str(path)])

    def token_command(self, address: str, lifetime: float = 3600.0) -> str:
        """A shell command printing a fresh :meth:`oauth2_token` (a ``token-command:``)."""
        helper = [sys.executable, "-m", "emailmw.testing.mailserver", "token", address]
        return shlex.join([*helper, "--state", str(self.state_dir), "--lifetime", str(lifetime)])

    def oauth2_token(self, address: str, *, lifetime: float = 3600.0) -> str:
        """An OAuth2 access token for ``address`` that this server accepts (XOAUTH2 and
        OAUTHBEARER, on IMAP and on SMTP submission through Dovecot's SASL) until
        ``lifetime`` seconds from now: a JWT (ES256) signed by the server's key, as an
        identity provider would issue it."""
        import base64

        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, utils

        def b64(data: bytes) -> bytes:
            return base64.urlsafe_b64encode(data).rstrip(b"=")

        key = serialization.load_pem_private_key(
            (self.state_dir / "tls" / "oauth2.key").read_bytes(), None
        )
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        now = int(time.time())
        claims = {"sub": address, "email": address, "iat": now, "nbf": now - 1,
                  "exp": now + max(1, round(lifetime)), "jti": os.urandom(8).hex()}  # fmt: skip
        signing = b64(b'{"alg":"ES256","typ":"JWT"}') + b"." + b64(json.dumps(claims).encode())
        r, s = utils.decode_dss_signature(key.sign(signing, ec.ECDSA(hashes.SHA256())))
        return (signing + b"." + b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))).decode()

    @staticmethod
    def _mkdir(path: Path, mode: int, user: str | int, group: str | int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, mode)
        shutil.chown(path, user, group)

    def _vmail_ids(self) -> tuple[int, int]:
        """The mail user's uid and gid, the user made first where it is missing: under a
        lock every server of this machine takes (:data:`USER_LOCK`), so servers started at
        once (pytest-xdist's workers on a fresh machine) never read it half made. useradd
        writes /etc/passwd before /etc/group: a server that found the user and read its ids
        while another's useradd ran gave Dovecot one gid and its mail folder another, and
        every SELECT failed ([SERVERBUG], "we're not in group 995")."""
        USER_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with USER_LOCK.open("a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            try:
                entry = pwd.getpwnam(self.vmail_user)
            except KeyError:
                self._run(
                    "useradd", "--system", "--user-group", "--home-dir", "/nonexistent",
                    "--no-create-home", "--shell", "/usr/sbin/nologin", self.vmail_user,
                )  # fmt: skip
                entry = pwd.getpwnam(self.vmail_user)
            grp.getgrgid(entry.pw_gid)  # (its group is there: made before the lock is let go)
            return entry.pw_uid, entry.pw_gid

    def _make_certificates(self) -> None:
        tls = self.state_dir / "tls"
        if all(
            (tls / f).stat().st_size if (tls / f).exists() else 0
            for f in ("ca.pem", "server.pem", "server.key")
        ):
            return
        for f in tls.iterdir():
            f.unlink()

        def openssl(*args: str) -> None:
            self._run("openssl", *args)

        openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "3650",
            "-subj",
            "/CN=emailmw test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            str(tls / "ca.key"),
            "-out",
            str(tls / "ca.pem"),
        )
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN=mail.{self.domain}",
            "-keyout",
            str(tls / "server.key"),
            "-out",
            str(tls / "server.csr"),
        )
        (tls / "server.ext").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            f"subjectAltName=DNS:localhost,DNS:mail.{self.domain},IP:127.0.0.1,IP:::1\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
        )
        openssl(
            "x509",
            "-req",
            "-in",
            str(tls / "server.csr"),
            "-CA",
            str(tls / "ca.pem"),
            "-CAkey",
            str(tls / "ca.key"),
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            str(tls / "server.ext"),
            "-out",
            str(tls / "server.crt"),
        )
        (tls / "server.pem").write_bytes(
            (tls / "server.crt").read_bytes() + (tls / "ca.pem").read_bytes()
        )
        for name, mode in (
            ("server.key", 0o600),
            ("ca.key", 0o600),
            ("ca.pem", 0o644),
            ("server.pem", 0o644),
        ):
            os.chmod(tls / name, mode)


def federate(*servers: MailServer) -> None:
    """Each of ``servers`` delivers mail for the others' domains to them (sites of
    different providers that mail each other: :meth:`MailServer.federate`)."""
    for server in servers:
        server.federate(*(other for other in servers if other is not server))


def _write_private(path: Path, data: bytes) -> None:
    """Write ``path``, readable by its owner only (made so before anything is written, an
    existing file's mode too): a key, or a configuration holding a password."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emailmw.testing.mailserver",
        description="local Postfix + Dovecot for emailmw",
    )
    parser.add_argument(
        "command", choices=["install", "start", "stop", "status", "config", "token"]
    )
    parser.add_argument(
        "user", nargs="?", default="alice", help="for 'config' and 'token': the account"
    )
    parser.add_argument(
        "--state",
        type=Path,
        default=Path(os.environ.get("EMAILMW_TEST_MAIL_STATE", "/tmp/emailmw-testmail")),
    )
    parser.add_argument("--keep", action="store_true", help="for 'start': keep existing mail")
    parser.add_argument(
        "--auth", choices=["password", "oauth2", "oauthbearer"], default="password",
        help="for 'config': log in with the password or an OAuth2 token (a token-command)",
    )  # fmt: skip
    parser.add_argument(
        "--lifetime", type=float, default=3600.0, metavar="SECONDS",
        help="for 'token' (and 'config --auth oauth2'): how long a token lives",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, metavar="FILE",
        help="for 'config': write it to FILE, readable by its owner only (it holds a password)",
    )  # fmt: skip
    parser.add_argument(
        "--server", choices=[*IMAP_SERVERS, "all"], default="dovecot",
        help="for 'start' and 'install': the IMAP server (cyrus: Cyrus IMAP 3.6, courier: "
        "Courier-IMAP 5.0, from Debian's packages, unpacked beside Dovecot; all: for "
        "'install', every one)",
    )  # fmt: skip
    for name in _PORTS:
        flag = "--" + name.replace("_", "-")
        parser.add_argument(
            flag, type=int, default=0, metavar="N", help="for 'start' (default: a free port)"
        )
    args = parser.parse_args(argv)
    if args.server == "all" and args.command != "install":
        parser.error("--server all goes with 'install'")
    server = MailServer(state_dir=args.state,
                        imap_server="dovecot" if args.server == "all" else args.server,
                        **{name: getattr(args, name) for name in _PORTS})  # fmt: skip
    try:
        if args.command == "install":
            ensure_installed()
            if args.server in ("cyrus", "all"):
                ensure_cyrus()
            if args.server in ("courier", "all"):
                ensure_courier()
        elif args.command == "start":
            server.start(fresh=not args.keep)
            print(
                f"[mailserver] READY smtp={server.host}:{server.smtp_port} "
                f"smtps={server.host}:{server.smtps_port} imap={server.host}:{server.imap_port} "
                f"imaps={server.host}:{server.imaps_port} mx={server.host}:{server.mx_port} "
                f"CA={server.ca_file}"
            )
        elif args.command == "stop":
            server.stop()
        elif args.command == "status":
            running = server.running()
            ports = " ".join(
                f"{name.removesuffix('_port')}={port}" for name, port in server.ports.items()
            )
            print(f"running {ports}" if running else "stopped")
            return 0 if running else 3
        else:
            if not server.running():
                raise MailServerError(
                    f"no server of state dir {args.state} is running: start it first "
                    "(python -m emailmw.testing.mailserver start)"
                )
            account = args.user if "@" in args.user else server.address(args.user)
            if args.command == "token":
                print(server.oauth2_token(account, lifetime=args.lifetime))
                return 0
            email = server.config(
                account, auth=args.auth, token_lifetime=args.lifetime, quick_token=False
            )
            text = yaml.safe_dump({"email": email}, sort_keys=False)
            if args.out is None:
                print(text, end="")
            else:
                _write_private(args.out, text.encode())
                print(
                    f"[mailserver] wrote {args.out} (0600: it holds the password or token command)"
                )
    except MailServerError as exc:
        print(f"[mailserver] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
