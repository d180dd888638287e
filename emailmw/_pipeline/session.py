"""The Spark session of ``emailmw analyze``: its settings (UI off, few shuffle partitions,
UTC, the JIT set-up of ``jvm.py``), the driver JVM's own output kept off the user's
terminal, and the check that a cluster gives the job executors."""

from __future__ import annotations

import collections
import logging
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from pyspark.sql import SparkSession

from .._core.errors import ConfigError
from .._core.log import get_logger
from .jvm import driver_java_options, executor_java_options, guard_driver, stop_asked

__all__ = [
    "SHORT_JOB_MESSAGES",
    "ExecutorWatch",
    "build_session",
    "executors_verdict",
    "require_executors",
    "set_codegen",
]

# below this many messages (the rough count made before landing) the JVMs JIT-compile with
# C1 only (see jvm.py). Measured on two cores: 200k Maildir messages 15-16 s with C1, 19 s
# tiered; 2M mbox messages (counted as 2.4M) 44 s with C1, 35 s tiered, where C2 pays off
# in the Parquet writers and publisher_health's window sort.
SHORT_JOB_MESSAGES = 1_000_000

# below this many messages a run's queries are interpreted, not compiled to Java by Spark's
# whole-stage code generation: over a few thousand rows compiling each plan costs more than
# it saves (three runs over the test archives' 674 emails, alternated: 41 and 45 CPU-s
# against 48 and 47; two of the pipeline's in-process test files: 116 against 133); at 200k
# it made no difference beyond the noise. Decided per run (a session may serve runs of
# both sizes); a --conf naming spark.sql.codegen.wholeStage wins.
SMALL_RUN_MESSAGES = 20_000


def set_codegen(spark: SparkSession, expected_messages: int | None, conf: dict[str, str]) -> None:
    """Whole-stage code generation for this run: off below :data:`SMALL_RUN_MESSAGES`
    (``expected_messages`` None: unknown, on), unless ``conf`` names it."""
    key = "spark.sql.codegen.wholeStage"
    if key in conf:
        spark.conf.set(key, conf[key])
        return
    small = expected_messages is not None and expected_messages < SMALL_RUN_MESSAGES
    spark.conf.set(key, "false" if small else "true")


_log = get_logger("spark")
#: the driver JVM's last lines on its standard error (what a failed start said)
JVM_SAID: collections.deque[str] = collections.deque(maxlen=40)
#: the running driver JVM's guard (jvm.guard_driver): kept while this process runs
_guard: subprocess.Popen[bytes] | None = None


def _relay(stream: IO[bytes], debug: bool) -> None:
    """The driver JVM's standard error (the JVM's own warnings, such as "WARNING: Using
    incubator modules: jdk.incubator.vector", which every Spark 4 start prints; Spark's
    log lines; its Python workers' output): to the terminal with ``debug``, else kept
    (:data:`JVM_SAID`) and logged at debug level only."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if EXECUTORS.feed(line) and not debug:
            _log.debug("jvm: %s", line)
            continue  # (the scheduler's own lines: never what a failed start said)
        JVM_SAID.append(line)
        if debug:
            print(line, file=sys.stderr, flush=True)
        else:
            _log.debug("jvm: %s", line)


class _QuietInterrupt(logging.Filter):
    """Py4J logs a traceback (on the root logger) when ctrl-c interrupts a call to the
    JVM, and when a call on another thread loses its answer as the command stops (the
    connection shut, the JVM ended): the command says in one line that it was stopped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        interrupted = bool(record.exc_info) and record.exc_info[0] is KeyboardInterrupt  # type: ignore[index]
        if interrupted and message.startswith("KeyboardInterrupt while"):
            return False
        return not (stop_asked() and message.startswith("Exception while sending command"))


_QUIET_INTERRUPT: Final = _QuietInterrupt()


def _launch(master: str, settings: dict[str, str], debug: bool) -> None:
    """Start the driver JVM as ``getOrCreate`` would (the same spark-submit, the same
    ``--conf``), its standard error read by :func:`_relay`; nothing when a JVM runs."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName("emailmw analyze")
    for key, value in settings.items():
        conf.set(key, value)
    JVM_SAID.clear()
    EXECUTORS.reset()
    logging.getLogger().addFilter(_QUIET_INTERRUPT)  # (once: a filter is added once)
    # (a pipe of this process's, read from the start: the JVM must never block on a full
    # one, and what a JVM that fails to start said is read to its end)
    read_end, write_end = os.pipe()
    relay = threading.Thread(target=_relay, args=(os.fdopen(read_end, "rb"), debug),
                             name="emailmw-jvm-stderr", daemon=True)  # fmt: skip
    relay.start()
    # the JVM's guard starts the moment the JVM does (jvm.guard_driver: nothing outlives
    # this process, even killed while the JVM starts): PySpark's launch_gateway makes the
    # process with its module's Popen, and sets its own preexec_fn
    from pyspark import java_gateway

    space = vars(java_gateway)  # (its Popen: the name it calls, at call time)
    made = space["Popen"]

    def guarded(*args: Any, **kwargs: Any) -> Any:
        global _guard
        proc = made(*args, **kwargs)
        _guard = guard_driver(proc.pid)
        return proc

    space["Popen"] = guarded
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})  # type: ignore[no-untyped-call]
    except Exception as exc:
        os.close(write_end)
        relay.join(5)  # (what it said before it ended)
        said = [line for line in JVM_SAID if line.strip() and "incubator modules" not in line]
        raise ConfigError(
            f"the Spark driver JVM did not start: {said[0] if said else exc} (--debug shows "
            "all it said)",
            source="spark",
        ) from exc
    finally:
        space["Popen"] = made
    os.close(write_end)  # (the JVM has its own)
    SparkContext._ensure_initialized(gateway=gateway)


#: Spark's logging for this job (errors only) unless ``debug``
LOG4J2: Final = Path(__file__).with_name("log4j2.properties")


def build_session(
    master: str,
    conf: dict[str, str],
    *,
    expected_messages: int | None = None,
    debug: bool = False,
) -> SparkSession:
    """A session set up for this job: UI off, few shuffle partitions, UTC; ``conf`` wins.

    ``expected_messages`` (a rough count) picks the driver's JIT set-up, see ``jvm.py``.
    Spark's console progress bars and its log lines below ERROR are off (emailmw says its
    own progress), and what the driver JVM writes on its standard error goes to the
    terminal only with ``debug`` (:func:`_relay`).
    """
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if debug else "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "4g",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.files.maxPartitionBytes": str(64 << 20),
        "spark.sql.parquet.compression.codec": "zstd",
        "spark.sql.maxConcurrentOutputFileWriters": "64",
        # No session extensions from the classpath: PySpark's jars include spark-mllib, whose
        # provider registers ML functions through Scala reflection at every session start
        # (a good part of the start); this job calls none of them.
        # Extensions named in spark.sql.extensions still load. Spark calls the setting a
        # test flag; --conf spark.sql.extensions.test.loadFromCp=true restores the default.
        "spark.sql.extensions.test.loadFromCp": "false",
    }
    settings.update(conf)
    # the executors' Python (they parse the archives) is this one, with emailmw installed,
    # unless PYSPARK_PYTHON names another (a cluster's machines may need that): PySpark
    # reads the variable when the context starts, and otherwise runs "python3" from PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    short_job = expected_messages is None or expected_messages < SHORT_JOB_MESSAGES
    user_java = settings.get("spark.driver.extraJavaOptions")
    if not debug and "log4j2.configurationFile" not in (user_java or ""):
        quiet = f"-Dlog4j2.configurationFile=file:{LOG4J2}"
        user_java = f"{quiet} {user_java}" if user_java else quiet
    java_options = driver_java_options(user_java, short_job=short_job)
    if java_options:
        settings["spark.driver.extraJavaOptions"] = java_options
    if not master.startswith("local"):
        executor_options = executor_java_options(
            settings.get("spark.executor.extraJavaOptions"), short_job=short_job
        )
        if executor_options:
            settings["spark.executor.extraJavaOptions"] = executor_options
    _launch(master, settings, debug)
    builder = SparkSession.builder.master(master).appName("emailmw analyze")
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN" if debug else "ERROR")
    return session


_GRANTED: Final = re.compile(r"Granted executor ID (\S+) on hostPort (\S+)")
_UPDATED: Final = re.compile(r"Executor updated: (\S+) is now (\w+)(?: \((.*)\))?$")
_CONNECTED: Final = "Connected to Spark cluster with app ID"
#: the two scheduler loggers' INFO lines as log4j2.properties lays them out
_SCHEDULER_INFO: Final = re.compile(
    r"^\[spark\] INFO (StandaloneSchedulerBackend|StandaloneAppClient\$ClientEndpoint): "
)
#: states of a standalone executor that has ended (Spark's ExecutorState.isFinished)
_ENDED: Final = frozenset({"KILLED", "FAILED", "LOST", "EXITED"})


@dataclass
class ExecutorWatch:
    """What the driver's standalone scheduler said about this application's executors:
    the master's grants and the workers' reports of each executor's state. Fed the driver
    JVM's lines (``log4j2.properties`` sends the two scheduler loggers' INFO lines to the
    relay); thread-safe (one lock), the state read with :meth:`snapshot`.

    A grant is the master's decision that a worker has room for an executor of this job:
    it comes as the application registers, whatever the load. Whether the executor then
    reaches the driver takes a JVM start on the worker, which a busy machine makes slow;
    so only the absence of a grant says "no room", never a slow start."""

    connected: bool = False
    granted: int = 0
    ended: int = 0
    last_end: str = ""
    where: str = ""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.connected, self.granted, self.ended = False, 0, 0
            self.last_end = self.where = ""

    def feed(self, line: str) -> bool:
        """Take one line of the driver JVM's (any layout); whether it was one of the
        scheduler's INFO lines as ``log4j2.properties`` lays them out (never what a failed
        start said)."""
        with self._lock:
            if _CONNECTED in line:
                self.connected = True
            elif granted := _GRANTED.search(line):
                self.granted += 1
                self.where = granted.group(2)
            elif (updated := _UPDATED.search(line)) and updated.group(2) in _ENDED:
                self.ended += 1
                reason = updated.group(3)
                self.last_end = updated.group(2) + (f" ({reason})" if reason else "")
        return _SCHEDULER_INFO.match(line) is not None

    def snapshot(self) -> tuple[bool, int, int, str, str]:
        """``(connected, granted, ended, last_end, where)``, read at once."""
        with self._lock:
            return self.connected, self.granted, self.ended, self.last_end, self.where


#: the driver JVM's scheduler lines, read by :func:`_relay` (one driver JVM a process)
EXECUTORS: Final = ExecutorWatch()


def executors_verdict(
    snapshot: tuple[bool, int, int, str, str],
    registered: int,
    waited: float,
    since_change: float,
    *,
    grant_wait: float,
    start_wait: float,
) -> str | None:
    """Whether to go on waiting for an executor (``None``: go on, or go ahead once
    ``registered`` > 0) or what the master did, in words that follow "the Spark master at
    URL". Pure.

    ``waited``: seconds since the driver registered with the master; ``since_change``:
    seconds since the last grant or end. No grant within ``grant_wait`` of registering
    (the master grants at once when a worker has room): no worker with free cores. Every
    executor granted has ended and none granted again within ``grant_wait``: the workers
    cannot run one. Granted and running, but not registered with the driver within
    ``start_wait`` (a JVM start, however slow the machine): it cannot reach the driver.
    Without the scheduler's lines (a log configuration of the user's own), nothing is known
    but registration, which gets ``start_wait``."""
    connected, granted, ended, last_end, where = snapshot
    none = ("gave this job no executor within {:.0f} s: start a worker with free cores "
            "(or one that can reach this machine), or use --master local[*]")  # fmt: skip
    if registered > 0:
        return None
    if not connected:
        return none.format(start_wait) if waited > start_wait else None
    if granted == 0:
        return none.format(grant_wait) if waited > grant_wait else None
    if ended >= granted:
        if since_change > grant_wait:
            return (f"granted this job executors that ended ({last_end}): see the workers' "
                    "logs, or use --master local[*]")  # fmt: skip
        return None
    if since_change > start_wait:
        return (f"gave this job an executor on {where} that did not reach this driver within "
                f"{start_wait:.0f} s: let the worker reach this machine (spark.driver.host), "
                "or use --master local[*]")  # fmt: skip
    return None


def require_executors(
    session: SparkSession,
    master: str,
    *,
    grant_wait: float = 7.0,
    start_wait: float = 300.0,
    watch: ExecutorWatch = EXECUTORS,
) -> None:
    """Raise :class:`~emailmw.ConfigError` (one line) unless the cluster gives this job an
    executor: a standalone master without a worker with free cores would otherwise leave
    every job waiting for ever. Decided by :func:`executors_verdict` from what the master
    said: an executor granted is waited for while its worker starts it (a JVM start, which
    a busy machine makes slow), only the lack of a grant is said within seconds."""
    tracker = session.sparkContext._jsc.sc().statusTracker()
    started = changed = time.monotonic()
    seen = watch.snapshot()
    while True:
        now = time.monotonic()
        snapshot = watch.snapshot()
        if snapshot[1:3] != seen[1:3]:
            seen, changed = snapshot, now
        registered = len(tracker.getExecutorInfos()) - 1  # the driver is one of them
        problem = executors_verdict(
            snapshot, registered, now - started, now - changed,
            grant_wait=grant_wait, start_wait=start_wait,
        )  # fmt: skip
        if problem is not None:
            session.stop()
            raise ConfigError(f"the Spark master at {master} {problem}", source="--master")
        if registered > 0:
            return
        time.sleep(0.1)
