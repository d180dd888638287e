"""A Spark standalone cluster on loopback, from the pyspark package alone: one master and
``workers`` workers (``bin/spark-class org.apache.spark.deploy.master.Master`` /
``...worker.Worker``), for tests and ``bench/pipeline.py --cluster``.

``start()`` returns once the master reports every worker alive (its ``/json`` page), or
raises :class:`SparkClusterError` with the logs' tails; ``stop()`` ends the processes. A
context manager. Ports are free ones, taken at start.

With ``slow_starts``, an application can have its executors start late, as on a busy
machine: its ``--conf spark.executorEnv.EMAILMW_EXECUTOR_DELAY=S`` makes each of them wait
``S`` seconds before its JVM starts (the workers run executors with a ``java`` that sleeps
first when that variable is set: the application's ``spark.executorEnv`` reaches the
process a worker starts).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from .mailserver import free_ports

__all__ = ["SparkCluster", "SparkClusterError"]


class SparkClusterError(RuntimeError):
    pass


def _real_java_home() -> Path:
    java = shutil.which("java")
    if java is None:
        raise SparkClusterError("no java on PATH: install a JDK (17 or newer) or set JAVA_HOME")
    return Path(java).resolve().parent.parent


def _spark_class() -> Path:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        raise SparkClusterError(f"{path} is missing: the pyspark package has no spark-class")
    return path


@dataclass
class SparkCluster:
    """``workers`` workers of ``cores`` cores and ``memory`` each, state under ``work``."""

    work: Path
    workers: int = 1
    cores: int = 1
    memory: str = "1g"
    ready_timeout: float = 90.0
    slow_starts: bool = False
    master_port: int = 0
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    _ui_port: int = 0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.work / "logs"),
            SPARK_WORKER_DIR=str(self.work / "worker"),
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
        )
        if self.slow_starts:
            env["JAVA_HOME"] = str(self._slow_java_home())
        return env

    def _slow_java_home(self) -> Path:
        """A Java home whose ``bin/java`` sleeps ``$EMAILMW_EXECUTOR_DELAY`` seconds (when
        set) before it runs the real one; the rest is the real Java home's."""
        real = Path(os.environ.get("JAVA_HOME") or _real_java_home())
        home = self.work / "slow-java"
        (home / "bin").mkdir(parents=True, exist_ok=True)
        for entry in real.iterdir():
            if entry.name != "bin" and not (home / entry.name).exists():
                (home / entry.name).symlink_to(entry)
        java = home / "bin" / "java"
        java.write_text(
            "#!/bin/sh\n"
            'if [ -n "$EMAILMW_EXECUTOR_DELAY" ]; then sleep "$EMAILMW_EXECUTOR_DELAY"; fi\n'
            f'exec {real / "bin" / "java"} "$@"\n'
        )
        java.chmod(0o755)
        return home

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.work / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [str(_spark_class()), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            start_new_session=True,  # stop() ends its whole group
        )
        self._processes.append(process)

    def status(self) -> dict[str, Any]:
        """The master's ``/json`` page (workers, cores, status)."""
        url = f"http://127.0.0.1:{self._ui_port}/json/"
        with urllib.request.urlopen(url, timeout=2) as answer:
            data: dict[str, Any] = json.load(answer)
        return data

    def _alive_workers(self) -> int:
        try:
            workers = self.status().get("workers", [])
        except (OSError, ValueError):
            return -1
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def start(self) -> Self:
        self.work.mkdir(parents=True, exist_ok=True)
        ports = free_ports(2 + self.workers)
        self.master_port, self._ui_port = ports[0], ports[1]
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.master_port),
            "--webui-port", str(self._ui_port),
        )  # fmt: skip
        for index in range(self.workers):
            self._spawn(
                f"worker{index}",
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(ports[2 + index]),
                "--work-dir", str(self.work / f"worker{index}"),
                self.url,
            )  # fmt: skip
        deadline = time.monotonic() + self.ready_timeout
        while self._alive_workers() < self.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self._processes):
                self.stop()
                raise SparkClusterError("the cluster did not start:\n" + self.log_tails())
            time.sleep(0.2)
        return self

    def log_tails(self, lines: int = 15) -> str:
        out = []
        for log in sorted(self.work.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for process in self._processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        self._processes.clear()
        shutil.rmtree(self.work / "worker", ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
