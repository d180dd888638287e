"""The Spark job of ``emailmw analyze``: every table (``tables.py``, each defined once)
written under the output directory, and the overview (``overview.py``) collected for the
summary and the report. Nothing but small result tables ever reaches the driver."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from .overview import Overview, overview
from .tables import Tables

__all__ = ["TABLES_WRITTEN", "Profile", "run_job"]


def _write_small(table: pa.Table, directory: Path) -> None:
    """A small aggregate as one zstd Parquet file, laid out as Spark lays out a table."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    pq.write_table(table, directory / "part-00000.zstd.parquet", compression="zstd")
    (directory / "_SUCCESS").touch()


#: the tables :func:`run_job` writes (publisher_health, topic_stats, messages,
#: service_calls, rejects)
TABLES_WRITTEN: Final = 5


def run_job(
    spark: SparkSession,
    out: Path,
    tables: Tables,
    *,
    on_collected: Callable[[str, pa.Table], None] | None = None,
    on_written: Callable[[str], None] | None = None,
    profile: Profile | None = None,
) -> Overview:
    """Write every table of ``tables`` (:func:`compute`) under ``out`` and return the
    overview of them. ``messages`` is partitioned by topic and day.

    ``on_collected(name, table)`` is called, from a worker thread, as soon as
    ``topic_stats`` or ``publisher_health`` is on the driver (written, as Arrow), while the
    other tables may still be computing; an exception it raises fails the job.
    ``on_written(name)``: each of the :data:`TABLES_WRITTEN` tables written (progress).
    ``profile`` (made with the same session): each table's and the overview's share."""
    profile = profile if profile is not None else Profile(spark)

    def write(name: str, *partitions: str) -> Callable[[], None]:
        def run() -> None:
            with profile.part(name):
                writer = getattr(tables, name).write.mode("overwrite")
                writer.partitionBy(*partitions).parquet(str(out / name))
            if on_written is not None:
                on_written(name)

        return run

    def collect(name: str) -> Callable[[], pa.Table]:
        def run() -> pa.Table:
            # The per-topic and per-publisher tables are small and the overview needs them
            # on the driver anyway: collected once, as Arrow, and written here. That is one
            # Spark job each instead of a write (with a shuffle to one partition) and a read.
            with profile.part(name):
                table = getattr(tables, name).toArrow()
                _write_small(table, out / name)
            if on_collected is not None:
                on_collected(name, table)
            if on_written is not None:
                on_written(name)
            return table

        return run

    # The jobs run at once: each has stages narrower than the cores (a final aggregation
    # over a few partitions), and a cold driver plans one while another computes.
    # publisher_health, the longest, first.
    with ThreadPoolExecutor(5, thread_name_prefix="emailmw-table") as pool:
        small = {name: pool.submit(collect(name)) for name in ("publisher_health", "topic_stats")}
        large = [
            pool.submit(write("messages", "topic", "day")),
            pool.submit(write("service_calls")),
            pool.submit(write("rejects")),
        ]
        collected = {name: future.result() for name, future in small.items()}
        for future in large:
            future.result()

    # the overview reads the written tables, not their plans again (a second scan of the
    # landed mail, its deduplication and the calls' join)
    def written(name: str) -> DataFrame:
        frame: DataFrame = getattr(tables, name)
        return spark.read.schema(frame.schema).parquet(str(out / name))

    read = {name: written(name) for name in ("messages", "rejects", "service_calls")}
    with profile.part("overview"):
        return overview(replace(tables, **read), collected=collected)


class Profile:
    """Where a run's Spark time goes, part by part (a table written, the overview, the
    report's series): the part's wall seconds and the Spark jobs, stages and tasks it ran,
    read from Spark's status tracker through a job group per part. Parts may run at once
    (the tables do), so their seconds overlap. Thread-safe: each part is timed on the
    thread that runs it (PySpark pins a job group to its Python thread)."""

    def __init__(self, spark: SparkSession) -> None:
        self._context = spark.sparkContext
        self._run = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        self._context.setJobGroup(f"emailmw-{self._run}-{name}", name)
        started = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - started
            with self._lock:
                self._seconds[name] = self._seconds.get(name, 0.0) + took
            self._context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    def figures(self) -> dict[str, dict[str, float]]:
        """Each part's ``seconds``, ``jobs``, ``stages`` and ``tasks``, in the order run."""
        tracker = self._context.statusTracker()
        result: dict[str, dict[str, float]] = {}
        with self._lock:
            seconds = dict(self._seconds)
        for name, took in seconds.items():
            jobs = tracker.getJobIdsForGroup(f"emailmw-{self._run}-{name}")
            stages: set[int] = set()
            for job in jobs:
                info = tracker.getJobInfo(job)
                if info is not None:
                    stages.update(info.stageIds)
            tasks = 0
            for stage in stages:
                found = tracker.getStageInfo(stage)
                tasks += found.numTasks if found is not None else 0
            result[name] = {"seconds": round(took, 3), "jobs": len(jobs),
                            "stages": len(stages), "tasks": tasks}  # fmt: skip
        return result
