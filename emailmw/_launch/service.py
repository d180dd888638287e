"""Running a launch, as ``ros2 launch``'s ``LaunchService`` does: the processes of an
evaluated description start together (a ``TimerAction``'s after its period), each line
they write is printed prefixed with its name (``[talker-1] ...``), and what happens while
they run (a process started, wrote a line, ended; a shutdown asked for) goes to the
description's event handlers, which may start more processes or end the launch.

The launch ends when no process runs and no timer is due (``shutdown_when_idle``), or on
a shutdown (``EmitEvent(event=Shutdown())``, the ``Shutdown`` action, an ``on_exit``, Ctrl-C
or SIGTERM): the ``OnShutdown`` handlers run, timers not yet due are dropped, and each
running process gets SIGINT (SIGTERM when the launch got SIGTERM), then SIGTERM after its
``sigterm_timeout`` and SIGKILL after its ``sigkill_timeout`` (5 s each), as ros2 launch
escalates. Its status is 0 when every process that ended by itself ended with 0 (a process
the launch stopped does not count) and 1 otherwise.

Thread-safety: :meth:`LaunchService.run` runs in one thread (the main thread, for Ctrl-C);
:meth:`LaunchService.shutdown` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from .description import LaunchContext, LaunchDescription, LaunchError, LaunchProcess
from .events import OnProcessIO, ProcessExited, ProcessIO, ProcessStarted, Shutdown

__all__ = ["LaunchIntrospector", "LaunchService", "run_launch"]

#: how often the loop looks at signals and escalation deadlines while nothing happens
_TICK = 0.1


@dataclass
class _Child:
    process: LaunchProcess
    popen: subprocess.Popen[bytes]
    readers: list[threading.Thread] = field(default_factory=list)
    #: the signal the launch sent it last and when (None: the launch never asked it to stop)
    sent: str | None = None
    sent_at: float = 0.0
    respawns: int = 0

    def event(self, kind: type[Any], **more: Any) -> Any:
        return kind(action=self.process.origin, name=self.process.label,
                    cmd=list(self.process.argv), env=dict(self.process.env),
                    pid=self.popen.pid, **more)  # fmt: skip


class _Run:
    """One run of an evaluated launch context (see the module's docstring)."""

    def __init__(self, context: LaunchContext, environment: Mapping[str, str], *,
                 shutdown_when_idle: bool = True) -> None:  # fmt: skip
        self.context = context
        self.environment = dict(environment)
        self.shutdown_when_idle = shutdown_when_idle
        self.events: queue.Queue[tuple[str, _Child, Any]] = queue.Queue()
        self.pending: list[tuple[float, int, LaunchProcess, int]] = []
        self.running: list[_Child] = []
        self.print_lock = threading.Lock()
        self.signalled: int | None = None
        self.by_user = True
        # stops asked for (a counter, not an Event: setting an Event takes a lock the
        # interrupted main thread may hold, and a signal handler must take none)
        self._asks = itertools.count(1)
        self.stops_asked = 0
        self._stops_seen = 0
        self.stopping: Shutdown | None = None
        self.stop_signal: int = signal.SIGINT
        self.clean = True
        self.failure: str | None = None
        self._order = 0

    # ------------------------------------------------------------------------ output

    def say(self, line: str) -> None:
        with self.print_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def _relay(self, child: _Child, stream: IO[bytes], fd: int) -> None:
        label = child.process.label
        for raw in iter(stream.readline, b""):
            with self.print_lock:
                sys.stdout.write(f"[{label}] {raw.decode(errors='replace').rstrip()}\n")
                sys.stdout.flush()
            if any(isinstance(r.handler, OnProcessIO) for r in list(self.context.handlers)):
                self.events.put(("io", child, (fd, raw)))
        stream.close()

    def _wait(self, child: _Child) -> None:
        code = child.popen.wait()
        for reader in child.readers:
            reader.join(5)  # (what it wrote is printed before it is said to have ended)
        self.events.put(("exit", child, code))

    # ----------------------------------------------------------------------- starting

    def schedule(self, processes: Sequence[LaunchProcess], start: float,
                 respawns: int = 0) -> None:  # fmt: skip
        for process in processes:
            self._order += 1
            self.pending.append((start + process.delay, self._order, process, respawns))
        self.pending.sort(key=lambda item: (item[0], item[1]))

    def _start(self, process: LaunchProcess, respawns: int) -> None:
        separate = any(isinstance(r.handler, OnProcessIO) and r.handler.on_stderr is not None
                       for r in self.context.handlers)  # fmt: skip
        try:
            popen = subprocess.Popen(
                process.argv, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if separate else subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env={**self.environment, **process.env},
            )  # fmt: skip
        except OSError as exc:
            self.failure = (f"{process.label}: cannot start {process.argv[0]}: "
                            f"{exc.strerror or exc}")  # fmt: skip
            self._shut(Shutdown(reason=self.failure), signal.SIGTERM)
            return
        child = _Child(process, popen, respawns=respawns)
        self.running.append(child)
        self.say(f"[INFO] [{process.label}]: process started with pid [{popen.pid}]")
        streams = [(popen.stdout, 1)] + ([(popen.stderr, 2)] if separate else [])
        for stream, fd in streams:
            assert stream is not None
            reader = threading.Thread(target=self._relay, args=(child, stream, fd), daemon=True)
            reader.start()
            child.readers.append(reader)
        threading.Thread(target=self._wait, args=(child,), daemon=True).start()
        self._react(child.event(ProcessStarted))

    def _react(self, event: Any) -> None:
        try:
            started = self.context.react(event)
        except LaunchError as exc:
            self.failure = str(exc)
            self._shut(Shutdown(reason=str(exc)), signal.SIGINT)
            return
        if self.stopping is None:
            self.schedule(started, time.monotonic())
        if self.context.shutdown is not None:
            self._shut(self.context.shutdown, signal.SIGINT)

    # ----------------------------------------------------------------------- stopping

    def _shut(self, event: Shutdown, signum: int, delivered: bool = False) -> None:
        """Start ending the launch; ``delivered``: the processes got ``signum`` already
        (Ctrl-C in the terminal reaches its whole process group): only the escalation
        runs, as ros2 launch does, so no process sees a second SIGINT while it ends."""
        if self.stopping is not None:
            return
        self.stopping, self.stop_signal = event, signum
        self.context.request_shutdown(event)
        self.pending.clear()  # (timers not yet due are dropped)
        try:
            self.context.react(event)  # OnShutdown
        except LaunchError as exc:
            self.failure = self.failure or str(exc)
        self.pending.clear()  # (nothing starts while the launch ends)
        for child in self.running:
            self._signal(child, signum, send=not delivered)

    def _signal(self, child: _Child, signum: int, send: bool = True) -> None:
        if child.popen.poll() is not None:
            return
        child.sent, child.sent_at = signal.Signals(signum).name, time.monotonic()
        if not send:
            return
        with contextlib.suppress(ProcessLookupError):
            child.popen.send_signal(signum)

    def _escalate(self, now: float) -> None:
        for child in self.running:
            if child.sent == "SIGINT" and now - child.sent_at > child.process.sigterm_timeout:
                waited, then = child.process.sigterm_timeout, signal.SIGTERM
            elif child.sent == "SIGTERM" and now - child.sent_at > child.process.sigkill_timeout:
                waited, then = child.process.sigkill_timeout, signal.SIGKILL
            else:
                continue
            self.say(f"[ERROR] [{child.process.label}]: process[{child.process.label}] failed "
                     f"to terminate '{waited:g}' seconds after receiving '{child.sent}', "
                     f"escalating to '{signal.Signals(then).name}'")  # fmt: skip
            self._signal(child, then)

    def _stop_asked(self) -> None:
        signum = self.signalled or signal.SIGINT
        sigint = signum == signal.SIGINT
        if not self.by_user:
            self._shut(Shutdown(reason="LaunchService.shutdown() called"), signal.SIGINT)
            return
        reason = f"user interrupted with {'ctrl-c ' * sigint}({signal.Signals(signum).name})"
        if self.stopping is not None:
            self.say(f"[WARNING] [launch]: {reason} again, ignoring...")
            return
        self.say(f"[WARNING] [launch]: {reason}")
        self._shut(Shutdown(reason=reason, due_to_sigint=sigint), signum,
                   delivered=sigint and _terminal_delivers_sigint())  # fmt: skip

    def request_stop(self, signum: int, by_user: bool = True) -> None:
        """From a signal handler or another thread: only notes it (the loop acts)."""
        self.signalled, self.by_user = signum, by_user
        self.stops_asked = next(self._asks)  # (atomic; takes no lock)

    # --------------------------------------------------------------------------- loop

    def _ended(self, child: _Child, code: int) -> None:
        self.running.remove(child)
        process, pid = child.process, child.popen.pid
        if code == 0:
            self.say(f"[INFO] [{process.label}]: process has finished cleanly [pid {pid}]")
        else:
            self.say(f"[ERROR] [{process.label}]: process has died [pid {pid}, exit code "
                     f"{code}, cmd '{shlex.join(process.argv)}']")  # fmt: skip
            if child.sent is None:
                self.clean = False
        self._react(child.event(ProcessExited, returncode=code))
        retries = process.respawn_max_retries
        if (process.respawn and self.stopping is None
                and (retries < 0 or child.respawns < retries)):  # fmt: skip
            self.schedule([process], time.monotonic() + process.respawn_delay - process.delay,
                          child.respawns + 1)  # fmt: skip

    def loop(self) -> int:
        """Run until the launch ends; its status (see the module's docstring)."""
        self.schedule(self.context.processes, time.monotonic())
        if self.context.shutdown is not None:
            self._shut(self.context.shutdown, signal.SIGINT)
        while True:
            if self.stops_asked != self._stops_seen:
                self._stops_seen = self.stops_asked
                self._stop_asked()
            now = time.monotonic()
            while self.pending and self.pending[0][0] <= now and self.stopping is None:
                _, _, process, respawns = self.pending.pop(0)
                self._start(process, respawns)
            self._escalate(now)
            idle = not self.pending and self.shutdown_when_idle
            if not self.running and self.events.empty() and (self.stopping is not None or idle):
                break
            wait = _TICK
            if self.pending and self.stopping is None:
                wait = max(0.0, min(wait, self.pending[0][0] - time.monotonic()))
            try:
                kind, child, value = self.events.get(timeout=wait)
            except queue.Empty:
                continue
            if kind == "exit":
                self._ended(child, value)
            elif kind == "io" and self.stopping is None:
                fd, raw = value
                self._react(child.event(ProcessIO, text=raw, fd=fd))
        if self.failure is not None:
            raise LaunchError(self.failure)
        return 0 if self.clean else 1


def _terminal_delivers_sigint() -> bool:
    """Whether a Ctrl-C reached every process of the launch already: the launch runs in
    its terminal's foreground process group (its processes are in that group too)."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def run_launch(context: LaunchContext, environment: Mapping[str, str], *,
               shutdown_when_idle: bool = True) -> int:  # fmt: skip
    """Run the evaluated ``context``'s processes with ``environment`` (each process's own
    variables on top) until the launch ends: its status. Ctrl-C and SIGTERM end it when
    called in the main thread; :class:`LaunchError` for a process that cannot start or an
    event handler's mistake, once every process has ended."""
    run = _Run(context, environment, shutdown_when_idle=shutdown_when_idle)
    return _with_signals(run)


def _with_signals(run: _Run) -> int:
    if threading.current_thread() is not threading.main_thread():
        return run.loop()

    def stop(signum: int, frame: Any) -> None:
        del frame
        run.request_stop(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run.loop()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class LaunchService:
    """ROS 2's ``launch.LaunchService``: ``include_launch_description(description)``, then
    ``run()`` (its status) until the launch ends; ``shutdown()`` ends it from another
    thread. ``argv``'s ``NAME:=VALUE`` items are launch arguments, as ``ros2 launch`` passes
    them. A launch file's mistake is one ``[ERROR] [launch]:`` line and status 1."""

    def __init__(self, *, argv: Sequence[str] | None = None, noninteractive: bool = False,
                 debug: bool = False) -> None:  # fmt: skip
        del noninteractive, debug
        self._arguments: dict[str, str] = {}
        for item in argv or []:
            name, sep, value = item.partition(":=")
            if sep and name:
                self._arguments[name] = value
        self._descriptions: list[LaunchDescription] = []
        self._run: _Run | None = None
        self._stop = threading.Event()

    def include_launch_description(self, launch_description: LaunchDescription) -> None:
        self._descriptions.append(launch_description)

    def run(self, *, shutdown_when_idle: bool = True) -> int:
        context = LaunchContext(self._arguments)
        try:
            for description in self._descriptions:
                description.visit(context)
            run = _Run(context, os.environ, shutdown_when_idle=shutdown_when_idle)
            self._run = run
            if self._stop.is_set():
                run.request_stop(signal.SIGINT, by_user=False)
            return _with_signals(run)
        except LaunchError as exc:
            print(f"[ERROR] [launch]: {exc}", file=sys.stderr, flush=True)
            return 1

    def shutdown(self, force_sync: bool = False) -> None:
        del force_sync
        self._stop.set()
        if self._run is not None:
            self._run.request_stop(signal.SIGINT, by_user=False)


class LaunchIntrospector:
    """ROS 2's ``launch.LaunchIntrospector``: ``format_launch_description(description)``,
    a tree of its entities, one per line (what a script prints before running it)."""

    def format_launch_description(self, launch_description: LaunchDescription) -> str:
        lines = [f"<launch.LaunchDescription: {len(launch_description.entities)} entities>"]
        entities = launch_description.entities
        for number, entity in enumerate(entities, 1):
            branch = "└── " if number == len(entities) else "├── "
            lines.append(branch + _describe(entity))
        return "\n".join(lines)


def _describe(entity: Any) -> str:
    fields = []
    for key in ("package", "executable", "name", "namespace", "cmd"):
        value = getattr(entity, key, None)
        if value is not None:
            fields.append(f"{key}={_text(value)}")
    return f"{type(entity).__name__}({', '.join(fields)})"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return type(value).__name__
