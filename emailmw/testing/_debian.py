"""Debian packages for the test servers (``mailserver.py``, ``cyrus.py``, ``courier.py``):
installed with apt (the package lists updated once when an install fails on a fresh
machine), or, for a package that conflicts with one installed, fetched with
``apt-get download`` and unpacked (``dpkg -x``) under a directory of its own. Installing is
done under one machine-wide lock (:func:`installing`): parallel test workers each start
servers, and two apt runs at once fail on dpkg's lock, two unpacks replace each other's tree
while it is in use."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

__all__ = ["apt_install", "ensure", "installing", "unpack"]

#: the machine-wide lock of :func:`installing` (root's: installing needs root anyway)
LOCK = Path("/run/lock/emailmw-testing-install.lock")


@contextlib.contextmanager
def installing() -> Iterator[None]:
    """Hold the machine-wide install lock (waits for another process holding it)."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure(present: Callable[[], bool], install: Callable[[], None]) -> None:
    """Run ``install`` unless ``present()`` says it is done, under the install lock and
    asked again there (another process may have installed it meanwhile)."""
    if present():
        return
    with installing():
        if not present():
            install()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{env.get('PATH', '/usr/bin:/bin')}:/usr/sbin:/sbin"
    return env | {"DEBIAN_FRONTEND": "noninteractive"}


def apt_install(packages: Sequence[str], *, upgrade: bool = True, no_start: bool = False) -> None:
    """``apt-get install`` ``packages`` (as root), ``apt-get update`` once when that fails
    (package lists missing or stale on a fresh machine). ``upgrade=False``: installed
    packages stay as they are. ``no_start``: no service a package's scripts would start
    starts (``policy-rc.d`` says so for the install, as in Debian's container images)."""
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends",
               *([] if upgrade else ["--no-upgrade"]), *packages]  # fmt: skip
    policy = Path("/usr/sbin/policy-rc.d")
    made_policy = no_start and not policy.exists()
    if made_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        env = _env()
        if subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=False).returncode:
            subprocess.run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL,
                           check=True)  # fmt: skip
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True)
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)


def unpack(packages: Sequence[str], root: Path) -> Path:
    """``packages`` fetched (``apt-get download``) and unpacked under ``root`` (anew; what
    was there is replaced once the new tree is whole); ``root``."""
    env = _env()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            ["apt-get", "download", *packages], cwd=tmp, env=env, check=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        unpacked = root.with_name(root.name + ".new")
        shutil.rmtree(unpacked, ignore_errors=True)
        for deb in sorted(Path(tmp).glob("*.deb")):
            subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], env=env, check=True)
        shutil.rmtree(root, ignore_errors=True)
        unpacked.rename(root)
    return root
