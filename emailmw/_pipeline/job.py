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

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from .landing import LANDING_SCHEMA

__all__ = ["JobOptions", "Tables", "build_session", "run_job"]

_SPARK_TYPES = {"string": "string", "int64": "bigint"}
LANDING_DDL = ", ".join(f"{f.name} {_SPARK_TYPES[str(f.type)]}" for f in LANDING_SCHEMA)


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


def build_session(master: str, conf: dict[str, str]) -> SparkSession:
    """A session set up for this job: UI off, few shuffle partitions, UTC; ``conf`` wins."""
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
    }
    settings.update(conf)
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
    # the landing schema is known: no inference job over the parts
    landed = spark.read.schema(LANDING_DDL).parquet(*[str(d) for d in landing_dirs])
    if deduplicate:  # merged runs may hold the same stored email twice
        landed = landed.dropDuplicates(["source", "mailbox", "key"])
    if options.since_ns is not None:
        landed = landed.filter(F.col("delivered_ns") >= options.since_ns)
    if options.until_ns is not None:
        landed = landed.filter(F.col("delivered_ns") < options.until_ns)
    ok = landed.filter(F.col("status") == "ok")
    if options.topic_glob:
        ok = ok.filter(F.col("topic").rlike(fnmatch.translate(options.topic_glob)))

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
    ).persist()

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
        F.percentile("latency_ms", [0.5, 0.9, 0.99]).alias("p"),
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
        F.col("p")[0].alias("latency_p50_ms"),
        F.col("p")[1].alias("latency_p90_ms"),
        F.col("p")[2].alias("latency_p99_ms"),
        "latency_max_ms",
        "per_minute",
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
    publisher_health = (
        sequenced.groupBy("publisher_gid", "topic", "mailbox")
        .agg(
            (F.max("publisher_seq") + 1).alias("sent"),
            F.countDistinct("publisher_seq").alias("received"),
            F.count(F.lit(1)).alias("copies"),
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

    rejects = landed.filter(F.col("status") != "ok").select(
        "source", "mailbox", "key", "status", "reason", "topic", "size"
    )
    return Tables(messages, topic_stats, service_calls, publisher_health, rejects)


def write(tables: Tables, out: Path) -> None:
    (
        tables.messages.repartition("topic", "day")
        .write.mode("overwrite")
        .partitionBy("topic", "day")
        .parquet(str(out / "messages"))
    )
    for name in ("topic_stats", "service_calls", "publisher_health", "rejects"):
        frame: DataFrame = getattr(tables, name)
        frame.coalesce(1).write.mode("overwrite").parquet(str(out / name))


def summary(tables: Tables) -> dict[str, Any]:
    """Small figures for the report and the end-of-run summary (aggregates only)."""
    kinds = {
        r["kind"]: r["n"]
        for r in tables.messages.groupBy("kind").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    rejects = {
        r["status"]: r["n"]
        for r in tables.rejects.groupBy("status").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    calls = tables.service_calls.agg(
        F.count(F.lit(1)).alias("calls"),
        F.coalesce(F.sum(F.col("answered").cast("int")), F.lit(0)).alias("answered"),
        F.coalesce(F.sum("duplicates"), F.lit(0)).alias("duplicate_responses"),
    ).first()
    health = tables.publisher_health.agg(
        F.coalesce(F.sum("lost"), F.lit(0)).alias("lost"),
        F.coalesce(F.sum("duplicated"), F.lit(0)).alias("duplicated"),
        F.coalesce(F.sum("out_of_order"), F.lit(0)).alias("out_of_order"),
        F.count(F.lit(1)).alias("publishers"),
    ).first()
    assert calls is not None
    assert health is not None
    return {
        "publish": kinds.get("publish", 0),
        "request": kinds.get("request", 0),
        "response": kinds.get("response", 0),
        "foreign": rejects.get("foreign", 0),
        "malformed": rejects.get("malformed", 0),
        "calls": calls["calls"],
        "answered": calls["answered"],
        "duplicate_responses": calls["duplicate_responses"],
        "lost": health["lost"],
        "duplicated": health["duplicated"],
        "out_of_order": health["out_of_order"],
        "publishers": health["publishers"],
    }


def run_job(
    spark: SparkSession,
    landing_dirs: list[Path],
    out: Path,
    options: JobOptions,
    *,
    deduplicate: bool,
) -> tuple[Tables, dict[str, Any]]:
    tables = compute(spark, landing_dirs, options, deduplicate=deduplicate)
    write(tables, out)

    # the rest reads the tables just written: small, and no recomputation of the archive
    def read(name: str) -> DataFrame:  # with the schema: an empty table has no files
        frame: DataFrame = getattr(tables, name)
        return spark.read.schema(frame.schema).parquet(str(out / name))

    written = Tables(
        read("messages"),
        read("topic_stats"),
        read("service_calls"),
        read("publisher_health"),
        read("rejects"),
    )
    result = summary(written)
    tables.messages.unpersist()
    return written, result
