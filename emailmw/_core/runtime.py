"""Where this user's runtime files live (the graph daemons' sockets, the machine-wide
connection slots), and how a private directory there is checked and made: only the
standard library, no I/O at import (the command line's quick path imports it)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["make_private_directory", "open_private", "private_directory", "runtime_base"]


def runtime_base() -> Path:
    """The directory under which this user's daemons live: ``$XDG_RUNTIME_DIR`` (the
    user's own, made by the login manager), else for root ``/run`` (root's alone), else
    ``/tmp/emailmw-UID`` (made private by :func:`make_private_directory`)."""
    given = os.environ.get("XDG_RUNTIME_DIR")
    if given:
        return Path(given)
    if os.getuid() == 0 and Path("/run").is_dir():
        return Path("/run")
    return Path(f"/tmp/emailmw-{os.getuid()}")  # noqa: S108 - checked before any use


def private_directory(path: Path) -> bool:
    """Whether the daemon's directory ``path`` and the one holding it are directories (not
    links) of this user's, or root's, that nobody else may write in (else a socket there
    could be anyone's, and a file there anyone's link: neither is used)."""
    for directory in (path, path.parent):
        try:
            found = directory.lstat()
        except OSError:
            return False
        owners = (os.getuid(), 0) if directory == path.parent else (os.getuid(),)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid not in owners or found.st_mode & 0o022:
            return False
    return True


def make_private_directory(path: Path) -> int:
    """Make the daemon's directory ``path`` (and ``/tmp/emailmw-UID`` holding it) where
    missing, 0700, and open it: its descriptor, for files opened relative to it
    (:func:`open_private`). Raises ``PermissionError`` with what to do, having written
    nothing, when it or the one holding it is not private (:func:`private_directory`:
    another user made it first, or a link)."""
    for directory in (path.parent, path):
        if directory.parent == Path("/tmp") or directory == path:  # noqa: S108
            with contextlib.suppress(FileExistsError):
                directory.mkdir(mode=0o700)
    if not private_directory(path):
        raise PermissionError(
            f"{path} (or the directory holding it) is not only this user's: another user "
            "may have made it, or it is a link; nothing was written there. Remove it, or "
            "set XDG_RUNTIME_DIR to a directory of your own"
        )
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


def open_private(directory: int, name: str) -> int:
    """Open (append, create 0600) file ``name`` of the checked directory ``directory``
    (a descriptor), never through a link; a descriptor. Raises ``PermissionError``
    when it is not a plain file of this user's."""
    fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600,
                 dir_fd=directory)  # fmt: skip
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid():
        os.close(fd)
        raise PermissionError(f"{name} is not a file of this user's")
    os.fchmod(fd, 0o600)
    return fd
