"""Courier-IMAP for the test server (``MailServer(imap_server="courier")``): Debian 12's
Courier-IMAP 5.0, run as a private instance beside the helper's Postfix (which delivers
into the accounts' Maildirs itself, with its ``virtual`` agent) and Dovecot (which keeps
authenticating Postfix's submission; its IMAP is not used).

Debian's ``courier-imap`` conflicts with ``dovecot-imapd`` (both provide ``imap-server``):
apt would remove Dovecot. Its other packages do not conflict (``courier-base``,
``courier-authdaemon``, ``courier-authlib-userdb``): they are installed with apt (no
service started), and ``courier-imap`` itself is fetched with ``apt-get download`` and
unpacked (``dpkg -x``) under :data:`ROOT`, from where its ``imaplogin`` and ``imapd`` run.

Courier's login goes through ``authdaemond``, whose configuration (``/etc/courier``) and
socket (``/run/courier``) are compiled in. So each instance runs in a mount namespace of its
own (``unshare --mount``), in which its own directories are mounted over those two: the
machine's ``/etc/courier`` is never written, and several instances run side by side.
Accounts log in with the password (``authuserdb``: a ``userdb`` with every account of the
server, its password crypt(3)-hashed).

The IMAP settings are Debian's (``/etc/courier/imapd`` and ``imapd-ssl`` of the package, as
its init script reads them): 20 connections per client address, IDLE polling the folder
every 60 s (``IMAP_ENHANCEDIDLE=0``), no MOVE, CONDSTORE or SPECIAL-USE, folders under the
personal namespace ``INBOX.``; only addresses, ports, files and the certificate are this
instance's. Courier logs to syslog only: where none runs, what it says is lost.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from ._debian import apt_install, ensure, unpack
from ._processes import read_pid, wait_gone

__all__ = ["ROOT", "CourierIMAP", "ensure_courier"]

#: where the unpacked ``courier-imap`` package lives (shared by every test server)
ROOT: Final = Path(os.environ.get("EMAILMW_COURIER_ROOT", "/opt/emailmw-courier"))
#: installed with apt: none of them conflicts with Dovecot
PACKAGES: Final = (
    "courier-base", "courier-authdaemon", "courier-authlib-userdb", "gamin", "libgamin0",
    "libidn12", "util-linux",
)  # fmt: skip
_UNPACKED: Final = "courier-imap"
_SBIN: Final = "/usr/sbin:/sbin"
#: compiled into Courier's binaries: each instance mounts its own directories over them
_ETC: Final = Path("/etc/courier")
_RUN: Final = Path("/run/courier")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{env.get('PATH', '/usr/bin:/bin')}:{_SBIN}"
    return env


def _installed() -> bool:
    path = _env()["PATH"]
    return (
        os.access(ROOT / "usr/lib/courier/courier/imaplogin", os.X_OK)
        and os.access(ROOT / "usr/bin/imapd", os.X_OK)
        and all(shutil.which(c, path=path) for c in ("authdaemond", "makeuserdb", "couriertcpd",
                                                     "courierlogger", "couriertls", "unshare"))
    )  # fmt: skip


def ensure_courier() -> Path:
    """Courier-IMAP unpacked under :data:`ROOT` and the packages it needs installed (as
    root; once per machine); :data:`ROOT`."""
    if _installed():
        return ROOT
    if os.geteuid() != 0:
        raise RuntimeError("Courier-IMAP is installed as root (apt-get)")

    def install() -> None:
        print("[mailserver] installing Courier's packages and unpacking Courier-IMAP",
              file=sys.stderr)  # fmt: skip
        # (courier-authdaemon's scripts would start the machine's authdaemond)
        apt_install(PACKAGES, upgrade=False, no_start=True)
        unpack([_UNPACKED], ROOT)

    ensure(_installed, install)
    return ROOT


def _hash(password: str) -> str:
    """``password`` as crypt(3) SHA-512, which Courier's authlib checks."""
    return subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=password, text=True,
                          capture_output=True, check=True).stdout.strip()  # fmt: skip


class CourierIMAP:
    """One private Courier-IMAP instance under ``directory`` (``courier/`` of the server's
    state): IMAP with STARTTLS on ``imap_port``, IMAPS on ``imaps_port``, serving the
    Maildirs ``mail/DOMAIN/USER/Maildir`` of the server's state (Postfix delivers there)."""

    def __init__(self, directory: Path, *, host: str, imap_port: int, imaps_port: int,
                 tls: Path, mail: Path, user: str, password: str) -> None:  # fmt: skip
        self.directory = directory
        self.host = host
        self.imap_port = imap_port
        self.imaps_port = imaps_port
        self._tls = tls
        self._mail = mail
        self._user = user
        self._password = password
        self._pids = (directory / "run/authdaemon/pid", directory / "imapd.pid",
                      directory / "imapd-ssl.pid")  # fmt: skip

    def maildir(self, address: str) -> Path:
        """Where the Maildir of ``address`` is (Postfix's ``virtual`` agent delivers there)."""
        user, _, domain = address.partition("@")
        return self._mail / domain / user / "Maildir"

    def prepare(self, addresses: Iterable[str]) -> None:
        """Write the configuration anew: every account of ``addresses`` may log in (with the
        password) and has an empty Maildir (Courier refuses a login to an account whose
        Maildir is missing, where Postfix would make one at its first delivery)."""
        d = self.directory
        shutil.rmtree(d, ignore_errors=True)
        for sub in ("etc", "run/authdaemon"):
            (d / sub).mkdir(parents=True)
        (d / "etc/authdaemonrc").write_text(
            'authmodulelist="authuserdb"\ndaemons=5\nauthdaemonvar=/run/courier/authdaemon\n'
            'DEBUG_LOGIN=0\nDEFAULTOPTIONS=""\nLOGGEROPTS=""\n'
        )
        owner = pwd.getpwnam(self._user)
        crypted = _hash(self._password)
        lines = []
        for address in addresses:
            maildir = self.maildir(address)
            lines.append(f"{address}\tuid={owner.pw_uid}|gid={owner.pw_gid}|"
                         f"home={maildir.parent}|mail={maildir}|systempw={crypted}\n")  # fmt: skip
            for path in (maildir.parent, maildir, *(maildir / s for s in ("cur", "new", "tmp"))):
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.chown(path, owner.pw_uid, owner.pw_gid)
        userdb = d / "etc/userdb"
        userdb.write_text("".join(lines))
        userdb.chmod(0o600)
        pem = d / "etc/imapd.pem"
        pem.write_bytes((self._tls / "server.key").read_bytes()
                        + (self._tls / "server.pem").read_bytes())  # fmt: skip
        # (couriertls wants them; courier-base made the machine's at its installation)
        shutil.copy(_ETC / "dhparams.pem", d / "etc/dhparams.pem")
        cache = d / "run/sslcache"
        cache.touch()
        for path in (pem, d / "etc/dhparams.pem", cache):  # (couriertls runs as courier)
            shutil.chown(path, "courier", "courier")
            path.chmod(0o600)

    def _script(self) -> str:
        """What runs in the instance's mount namespace: its directories over Courier's
        compiled-in ones, the userdb compiled, authdaemond and the two listeners started
        (each under courierlogger, which keeps its pid file), as Debian's init scripts do."""
        d, root = self.directory, ROOT
        q = shlex.quote
        listen = f"-address={self.host} -maxprocs=$MAXDAEMONS -maxperip=$MAXPERIP $TCPDOPTS"
        login = f"{root}/usr/lib/courier/courier/imaplogin {root}/usr/bin/imapd $MAILDIRPATH"
        return "\n".join([
            "set -e",
            f"mount --bind {q(str(d / 'etc'))} {_ETC}",
            f"mount --bind {q(str(d / 'run'))} {_RUN}",
            "makeuserdb",
            "authdaemond start",
            # Debian's settings, as its init scripts read them; then this instance's own
            f"set -a; . {root}/etc/courier/imapd; . {root}/etc/courier/imapd-ssl",
            f"TLS_CERTFILE={d}/etc/imapd.pem; TLS_CACHEFILE={d}/run/sslcache",
            "TLS_TRUSTCERTS=/etc/ssl/certs/ca-certificates.crt; IMAP_STARTTLS=$IMAPDSTARTTLS",
            "umask $IMAP_UMASK; ulimit -v $IMAP_ULIMITD",
            f"courierlogger -pid={d}/imapd.pid -start -name=imapd "
            f"couriertcpd {listen} {self.imap_port} {login}",
            f"IMAP_TLS=1 courierlogger -pid={d}/imapd-ssl.pid -start -name=imapd-ssl "
            f"couriertcpd {listen} {self.imaps_port} $COURIERTLS -server -tcpd {login}",
        ])  # fmt: skip

    def start(self) -> None:
        """Start authdaemond and the listeners in a mount namespace of their own; returns
        once they run (the caller waits for the ports)."""
        for path in self._pids:
            path.unlink(missing_ok=True)
        _RUN.mkdir(exist_ok=True)  # (a mount point: /run is emptied at boot)
        result = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", self._script()],
            env={"PATH": f"/usr/bin:/bin:{_SBIN}"}, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, start_new_session=True, check=False,
        )  # fmt: skip
        if result.returncode:
            self.stop()
            raise RuntimeError(f"Courier-IMAP did not start: {result.stderr.strip()}")

    def stop(self) -> None:
        """Stop the listeners and authdaemond (courierlogger passes SIGTERM on; SIGKILL to
        what is left). Idempotent."""
        for path in self._pids:
            pid = read_pid(path)
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not wait_gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
            path.unlink(missing_ok=True)
