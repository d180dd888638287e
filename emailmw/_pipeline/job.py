"""The Spark job of ``emailmw analyze``: every table (``tables.py``, each defined once)
written under the output directory, and the overview (``overview.py``) collected for the
summary and the report. Nothing but small result tables ever reaches the driver."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from .overview import Overview, overview
from .tables import Tables

__all__ = ["TABLES_WRITTEN", "run_job"]


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
) -> Overview:
    """Write every table of ``tables`` (:func:`compute`) under ``out`` and return the
    overview of them. ``messages`` is partitioned by topic and day.

    ``on_collected(name, table)`` is called, from a worker thread, as soon as
    ``topic_stats`` or ``publisher_health`` is on the driver (written, as Arrow), while the
    other tables may still be computing; an exception it raises fails the job.
    ``on_written(name)``: each of the :data:`TABLES_WRITTEN` tables written (progress)."""

    def write(name: str, *partitions: str) -> Callable[[], None]:
        def run() -> None:
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
    # the overview reads the written service_calls, not the join again
    calls = spark.read.schema(tables.service_calls.schema).parquet(str(out / "service_calls"))
    return overview(replace(tables, service_calls=calls), collected=collected)
