"""Cyrus IMAP for the test server (``MailServer(imap_server="cyrus")``): Debian 12's Cyrus
3.6, run as a private instance beside the helper's Postfix (which delivers to it over LMTP)
and Dovecot (which keeps authenticating Postfix's submission; its IMAP is not used).

Debian's ``cyrus-imapd`` conflicts with ``dovecot-imapd`` (both provide ``imap-server``):
apt would remove Dovecot. So the libraries Cyrus needs are installed with apt (none of them
conflicts), and the two Cyrus packages themselves are fetched with ``apt-get download``
and unpacked (``dpkg -x``) under :data:`ROOT`, from where their binaries run with the
unpacked libraries. Nothing under ``/etc`` or ``/var`` is touched; no Debian service
starts.

Accounts log in with the password (SASL PLAIN/LOGIN against a private sasldb, written
with ``saslpasswd2`` from ``sasl2-bin``); an account's INBOX, with ``Sent``, ``Trash``
(``\\Trash``) and ``Archiv`` (``\\Archive``), is made at its first login or delivery:
the helper logs in once as each account it hands out, before a test can use it.
Cyrus logs to syslog only: where no syslog runs, what it says is lost (``log_tail`` shows
the Dovecot and Postfix logs).
"""

from __future__ import annotations

import contextlib
import imaplib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from ._debian import apt_install, ensure, unpack
from ._processes import read_pid, wait_gone

__all__ = ["ROOT", "CyrusIMAP", "ensure_cyrus"]

#: where the unpacked Cyrus packages live (shared by every test server of the machine)
ROOT: Final = Path(os.environ.get("EMAILMW_CYRUS_ROOT", "/opt/emailmw-cyrus"))
#: what Cyrus's binaries need, installed with apt (none conflicts with Dovecot)
LIBRARIES: Final = (
    "db-util", "gawk", "libclamav12", "libical3", "libpcre3", "libxapian30", "libzephyr4",
    "libjansson4", "libwrap0", "libsasl2-modules", "sasl2-bin",
)  # fmt: skip
_PACKAGES: Final = ("cyrus-common", "cyrus-imapd")


def _bin(name: str) -> Path:
    return ROOT / "usr/lib/cyrus/bin" / name


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(ROOT / "usr/lib/x86_64-linux-gnu")
    env["PATH"] = f"{env.get('PATH', '/usr/bin:/bin')}:/usr/sbin:/sbin"
    return env


def ensure_cyrus() -> Path:
    """Cyrus unpacked under :data:`ROOT` and its libraries installed (as root; once per
    machine); :data:`ROOT`."""

    def installed() -> bool:
        return os.access(_bin("master"), os.X_OK) and bool(
            shutil.which("saslpasswd2", path=_env()["PATH"])
        )

    if installed():
        return ROOT
    if os.geteuid() != 0:
        raise RuntimeError("Cyrus IMAP is installed as root (apt-get)")

    def install() -> None:
        print("[mailserver] installing Cyrus IMAP's libraries and unpacking Cyrus",
              file=sys.stderr)  # fmt: skip
        apt_install(LIBRARIES, upgrade=False)
        unpack(_PACKAGES, ROOT)

    ensure(installed, install)
    return ROOT


class CyrusIMAP:
    """One private Cyrus instance under ``directory`` (``cyrus/`` of the server's state):
    IMAP with STARTTLS on ``imap_port``, IMAPS on ``imaps_port``, LMTP on :attr:`lmtp`."""

    def __init__(self, directory: Path, *, host: str, imap_port: int, imaps_port: int,
                 tls: Path, user: str, password: str) -> None:  # fmt: skip
        self.directory = directory
        self.host = host
        self.imap_port = imap_port
        self.imaps_port = imaps_port
        self._tls = tls
        self._user = user
        self._password = password
        self.lmtp = directory / "socket" / "lmtp"
        self._conf = directory / "imapd.conf"
        self._pid = directory / "master.pid"

    def prepare(self, addresses: list[str]) -> None:
        """Write the configuration (anew: mailboxes and accounts start empty) and the
        accounts ``addresses``."""
        d = self.directory
        shutil.rmtree(d, ignore_errors=True)
        for sub in ("lib/db", "lib/socket", "lib/proc", "lib/user", "lib/quota", "lib/sieve",
                    "lib/msg", "lib/log", "spool", "socket", "lock", "proc", "tls"):  # fmt: skip
            (d / sub).mkdir(parents=True, exist_ok=True)
        for name in ("ca.pem", "server.pem", "server.key"):
            shutil.copy(self._tls / name, d / "tls" / name)
        b = _bin
        (d / "imapd.conf").write_text(
            f"configdirectory: {d}/lib\n"
            f"partition-default: {d}/spool\n"
            f"cyrus_user: {self._user}\ncyrus_group: {self._user}\n"
            "admins: cyrusadmin\n"
            "sasl_pwcheck_method: auxprop\nsasl_auxprop_plugin: sasldb\n"
            f"sasl_sasldb_path: {d}/sasldb2\n"
            "sasl_mech_list: PLAIN LOGIN\nallowplaintext: yes\n"
            "virtdomains: userid\n"
            "autocreate_quota: 0\nautocreate_post: 1\n"
            "autocreate_inbox_folders: Sent | Trash | Archiv\n"
            "autocreate_subscribe_folders: Sent | Trash | Archiv\n"
            "xlist-sent: Sent\nxlist-trash: Trash\nxlist-archive: Archiv\n"
            f"lmtpsocket: {self.lmtp}\nidlesocket: {d}/socket/idle\n"
            f"notifysocket: {d}/socket/notify\n"
            f"mboxname_lockpath: {d}/lock\nproc_path: {d}/proc\n"
            f"tls_server_cert: {d}/tls/server.pem\ntls_server_key: {d}/tls/server.key\n"
            f"tls_client_ca_file: {d}/tls/ca.pem\n"
            "syslog_prefix: emailmw-cyrus\n"
        )
        conf = self._conf
        (d / "cyrus.conf").write_text(
            "START {\n"
            f'  recover cmd="{b("ctl_cyrusdb")} -C {conf} -r"\n'
            "}\nSERVICES {\n"
            f'  imap cmd="{b("imapd")} -C {conf}" listen="{self.host}:{self.imap_port}" '
            "prefork=0\n"
            f'  imaps cmd="{b("imapd")} -s -C {conf}" listen="{self.host}:{self.imaps_port}" '
            "prefork=0\n"
            f'  lmtpunix cmd="{b("lmtpd")} -C {conf}" listen="{self.lmtp}" prefork=0\n'
            "}\nEVENTS {\n"
            f'  checkpoint cmd="{b("ctl_cyrusdb")} -C {conf} -c" period=30\n'
            "}\nDAEMON {\n"
            f'  idled cmd="{b("idled")} -C {conf}"\n'
            "}\n"
        )
        for address in addresses:
            self.add_account(address)
        subprocess.run(["chown", "-R", f"{self._user}:{self._user}", str(d)], check=True)
        os.chmod(d / "tls" / "server.key", 0o600)

    def add_account(self, address: str) -> None:
        """Let ``address`` log in with the password."""
        user, _, domain = address.partition("@")
        args = ["saslpasswd2", "-p", "-c", "-f", str(self.directory / "sasldb2")]
        subprocess.run([*args, *(["-u", domain] if domain else []), user],
                       input=self._password, text=True, env=_env(), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        with contextlib.suppress(OSError):
            shutil.chown(self.directory / "sasldb2", self._user, self._user)
            os.chmod(self.directory / "sasldb2", 0o600)

    def make_mailboxes(self, address: str, *, timeout: float = 30.0) -> None:
        """Log in once as ``address`` (on the running server), so that Cyrus makes its
        INBOX and folders now. Made on first use instead, they race with the test's own
        first steps: a receiver's login and Postfix's LMTP delivery each make them, and a
        receiver that selected INBOX in between was told ``Mailbox does not exist`` at its
        next FETCH (seen once in CI)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with imaplib.IMAP4(self.host, self.imap_port, timeout=10) as client:
                    client.login(address, self._password)
                    typ, _ = client.select("INBOX")
                    if typ == "OK":
                        return
            except (OSError, imaplib.IMAP4.error):
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise RuntimeError(f"Cyrus made no INBOX for {address}")
            time.sleep(0.1)

    def start(self) -> None:
        """Start Cyrus's master (as root: it becomes :attr:`user`); returns once it runs
        (the caller waits for its ports)."""
        self._pid.unlink(missing_ok=True)
        subprocess.run(
            [str(_bin("master")), "-C", str(self._conf), "-M", str(self.directory / "cyrus.conf"),
             "-p", str(self._pid), "-d"],
            env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, check=True,
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the master and its services (SIGTERM, then SIGKILL). Idempotent."""
        pid = read_pid(self._pid)
        if pid is None:
            return
        try:
            group = os.getpgid(pid)
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            group = None
        wait_gone(pid)
        if group is not None:  # (the master's services, and the master if it hangs)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        self._pid.unlink(missing_ok=True)
