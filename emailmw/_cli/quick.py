"""The command line's quick path: hand a verb that reads the graph or asks a node (``topic
list``, ``param get``, ``service call`` ...) to the graph daemon of its configuration, which
answers from memory over its open connection (``daemon.py``), as ros2cli does with
``ros2 daemon``.

This module imports only the standard library (and the runtime directory's helpers, which
do too): the command line tries it before it imports anything else, so a verb the daemon
answers costs a Python start and a round trip.
Without a running daemon it starts one for the next command (in the background, as
ros2cli does) and the command runs the usual way. ``--no-daemon`` (or
``EMAILMW_NO_DAEMON=1``) bypasses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .._core.runtime import (
    make_private_directory,
    open_private,
    private_directory,
    runtime_base,
)

__all__ = [
    "DAEMON_VERBS",
    "config_file",
    "daemon_socket",
    "make_private_directory",
    "open_private",
    "private_directory",
    "runtime_base",
    "try_daemon",
]

#: the verbs a daemon answers (those that read the graph or ask a node and end)
DAEMON_VERBS = frozenset({
    ("topic", "list"), ("topic", "info"), ("topic", "type"), ("topic", "find"),
    ("node", "list"), ("node", "info"),
    ("service", "list"), ("service", "type"), ("service", "find"), ("service", "call"),
    ("action", "list"), ("action", "info"),
    ("param", "list"), ("param", "get"), ("param", "describe"), ("param", "dump"),
})  # fmt: skip
#: the largest answer read back (a graph listing is small)
_MAX_ANSWER = 64 << 20


def config_file(argv: Sequence[str]) -> Path | None:
    """The configuration file the command line uses: ``--config FILE`` (anywhere), else
    ``EMAILMW_CONFIG_FILE``/``EMAIL_CONFIG_FILE``, ``./email.yml``, ``~/email.yml``
    (``find_config_file``'s order); None when there is none."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1]).expanduser().resolve()
        if arg.startswith("--config="):
            return Path(arg.partition("=")[2]).expanduser().resolve()
    for var in ("EMAILMW_CONFIG_FILE", "EMAIL_CONFIG_FILE"):
        value = os.environ.get(var)
        if value:
            return Path(value).expanduser().resolve()
    for candidate in (Path.cwd() / "email.yml", Path.home() / "email.yml"):
        if candidate.is_file():
            return candidate.resolve()
    return None


def daemon_socket(config: Path) -> Path:
    """Where the daemon of ``config`` listens: ``emailmw/`` of :func:`runtime_base`."""
    digest = hashlib.sha256(str(config).encode()).hexdigest()[:16]
    return runtime_base() / "emailmw" / f"daemon-{digest}.sock"


def _verb(argv: Sequence[str]) -> tuple[str, str] | None:
    words = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--config":
            skip = True
            continue
        if arg.startswith("-"):
            continue
        words.append(arg)
        if len(words) == 2:
            return words[0], words[1]
    return None


def ask(path: Path, request: dict[str, object], timeout: float = 120.0) -> dict[str, object]:
    """Send ``request`` to the daemon at ``path``; its answer (raises OSError when none
    answers)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(json.dumps(request).encode() + b"\n")
        sock.shutdown(socket.SHUT_WR)
        chunks, size = [], 0
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > _MAX_ANSWER:
                raise OSError("the daemon's answer is too large")
    answer: dict[str, object] = json.loads(b"".join(chunks) or b"{}")
    return answer


def start_daemon(config: Path) -> None:
    """Start the daemon of ``config`` in the background (it says nothing here)."""
    subprocess.Popen(
        [sys.executable, "-m", "emailmw", "--config", str(config), "daemon", "start"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def try_daemon(argv: Sequence[str]) -> int | None:
    """Run ``argv`` in the daemon of its configuration when it is a verb a daemon answers
    and one runs: its exit status, its output written here. None: run it the usual way
    (no daemon, another verb, ``--no-daemon``); a daemon is started for the next time."""
    if "--no-daemon" in argv or os.environ.get("EMAILMW_NO_DAEMON", "") not in ("", "0"):
        return None
    if "_ARGCOMPLETE" in os.environ or "--help" in argv or "-h" in argv:
        return None
    verb = _verb(argv)
    if verb not in DAEMON_VERBS:
        return None
    config = config_file(argv)
    if config is None or not config.is_file():
        return None
    path = daemon_socket(config)
    if path.parent.exists() and not private_directory(path.parent):
        return None  # (someone else's directory: no daemon of ours there)
    try:
        answer = ask(path, {"argv": list(argv), "cwd": os.getcwd(), "config": str(config)})
    except (OSError, ValueError):
        if not path.exists() or _stale(path):
            start_daemon(config)
        return None
    if answer.get("status") is None:
        return None  # (the daemon would not run it: the usual way)
    sys.stdout.write(str(answer.get("stdout", "")))
    sys.stderr.write(str(answer.get("stderr", "")))
    sys.stdout.flush()
    sys.stderr.flush()
    status = answer["status"]
    return status if isinstance(status, int) else 1


def _stale(path: Path) -> bool:
    """A socket file nobody listens on (a daemon that was killed): removed."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect(str(path))
    except ConnectionRefusedError:
        path.unlink(missing_ok=True)
        return True
    except OSError:
        return False
    return False
