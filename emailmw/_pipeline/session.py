"""The Spark session of ``emailmw analyze``: its settings (UI off, few shuffle partitions,
UTC, the JIT set-up of ``jvm.py``), the driver JVM's own output kept off the user's
terminal, and the check that a cluster gives the job executors."""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from pathlib import Path
from typing import IO, Final

from pyspark.sql import SparkSession

from .._core.errors import ConfigError
from .._core.log import get_logger
from .jvm import driver_java_options, executor_java_options

__all__ = ["SHORT_JOB_MESSAGES", "build_session", "require_executors"]

# below this many messages (the rough count made before landing) the JVMs JIT-compile with
# C1 only (see jvm.py). Measured on two cores: 200k Maildir messages 15-16 s with C1, 19 s
# tiered; 2M mbox messages (counted as 2.4M) 44 s with C1, 35 s tiered, where C2 pays off
# in the Parquet writers and publisher_health's window sort.
SHORT_JOB_MESSAGES = 1_000_000

_log = get_logger("spark")
#: the driver JVM's last lines on its standard error (what a failed start said)
JVM_SAID: collections.deque[str] = collections.deque(maxlen=40)


def _relay(stream: IO[bytes], debug: bool) -> None:
    """The driver JVM's standard error (the JVM's own warnings, such as "WARNING: Using
    incubator modules: jdk.incubator.vector", which every Spark 4 start prints; Spark's
    log lines; its Python workers' output): to the terminal with ``debug``, else kept
    (:data:`JVM_SAID`) and logged at debug level only."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        JVM_SAID.append(line)
        if debug:
            print(line, file=sys.stderr, flush=True)
        else:
            _log.debug("jvm: %s", line)


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
    # (a pipe of this process's, read from the start: the JVM must never block on a full
    # one, and what a JVM that fails to start said is read to its end)
    read_end, write_end = os.pipe()
    relay = threading.Thread(target=_relay, args=(os.fdopen(read_end, "rb"), debug),
                             name="emailmw-jvm-stderr", daemon=True)  # fmt: skip
    relay.start()
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


def require_executors(session: SparkSession, master: str, timeout: float = 7.0) -> None:
    """Raise :class:`~emailmw.ConfigError` (one line) unless the cluster gives this job an
    executor within ``timeout`` seconds: a standalone master without a worker with free
    cores would otherwise leave every job waiting for ever."""
    tracker = session.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    while len(tracker.getExecutorInfos()) < 2:  # the driver is one of them
        if time.monotonic() > deadline:
            session.stop()
            raise ConfigError(
                f"the Spark master at {master} gave this job no executor within "
                f"{timeout:.0f} s: start a worker with free cores (or one that can reach "
                "this machine), or use --master local[*]",
                source="--master",
            )
        time.sleep(0.1)
