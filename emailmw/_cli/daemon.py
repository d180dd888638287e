"""``emailmw daemon start|stop|status``: ``ros2 daemon`` for a mail account.

The daemon of a configuration keeps one context of its account open and the graph in
memory (kept up to date from the graph topic's announcements as they arrive), and runs,
for the command line, the verbs that read the graph or ask a node and end
(``quick.DAEMON_VERBS``: ``topic list``, ``param get``, ``service call`` ...): the command
sends its arguments over a Unix socket in a private directory of the user, the daemon runs
the verb on its context and sends back what it printed and its exit status. So such a
command costs a Python start and a round trip instead of a login and a read of the
mailbox. The command line starts the daemon on its first use (as ros2cli does) and works
without one (``--no-daemon``).

One daemon per configuration file; it ends after ``--timeout`` seconds without a request
(two hours, ros2's), once its account has been unreachable for ``--unreachable-timeout``
seconds (ten minutes: its graph would only go stale), on ``emailmw daemon stop``, on
SIGTERM, or when the file changed (the command then runs the usual way and starts a new
one). Verbs run one at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .._core.errors import ConnectError, ConnectionLimitError
from .._core.signalsafe import set_on_signals
from .common import CommandError, Commands, account_context, share_context, verbs
from .quick import (
    ask,
    config_file,
    daemon_socket,
    make_private_directory,
    open_private,
    private_directory,
)

__all__ = ["register"]

#: seconds without a request after which a daemon ends (ros2 daemon's default)
DEFAULT_TIMEOUT = 7200.0
#: how long the account may be unreachable before the daemon ends (its graph would go
#: stale; the commands then read the mailbox themselves and say what fails)
UNREACHABLE_TIMEOUT = 600.0


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "daemon", help="the graph daemon that answers the command line quickly"
    )
    add = verbs(parser, common)
    start_ = add("start", run=start, help="start the daemon of the configuration")
    start_.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
        help="end after this long without a request (default: 2 hours)",
    )  # fmt: skip
    start_.add_argument(
        "--unreachable-timeout", type=float, default=UNREACHABLE_TIMEOUT, metavar="SECONDS",
        help="end once the account has been unreachable this long (default: 10 minutes)",
    )  # fmt: skip
    add("stop", run=stop, help="stop it")
    add("status", run=status, help="whether it runs")
    serve_ = add("serve", run=serve, help=argparse.SUPPRESS)
    serve_.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    serve_.add_argument("--unreachable-timeout", type=float, default=UNREACHABLE_TIMEOUT)


def _where(args: argparse.Namespace) -> tuple[Path, Path]:
    """The configuration file and the daemon's socket."""
    given = getattr(args, "config", None)
    config = config_file(["--config", given] if given else [])
    if config is None or not config.is_file():
        raise CommandError(
            "no configuration file: give --config FILE or EMAILMW_CONFIG_FILE, or write "
            "./email.yml (the daemon serves one mail account)"
        )
    return config, daemon_socket(config)


def _checked(path: Path) -> int:
    """The daemon's directory, made where missing and checked before anything in it is
    opened, created or trusted (:func:`~.quick.make_private_directory`): its descriptor."""
    try:
        return make_private_directory(path.parent)
    except PermissionError as exc:
        raise CommandError(str(exc)) from None


def _ping(path: Path) -> dict[str, Any] | None:
    """The daemon's answer to a ping, None when none answers (or its directory is not
    private: a socket there could be anyone's)."""
    if not private_directory(path.parent):
        return None
    try:
        return ask(path, {"control": "ping"}, timeout=10)
    except (OSError, ValueError):
        return None


def _trusted(path: Path) -> Path:
    """``path`` when its directory may be trusted, or missing (no daemon); else one line."""
    if path.parent.exists() and not private_directory(path.parent):
        _checked(path)  # (raises, saying why)
    return path


def start(args: argparse.Namespace) -> int:
    config, path = _where(args)
    directory = _checked(path)
    try:
        if _ping(path) is not None:
            print("The daemon is already running")
            return 0
        log = path.with_suffix(".log")
        try:
            out = open_private(directory, log.name)
        except (PermissionError, OSError) as exc:  # (a link there: O_NOFOLLOW refused it)
            raise CommandError(f"{log} cannot be the daemon's log ({exc}): remove it") from None
    finally:
        os.close(directory)
    try:
        subprocess.Popen(
            [sys.executable, "-m", "emailmw", "--config", str(config), "daemon", "serve",
             "--timeout", str(args.timeout), "--unreachable-timeout",
             str(getattr(args, "unreachable_timeout", UNREACHABLE_TIMEOUT))],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip
    finally:
        os.close(out)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _ping(path) is not None:
            print("The daemon has been started")
            return 0
        time.sleep(0.1)
    raise CommandError(f"the daemon did not answer within 60 s: see {log}")


def stop(args: argparse.Namespace) -> int:
    _, path = _where(args)
    if _ping(_trusted(path)) is None:
        print("The daemon is not running")
        return 0
    with contextlib.suppress(OSError, ValueError):
        ask(path, {"control": "stop"}, timeout=30)
    print("The daemon has been stopped")
    return 0


def status(args: argparse.Namespace) -> int:
    _, path = _where(args)
    answer = _ping(_trusted(path))
    if answer is None:
        print("The daemon is not running")
        return 0
    print(f"The daemon is running (pid {answer.get('pid')}, {answer.get('served')} request(s))")
    return 0


def serve(args: argparse.Namespace) -> int:
    """The daemon itself, in the foreground (``start`` runs it in the background)."""
    from . import main  # (the whole command line, run here on the shared context)

    config, path = _where(args)
    os.close(_checked(path))
    if _ping(path) is not None:
        raise CommandError("a daemon of this configuration runs already")
    path.unlink(missing_ok=True)  # (a killed daemon's socket)
    context = account_context(argparse.Namespace(config=str(config)))
    version = _version(config)
    stopping = threading.Event()
    set_on_signals(stopping, (signal.SIGTERM,))
    served = 0
    try:
        context.start_receiving()
        from .._delivery.graph import graph_of

        try:
            graph_of(context)  # the graph in memory from now on
        except ConnectError as exc:  # (the account full, or away: each verb tries again)
            print(f"emailmw daemon: {exc}: the graph is read at the next request",
                  file=sys.stderr, flush=True)  # fmt: skip
        share_context(context)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(path))
            os.chmod(path, 0o600)
            listener.listen(16)
            listener.settimeout(1.0)
            last = time.monotonic()
            unreachable = Unreachable(args.unreachable_timeout)
            while not stopping.is_set() and time.monotonic() - last < args.timeout:
                said = unreachable.update(context.receive_error, time.monotonic())
                if said is not None:
                    print(f"emailmw daemon: {said}: ending", file=sys.stderr, flush=True)
                    break
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    continue
                with connection:
                    last = time.monotonic()
                    request = _read(connection)
                    if request.get("control") == "stop":
                        _send(connection, {"status": 0})
                        break
                    if request.get("control") == "ping":
                        _send(connection, {"status": 0, "pid": os.getpid(), "served": served})
                        continue
                    if request.get("control") == "names":
                        _send(connection, _names(context, request))
                        continue
                    if _version(config) != version:  # the configuration changed: end
                        _send(connection, {"status": None})
                        break
                    served += 1
                    _send(connection, _run(main, request))
    finally:
        share_context(None)
        path.unlink(missing_ok=True)
        context.shutdown()
    return 0


class Unreachable:
    """Whether the daemon's account has been unreachable for ``limit`` seconds: a pure
    state machine over what receiving says (its error, or None while it works)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._since: float | None = None

    def update(self, error: Exception | None, now: float) -> str | None:
        """None while the account answers (or not for long yet), else why to end. An
        account whose connections are all held answers: the daemon waits for one."""
        if error is None or isinstance(error, ConnectionLimitError):
            self._since = None
            return None
        if self._since is None:
            self._since = now
        if now - self._since < self.limit:
            return None
        return f"the account has been unreachable for {now - self._since:.0f} s ({error})"


def _names(context: Any, request: dict[str, Any]) -> dict[str, Any]:
    """Names for the shell's completion (``complete.py``): of the graph in memory, or a
    node's parameters (asked of it)."""
    from .._delivery.graph import graph_of
    from .complete import names_of

    kind = request.get("kind")
    try:
        if kind == "parameters":
            from .param import _Remote

            remote = _Remote(context, str(request.get("node") or ""), timeout=2.0)
            try:
                return {"names": remote.names()}
            finally:
                remote.close()
        name = str(request.get("node") or "")
        return {"names": names_of(str(kind), graph_of(context).graph(), name)}
    except Exception:  # noqa: BLE001 - no completion is the answer to any failure
        return {"names": []}


def _version(config: Path) -> tuple[int, int] | None:
    try:
        found = config.stat()
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


def _read(connection: socket.socket) -> dict[str, Any]:
    connection.settimeout(30)
    data = b""
    while chunk := connection.recv(1 << 16):
        data += chunk
        if len(data) > 1 << 20:
            break
    try:
        found = json.loads(data or b"{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _send(connection: socket.socket, answer: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        connection.sendall(json.dumps(answer).encode())


def _run(main: Any, request: dict[str, Any]) -> dict[str, Any]:
    """Run the command line ``request["argv"]`` here, on the shared context: what it
    printed and its exit status."""
    argv = request.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return {"status": None}
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    try:
        with contextlib.suppress(OSError, TypeError):
            os.chdir(str(request.get("cwd") or cwd))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv, daemon=False)
            except SystemExit as exc:  # argparse's usage errors, --help
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            except Exception as exc:  # noqa: BLE001 - the daemon outlives a verb's bug
                print(f"emailmw: error: {exc}", file=sys.stderr)
                code = 1
    finally:
        os.chdir(cwd)
    return {"status": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
