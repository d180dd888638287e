"""The Spark job: landed rows -> the ``messages``, ``topic_stats``, ``service_calls``,
``publisher_health`` and ``rejects`` tables (Parquet).

Only native Spark SQL on typed columns: no Python UDF, nothing but small result tables ever
reaches the driver, and the same code runs on ``local[*]`` or any cluster master (the output
directory must then be on storage every executor sees).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from .jvm import driver_java_options
from .landing import LANDING_SCHEMA, MESSAGES_SCHEMA, REJECTS_COLUMNS, Tally

__all__ = [
    "CDF_POINTS",
    "RTT_BINS",
    "JobOptions",
    "Overview",
    "Tables",
    "build_session",
    "compute",
    "overview",
    "run_job",
    "write_landed",
]

_SPARK_TYPES = {"string": "string", "int64": "bigint", "double": "double", "date32[day]": "date"}
# below this many messages the driver JIT-compiles with C1 only (see jvm.py)
SHORT_JOB_MESSAGES = 500_000
# latency_cdf_ms[i] is the (i + 1)th percentile: [49] is p50, [89] p90, [98] p99
CDF_POINTS = [i / 100 for i in range(1, 101)]
# the report's round-trip histogram: this many equal bins from each service's fastest
# answered call to its slowest
RTT_BINS = 40


def _ddl(fields: Iterable[pa.Field]) -> str:
    """A Spark schema string for Arrow fields."""
    return ", ".join(f"{f.name} {_SPARK_TYPES[str(f.type)]}" for f in fields)


LANDING_DDL = _ddl(LANDING_SCHEMA)
MESSAGES_DDL = _ddl(MESSAGES_SCHEMA)
REJECTS_DDL = _ddl(LANDING_SCHEMA.field(name) for name in REJECTS_COLUMNS)
AGGREGATES = ("topic_stats", "service_calls", "publisher_health")


@dataclass(frozen=True)
class JobOptions:
    since_ns: int | None = None
    until_ns: int | None = None
    topic_glob: str | None = None


@dataclass
class Tables:
    messages: DataFrame
    topic_stats: DataFrame
    service_calls: DataFrame
    publisher_health: DataFrame
    rejects: DataFrame


def build_session(
    master: str, conf: dict[str, str], *, expected_messages: int | None = None
) -> SparkSession:
    """A session set up for this job: UI off, few shuffle partitions, UTC; ``conf`` wins.

    ``expected_messages`` (a rough count) picks the driver's JIT set-up, see ``jvm.py``.
    """
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "4g",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.files.maxPartitionBytes": str(64 << 20),
        "spark.sql.parquet.compression.codec": "zstd",
        "spark.sql.maxConcurrentOutputFileWriters": "64",
    }
    settings.update(conf)
    java_options = driver_java_options(
        settings.get("spark.driver.extraJavaOptions"),
        short_job=expected_messages is None or expected_messages < SHORT_JOB_MESSAGES,
    )
    if java_options:
        settings["spark.driver.extraJavaOptions"] = java_options
    builder = SparkSession.builder.master(master).appName("emailmw analyze")
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def _ms(delta: Column) -> Column:
    return delta.cast("double") / F.lit(1e6)


def compute(
    spark: SparkSession, landing_dirs: Iterable[Path], options: JobOptions, *, deduplicate: bool
) -> Tables:
    """Every table from landed parts, as DataFrames (nothing runs until they are used)."""
    messages, rejects = _from_landed(spark, landing_dirs, options, deduplicate=deduplicate)
    return Tables(messages, *aggregate(messages), rejects)


def _from_landed(
    spark: SparkSession, landing_dirs: Iterable[Path], options: JobOptions, *, deduplicate: bool
) -> tuple[DataFrame, DataFrame]:
    # the landing schema is known: no inference job over the parts
    landed = spark.read.schema(LANDING_DDL).parquet(*[str(d) for d in landing_dirs])
    if deduplicate:  # merged runs may hold the same stored email twice
        landed = landed.dropDuplicates(["source", "mailbox", "key"])
    if options.since_ns is not None:
        landed = landed.filter(F.col("delivered_ns") >= options.since_ns)
    if options.until_ns is not None:
        landed = landed.filter(F.col("delivered_ns") < options.until_ns)
    ok = landed.filter(F.col("status") == "ok")
    if options.topic_glob:  # anchored: a glob matches the whole topic
        ok = ok.filter(F.col("topic").rlike("^" + fnmatch.translate(options.topic_glob)))

    messages = ok.select(
        "kind",
        "topic",
        "message_id",
        "in_reply_to",
        "publisher_gid",
        "publisher_seq",
        "client_gid",
        "request_seq",
        "source_ns",
        "delivered_ns",
        _ms(F.col("delivered_ns") - F.col("source_ns")).alias("latency_ms"),
        "size",
        "from_addr",
        "to_addr",
        "mailbox",
        "source",
        "key",
        F.to_date(F.timestamp_micros((F.col("delivered_ns") / 1000).cast("long"))).alias("day"),
    )

    rejects = landed.filter(F.col("status") != "ok").select(*REJECTS_COLUMNS)
    return messages, rejects


def aggregate(messages: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame]:
    """``topic_stats``, ``service_calls`` and ``publisher_health`` of a ``messages`` table."""
    publishes = messages.filter(F.col("kind") == "publish")
    minute_rates = publishes.groupBy(
        "topic", (F.col("delivered_ns") / F.lit(60_000_000_000)).cast("long").alias("minute")
    ).agg(F.count(F.lit(1)).alias("messages"))
    series = minute_rates.groupBy("topic").agg(
        F.sort_array(F.collect_list(F.struct("minute", "messages"))).alias("per_minute")
    )
    stats = publishes.groupBy("topic").agg(
        F.count(F.lit(1)).alias("messages"),
        F.sum("size").alias("bytes"),
        F.min("delivered_ns").alias("first_ns"),
        F.max("delivered_ns").alias("last_ns"),
        # exact, and as cheap for 100 points as for 3: the report's CDF comes from here
        F.percentile("latency_ms", CDF_POINTS).alias("cdf"),
        F.max("latency_ms").alias("latency_max_ms"),
    )
    span_s = (F.col("last_ns") - F.col("first_ns")).cast("double") / F.lit(1e9)
    topic_stats = stats.join(series, "topic", "left").select(
        "topic",
        "messages",
        "bytes",
        F.timestamp_micros((F.col("first_ns") / 1000).cast("long")).alias("first"),
        F.timestamp_micros((F.col("last_ns") / 1000).cast("long")).alias("last"),
        F.when(span_s > 0, F.col("messages") / span_s).alias("mean_rate_per_s"),
        F.col("cdf")[49].alias("latency_p50_ms"),
        F.col("cdf")[89].alias("latency_p90_ms"),
        F.col("cdf")[98].alias("latency_p99_ms"),
        "latency_max_ms",
        "per_minute",
        F.col("cdf").alias("latency_cdf_ms"),
    )

    requests = (
        messages.filter(F.col("kind") == "request")
        .groupBy("message_id")
        .agg(
            F.first("topic").alias("service"),
            F.first("client_gid").alias("client_gid"),
            F.first("request_seq").alias("request_seq"),
            F.min("source_ns").alias("sent_ns"),
            F.min("delivered_ns").alias("request_delivered_ns"),
        )
    )
    responses = (
        messages.filter(F.col("kind") == "response")
        .groupBy("in_reply_to")
        .agg(
            F.count(F.lit(1)).alias("responses"),
            F.min("delivered_ns").alias("response_delivered_ns"),
        )
    )
    service_calls = requests.join(
        responses, requests["message_id"] == responses["in_reply_to"], "left"
    ).select(
        "service",
        "message_id",
        "client_gid",
        "request_seq",
        "sent_ns",
        "request_delivered_ns",
        "response_delivered_ns",
        F.coalesce(F.col("responses"), F.lit(0)).alias("responses"),
        F.col("responses").isNotNull().alias("answered"),
        F.greatest(F.coalesce(F.col("responses"), F.lit(0)) - 1, F.lit(0)).alias("duplicates"),
        _ms(F.col("response_delivered_ns") - F.col("sent_ns")).alias("round_trip_ms"),
    )

    ordered = (
        Window.partitionBy("publisher_gid", "topic", "mailbox")
        .orderBy("delivered_ns", "key")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    sequenced = publishes.filter(F.col("publisher_seq").isNotNull()).withColumn(
        "late", (F.col("publisher_seq") < F.max("publisher_seq").over(ordered)).cast("int")
    )
    # copies per sequence number first, then per stream: the second grouping needs no new
    # exchange (the window's partitioning serves both), and no countDistinct's Expand
    # (at 2M messages 3.3 s against 4.4 s, warm)
    per_seq = sequenced.groupBy("publisher_gid", "topic", "mailbox", "publisher_seq").agg(
        F.count(F.lit(1)).alias("copies"), F.sum("late").alias("late")
    )
    publisher_health = (
        per_seq.groupBy("publisher_gid", "topic", "mailbox")
        .agg(
            (F.max("publisher_seq") + 1).alias("sent"),
            F.count(F.lit(1)).alias("received"),
            F.sum("copies").alias("copies"),
            F.coalesce(F.sum("late"), F.lit(0)).alias("out_of_order"),
        )
        .select(
            "publisher_gid",
            "topic",
            "mailbox",
            "sent",
            "received",
            (F.col("sent") - F.col("received")).alias("lost"),
            (F.col("copies") - F.col("received")).alias("duplicated"),
            "out_of_order",
        )
    )
    return topic_stats, service_calls, publisher_health


def write_landed(
    spark: SparkSession,
    landing_dirs: Iterable[Path],
    out: Path,
    options: JobOptions,
    *,
    deduplicate: bool,
) -> None:
    """Write ``messages`` and ``rejects`` from landed parts with Spark: the path for merged
    runs, whose landed data may hold the same email twice. (A plain run's landing writes
    them itself, see :class:`~emailmw._pipeline.landing.TableSink`.)"""
    messages, rejects = _from_landed(spark, landing_dirs, options, deduplicate=deduplicate)
    # Neither shuffled nor sorted: each task keeps a writer open per topic-day it meets
    # (spark.sql.maxConcurrentOutputFileWriters; past that many it falls back to sorting),
    # so a part per input split and topic-day, and no exchange of the whole archive.
    messages.write.mode("overwrite").partitionBy("topic", "day").parquet(str(out / "messages"))
    rejects.write.mode("overwrite").parquet(str(out / "rejects"))


@dataclass
class Overview:
    """The small results the summary and the report are made of (already on the driver)."""

    topic_stats: list[dict[str, Any]]
    publisher_health: list[dict[str, Any]]
    services: list[dict[str, Any]]
    rejects: list[dict[str, Any]]
    kinds: dict[str, int]
    # per service and non-empty bin: service, bin, low_ms, high_ms, calls (every answered call)
    round_trips: list[dict[str, Any]]

    def summary(self) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        for reject in self.rejects:
            by_status[reject["status"]] = by_status.get(reject["status"], 0) + reject["emails"]
        health = self.publisher_health
        return {
            "publish": self.kinds.get("publish", 0),
            "request": self.kinds.get("request", 0),
            "response": self.kinds.get("response", 0),
            "foreign": by_status.get("foreign", 0),
            "malformed": by_status.get("malformed", 0),
            "calls": sum(s["calls"] for s in self.services),
            "answered": sum(s["answered"] for s in self.services),
            "duplicate_responses": sum(s["duplicate_responses"] for s in self.services),
            "lost": sum(h["lost"] for h in health),
            "duplicated": sum(h["duplicated"] for h in health),
            "out_of_order": sum(h["out_of_order"] for h in health),
            "publishers": len(health),
        }


def overview(tables: Tables, tally: Tally | None = None) -> Overview:
    """Collect the per-topic, per-publisher, per-service and per-reason rows (small: they
    grow with topics, publishers and services, never with messages) and the kind counts.

    ``tally``, the landing's count of what it wrote (see ``TableSink``), stands in for the
    jobs that count kinds and reject reasons."""

    def rows(frame: DataFrame) -> list[dict[str, Any]]:
        return [r.asDict() for r in frame.collect()]

    services = tables.service_calls.groupBy("service").agg(
        F.count(F.lit(1)).alias("calls"),
        F.coalesce(F.sum(F.col("answered").cast("int")), F.lit(0)).alias("answered"),
        F.coalesce(F.sum("duplicates"), F.lit(0)).alias("duplicate_responses"),
        F.percentile("round_trip_ms", 0.5).alias("round_trip_p50_ms"),
        F.max("round_trip_ms").alias("round_trip_max_ms"),
        F.min("round_trip_ms").alias("round_trip_min_ms"),
    )
    service_rows = rows(services.orderBy("service"))
    if tally is None:
        grouped = tables.rejects.groupBy("status", "reason").agg(F.count(F.lit(1)).alias("emails"))
        rejects = rows(grouped.orderBy(F.desc("emails"), "status", "reason"))
        kinds = tables.messages.groupBy("kind").agg(F.count(F.lit(1)).alias("n"))
        kind_counts = {r["kind"]: r["n"] for r in kinds.collect()}
    else:
        rejects = [
            {"status": key[1], "reason": key[2], "emails": n}
            for key, n in tally.items()
            if key[0] == "reject"
        ]
        # Spark's order: most emails first, then status and reason, nulls first
        rejects.sort(
            key=lambda r: (-r["emails"], r["status"], r["reason"] is not None, r["reason"] or "")
        )
        kind_counts = {key[1]: n for key, n in tally.items() if key[0] == "kind"}
    return Overview(
        round_trips=_round_trip_histogram(tables.service_calls, service_rows),
        topic_stats=rows(tables.topic_stats.orderBy("topic")),
        publisher_health=rows(
            tables.publisher_health.orderBy(F.desc("lost"), F.desc("duplicated"), "publisher_gid")
        ),
        services=service_rows,
        rejects=rejects,
        kinds=kind_counts,
    )


def _round_trip_histogram(
    service_calls: DataFrame, services: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every answered call's round trip, counted in ``RTT_BINS`` equal bins per service,
    from its fastest to its slowest call (one bin when they are equal). ``services`` are
    the overview's rows, which carry those bounds; no answered call, no job."""
    ranges = {
        s["service"] or "": (s["round_trip_min_ms"], s["round_trip_max_ms"])
        for s in services
        if s["round_trip_max_ms"] is not None
    }
    if not ranges:
        return []

    def lookup(position: int) -> Column:
        pairs = [F.lit(v) for k, bounds in ranges.items() for v in (k, bounds[position])]
        return F.create_map(*pairs)[F.coalesce(F.col("service"), F.lit(""))]

    low, high = lookup(0), lookup(1)
    index = F.when(
        high > low,
        F.least(
            F.floor((F.col("round_trip_ms") - low) / ((high - low) / F.lit(RTT_BINS))).cast("int"),
            F.lit(RTT_BINS - 1),
        ),
    ).otherwise(F.lit(0))
    counted = (
        service_calls.filter(F.col("round_trip_ms").isNotNull())
        .groupBy("service", index.alias("bin"))
        .agg(F.count(F.lit(1)).alias("calls"))
        .collect()
    )
    histogram = []
    for row in sorted(counted, key=lambda r: (r["service"] or "", r["bin"])):
        lo, hi = ranges[row["service"] or ""]
        width = (hi - lo) / RTT_BINS
        histogram.append(
            {
                "service": row["service"],
                "bin": row["bin"],
                "low_ms": lo + row["bin"] * width,
                "high_ms": lo + (row["bin"] + 1) * width if hi > lo else hi,
                "calls": row["calls"],
            }
        )
    return histogram


def run_job(spark: SparkSession, out: Path, tally: Tally | None = None) -> tuple[Tables, Overview]:
    """The aggregates of ``out/messages`` (written by the landing or :func:`write_landed`),
    written next to it; returns every table as read back from ``out`` and the overview
    (``tally``: see :func:`overview`)."""

    # with the schema: no inference, and an empty table has no files
    def read(name: str, schema: str | StructType) -> DataFrame:
        return spark.read.schema(schema).parquet(str(out / name))

    messages = read("messages", MESSAGES_DDL)
    computed = dict(zip(AGGREGATES, aggregate(messages), strict=True))
    for name, frame in computed.items():
        frame.coalesce(1).write.mode("overwrite").parquet(str(out / name))
    back = {name: read(name, frame.schema) for name, frame in computed.items()}
    written = Tables(
        messages,
        back["topic_stats"],
        back["service_calls"],
        back["publisher_health"],
        read("rejects", REJECTS_DDL),
    )
    return written, overview(written, tally)
