"""Driver JVM start-up: a class-data-sharing archive, the C1 compiler, the parallel GC.

A fresh Spark driver spends most of a small job loading and verifying ~20,000 classes and
JIT-compiling them, more than the data's own work for a few hundred thousand messages.
These JVM options remove most of that without changing a result:

* ``-XX:SharedArchiveFile``: a dynamic CDS archive of the classes Spark loaded in an earlier
  run on this machine, mapped instead of loaded and verified. The first run records it
  (``-XX:ArchiveClassesAtExit``; the JVM writes it as it exits, which :func:`stop_session`
  waits for, at most 30 s: then the JVM is ended, the file removed and recording skipped
  on this machine for a week) under ``$EMAILMW_CACHE_DIR`` (default ``~/.cache/emailmw``),
  keyed by the Java binary and the PySpark installation. Files a JVM that is gone left
  half-written are removed. A stale or damaged archive is ignored by the JVM
  (``-Xshare:auto``), never fatal.
* ``-XX:TieredStopAtLevel=1`` (C1 only) for jobs up to a million messages, which do
  not reach C2's pay-off. C1 also halves the JVM's start-up CPU, which Spark's Python
  workers share the cores with. Larger jobs keep tiered compilation, where C2 pays off in
  the Parquet writers and ``publisher_health``'s window sort. C1 alone shrinks the JVM's
  default code cache from 240 MB to 48 MB, which a long session (the test suite's, a long
  ``analyze``) can fill:
  the JIT is then disabled and Spark fails with ``Out of space in CodeCache``.
  ``-XX:ReservedCodeCacheSize=240m`` keeps the tiered default's size (a reservation of
  address space, not memory taken).

* ``-XX:+UseParallelGC``: a batch job wants throughput. G1 starts concurrent cycles over
  and over for the Parquet and shuffle buffers it counts as humongous, CPU the job needs.
  A collector the user selects replaces it.

* ``-XX:MetaspaceSize=256m``: the class metadata Spark loads crosses the JVM's initial
  ~21 MB threshold, which sets off a stop-the-world full collection early in every run.
  256 MB is only that trigger, not memory taken.

On a cluster the executors get the same options but the archive (``executor_java_options``;
in local mode the driver is the executor). Set
``EMAILMW_SPARK_CDS=off`` to start the JVM untouched; ``--conf spark.driver.extraJavaOptions``
is appended after these options, so the user's options win.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

__all__ = [
    "clean_stale",
    "driver_java_options",
    "end_driver",
    "executor_java_options",
    "guard_driver",
    "stop_session",
]

_JIT: Final = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
_QUIET: Final = "-Xlog:cds*=off -Xlog:cds=off"
_GC: Final = "-XX:+UseParallelGC"
_METASPACE: Final = "-XX:MetaspaceSize=256m"
_CHOOSES_GC: Final = re.compile(r"-XX:\+Use\w*GC\b")
#: how long the command waits for the JVM to write the archive as it exits (a few seconds
#: normally); past it the JVM is ended, the half-written archive removed, and recording
#: skipped on this machine for _SKIP_DAYS (a JVM left writing would hold the command's
#: output pipes open and leave hundreds of MB behind)
_DUMP_TIMEOUT_S: Final = 30.0
_EXIT_TIMEOUT_S: Final = 30.0
_SKIP_DAYS: Final = 7.0
#: how long a driver JVM is given to exit (its shutdown hooks) when the command that
#: started it was stopped or is gone, before it is killed
END_GRACE_S: Final = 5.0

#: The guard of a driver JVM (:func:`guard_driver`): a small process that holds a pipe
#: from the command and a pidfd of the JVM. When the pipe ends (the command exited, or was
#: killed: SIGKILL runs nothing in it) while the JVM still runs, it sends the JVM SIGTERM,
#: then SIGKILL after the grace; when the JVM ends first, it ends. The pidfd names that
#: very process (never another that reused its number). It ignores the signals a terminal
#: or `timeout` sends to the command's process group: it ends only with the JVM.
_GUARD: Final = """
import os, select, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
pid, grace = int(sys.argv[1]), float(sys.argv[2])
try:
    jvm = os.pidfd_open(pid)
except OSError:
    sys.exit(0)
poll = select.poll()
poll.register(0, select.POLLIN)
poll.register(jvm, select.POLLIN)
while True:
    ready = dict(poll.poll())
    if jvm in ready:
        sys.exit(0)
    if 0 in ready and not os.read(0, 64):
        break
for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
    try:
        signal.pidfd_send_signal(jvm, sig)
    except ProcessLookupError:
        sys.exit(0)
    if select.select([jvm], [], [], wait)[0]:
        sys.exit(0)
"""

# (archive being written, where it goes once the JVM has exited) for the running session
_pending: tuple[Path, Path] | None = None

#: set once the command was asked to stop (:func:`stopping`): from then on the errors of
#: calls to the JVM, cut short or left without an answer, are the stop's, said in one line
_stop_asked = [False]


def stopping() -> None:
    """The command was asked to stop (a signal): Py4J's tracebacks of the calls that this
    cuts short, on any thread, are not shown (:func:`stop_asked`). Safe in a signal
    handler (sets a flag)."""
    _stop_asked[0] = True


def stop_asked() -> bool:
    """Whether :func:`stopping` (or :func:`end_driver`) was called in this process."""
    return _stop_asked[0]


def cache_dir() -> Path:
    explicit = os.environ.get("EMAILMW_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "emailmw"


def _archive_key() -> str | None:
    """What a CDS archive depends on: the JVM binary and the Spark jars."""
    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java:
        return None
    try:
        java_stat = Path(java).resolve().stat()
    except OSError:
        return None
    spark_dir = Path(pyspark.__file__).resolve().parent
    parts = [
        str(Path(java).resolve()),
        str(java_stat.st_mtime_ns),
        str(java_stat.st_size),
        str(spark_dir),
        pyspark.__version__,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def driver_java_options(user_options: str | None, *, short_job: bool = True) -> str | None:
    """The driver's ``extraJavaOptions``: ours first, then the user's (which win).

    Records, for :func:`stop_session`, an archive to promote when this run creates one.
    """
    global _pending
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return user_options  # the JVM runs already: these options could not apply
    _pending = None
    if os.environ.get("EMAILMW_SPARK_CDS", "").lower() in ("0", "off", "no", "false"):
        return user_options
    key = _archive_key()
    options = [_JIT, _QUIET, _METASPACE] if short_job else [_QUIET, _METASPACE]
    if not (user_options and _CHOOSES_GC.search(user_options)):
        options.append(_GC)  # two collectors named is a JVM start-up error
    if key is not None:
        directory = cache_dir()
        clean_stale(directory)
        final = directory / f"spark-cds-{key}.jsa"
        if final.is_file() and final.stat().st_size > 0:
            options.append(f"-XX:SharedArchiveFile={final}")
        elif _skipping(directory / f"spark-cds-{key}.skip"):
            pass  # recording did not finish in time here lately: not at all
        else:
            with contextlib.suppress(OSError):
                directory.mkdir(parents=True, exist_ok=True)
                temp = directory / f"spark-cds-{key}.{os.getpid()}.tmp"
                options.append(f"-XX:ArchiveClassesAtExit={temp}")
                _pending = (temp, final)
    if user_options:
        options.append(user_options)
    return " ".join(options)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(directory: Path) -> list[Path]:
    """Remove archives a JVM began and never finished (its process is gone): the files
    ``spark-cds-KEY.PID.tmp`` whose PID is not running. Returns what it removed."""
    removed = []
    with contextlib.suppress(OSError):
        for path in directory.glob("spark-cds-*.*.tmp"):
            pid = path.name.rsplit(".", 2)[-2]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


def _skipping(marker: Path) -> bool:
    try:
        age = time.time() - marker.stat().st_mtime
    except OSError:
        return False
    return age < _SKIP_DAYS * 86_400


def executor_java_options(user_options: str | None, *, short_job: bool = True) -> str | None:
    """The executors' ``extraJavaOptions`` on a cluster: the driver's JIT, collector and
    metaspace options (not its class-data archive, which is recorded from the driver's
    class path), then the user's (which win). An executor parses nothing itself but runs
    every query cold; with C1 only, a 1-core executor spent 26 CPU-seconds on a 200k-message
    job before, and two of them made the job slower than one."""
    if os.environ.get("EMAILMW_SPARK_CDS", "").lower() in ("0", "off", "no", "false"):
        return user_options
    options = [_JIT, _METASPACE] if short_job else [_METASPACE]
    if not (user_options and _CHOOSES_GC.search(user_options)):
        options.append(_GC)
    if user_options:
        options.append(user_options)
    return " ".join(options)


def guard_driver(pid: int) -> subprocess.Popen[bytes] | None:
    """Start the guard of the driver JVM ``pid`` (see ``_GUARD``): whatever ends this
    process, SIGKILL included, the JVM is ended within :data:`END_GRACE_S` seconds (and
    ends its Python workers: they exit when it does). None when no guard could start (the
    JVM then still exits on its own when this process's pipe to it closes, as PySpark
    arranges, unless its shutdown hangs)."""
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARD, str(pid), str(END_GRACE_S)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    except OSError:
        return None


def end_driver(grace: float = END_GRACE_S) -> bool:
    """End the driver JVM now, without asking Spark anything (the command was stopped,
    perhaps in the middle of a call to it): its pipe closed (it exits, running its shutdown
    hooks), ``grace`` seconds, then killed. True when there was one. Idempotent."""
    global _pending
    stopping()
    try:
        from pyspark import SparkContext
    except ImportError:
        return False
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    context = SparkContext._active_spark_context
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:  # (its connection from the JVM ends with it: no traceback)
        server.handle_error = lambda *args: None
        server.server_shutdown = True
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    _pending = None  # (an archive it was writing is removed by clean_stale later)
    if proc is None:
        return False
    with contextlib.suppress(OSError, ValueError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)
    return True


def stop_session(spark: Any = None, *, exit_jvm: bool = False) -> None:
    """Stop the session (default: the active one); when this run records a CDS archive, or
    with ``exit_jvm``, let the JVM exit and wait for it.

    Without either this is ``spark.stop()`` (the JVM then exits with this process). With a
    pending archive, the driver JVM is told to exit (its stdin closes), waited for (the
    archive is written during exit, a few seconds, once per installation) and the archive
    renamed into place atomically, so a concurrent run never maps a half-written file.
    ``exit_jvm`` (the command line, while it renders the report) ends the JVM the same
    way, so its shutdown overlaps work instead of following it. A later call is a no-op.
    """
    global _pending
    try:
        from pyspark import SparkContext
    except ImportError:
        # pyspark still being imported on the start-up thread (the run failed before the
        # session was up, on a path it could not read, say): no session to stop, and the
        # run's own error is the one to show
        return

    if spark is None:
        spark = SparkContext._active_spark_context
    if spark is not None:
        spark.stop()
    pending, _pending = _pending, None
    if pending is None and not exit_jvm:
        return
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is None or proc is None:
        return
    with contextlib.suppress(Exception):
        gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    with contextlib.suppress(OSError, ValueError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout=_DUMP_TIMEOUT_S if pending else _EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # never left running: it holds the command's output open and the half-written file
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)
        if pending is not None:
            temp, final = pending
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
                final.with_suffix(".skip").touch()
        return
    if pending is None:
        return
    temp, final = pending
    with contextlib.suppress(OSError):
        if temp.is_file() and temp.stat().st_size > 0:
            os.replace(temp, final)
        else:
            temp.unlink(missing_ok=True)
