"""The Spark job: archives -> landed rows -> the ``messages``, ``topic_stats``,
``service_calls``, ``publisher_health`` and ``rejects`` tables (Parquet).

Spark does the work, the same code on ``local[*]`` or any cluster master (the archives and
the output directory must then be on storage every executor sees):

* :func:`land`: the driver lists the archives into units of work and the executors parse
  them with emailmw's wire parser (``mapInArrow``, Arrow batches, no per-row Python); Spark
  writes the landed rows under ``_landing/src=<digest>/``.
* :func:`compute`: every table as SQL over the landed rows; this module is each table's
  one definition, used by a plain run, a merge of earlier runs and the tests alike.
* :func:`run_job`: writes the tables and collects the small results of the report.

Nothing but small result tables (they grow with topics, publishers and services, never with
messages) ever reaches the driver.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, cast

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from .._exceptions import ConfigError
from .jvm import driver_java_options, executor_java_options
from .landing import (
    INTERNAL_TOPIC_PREFIX,
    LANDED_SCHEMA,
    LANDING_SCHEMA,
    LATENCY_RESOLUTION_NS,
    QUARANTINE_SQL,
    REJECTS_COLUMNS,
    Source,
    land_units,
)

__all__ = [
    "CDF_POINTS",
    "RTT_BINS",
    "JobOptions",
    "Overview",
    "Tables",
    "build_session",
    "compute",
    "health_rows",
    "land",
    "overview",
    "require_executors",
    "run_job",
    "topic_rows",
]

_SPARK_TYPES = {"string": "string", "int64": "bigint"}
# below this many messages (the rough count made before landing) the JVMs JIT-compile with
# C1 only (see jvm.py). Measured on two cores: 200k Maildir messages 15-16 s with C1, 19 s
# tiered; 2M mbox messages (counted as 2.4M) 44 s with C1, 35 s tiered, where C2 pays off
# in the Parquet writers and publisher_health's window sort.
SHORT_JOB_MESSAGES = 1_000_000
# latency_cdf_ms[i] is the (i + 1)th percentile: [49] is p50, [89] p90, [98] p99
CDF_POINTS = [i / 100 for i in range(1, 101)]
# the same points as a literal of topic_stats' SQL (repr round-trips each double): as a
# query argument, each element would be its own py4j call
_CDF_ARRAY: Final = "array(" + ", ".join(f"{point!r}D" for point in CDF_POINTS) + ")"
# the report's round-trip histogram: this many equal bins from each service's fastest
# answered call to its slowest
RTT_BINS = 40


def _ddl(fields: Iterable[pa.Field]) -> str:
    """A Spark schema string for Arrow fields."""
    return ", ".join(f"{f.name} {_SPARK_TYPES[str(f.type)]}" for f in fields)


LANDING_DDL = _ddl(LANDING_SCHEMA)
LANDED_DDL = _ddl(LANDED_SCHEMA)


@dataclass(frozen=True)
class JobOptions:
    since_ns: int | None = None
    until_ns: int | None = None
    topic_glob: str | None = None
    include_internal: bool = False

    @property
    def windowed(self) -> bool:
        """The run reads a time window (``--since``/``--until``), not all the mail."""
        return self.since_ns is not None or self.until_ns is not None


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
    java_options = driver_java_options(
        settings.get("spark.driver.extraJavaOptions"), short_job=short_job
    )
    if java_options:
        settings["spark.driver.extraJavaOptions"] = java_options
    if not master.startswith("local"):
        executor_options = executor_java_options(
            settings.get("spark.executor.extraJavaOptions"), short_job=short_job
        )
        if executor_options:
            settings["spark.executor.extraJavaOptions"] = executor_options
    builder = SparkSession.builder.master(master).appName("emailmw analyze")
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
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


# ----------------------------------------------------------------------------- landing


def land(
    spark: SparkSession,
    sources: list[Source],
    units: pa.Table,
    landing: Path,
    *,
    keystore: str | None = None,
) -> list[Path]:
    """Land ``units`` (:func:`~emailmw._pipeline.landing.list_units` of ``sources``) with
    Spark: each unit a task, parsed on an executor, its rows written by Spark under
    ``landing/src=<digest>/`` (an earlier landing of the same source replaced). Returns
    those directories, one per source, in order (a source with no mail gets an empty one).
    With a ``keystore``, signed mail is verified against its trusted keys (the
    ``security`` column); it must be readable where the executors run."""
    unique: dict[str, Source] = {}  # a source named twice lands once
    for source in sources:
        unique.setdefault(source.digest, source)
    dirs = [landing / f"src={digest}" for digest in unique]
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)
    if units.num_rows:
        # one partition per unit: the units are spread over the executors as they free up
        frame = spark.createDataFrame(units).repartition(units.num_rows)
        landed = frame.mapInArrow(functools.partial(land_units, keystore=keystore), LANDED_DDL)
        landed.write.mode("append").partitionBy("src").parquet(str(landing))
    for directory in dirs:
        directory.mkdir(parents=True, exist_ok=True)
    return dirs


# ----------------------------------------------------------------------------- tables

# The columns of ``messages`` as SQL expressions over the landed rows: a few py4j calls for
# all of them, where Column objects would take one or more each.
_MESSAGE_COLUMNS: Final = (
    "kind",
    "nullif(topic, '') AS topic",  # as the table reads it back: an empty topic is null
    "message_id",
    "in_reply_to",
    "publisher_gid",
    "publisher_seq",
    "client_gid",
    "request_seq",
    "source_ns",
    "delivered_ns",
    "delivered_res_ns",
    f"IF(delivered_res_ns <= {LATENCY_RESOLUTION_NS}, "
    "CAST(delivered_ns - source_ns AS DOUBLE) / 1.0E6D, NULL) AS latency_ms",
    "size",
    "from_addr",
    "to_addr",
    "security",
    "mailbox",
    "source",
    "key",
    "to_date(timestamp_micros(CAST(delivered_ns / 1000 AS BIGINT))) AS day",
)


def compute(
    spark: SparkSession, landing_dirs: Iterable[Path], options: JobOptions, *, deduplicate: bool
) -> Tables:
    """Every table of landed rows, as DataFrames (nothing runs until they are used); with
    ``deduplicate``, an email landed twice (merged runs) counts once."""
    landed = _landed(spark, landing_dirs, options, deduplicate=deduplicate)
    rows = _messages(landed, options)
    return Tables(
        rows.drop("offset"),
        _topic_stats(rows),
        _service_calls(rows),
        _publisher_health(rows, windowed=options.windowed),
        _rejects(landed),
    )


def _landed(
    spark: SparkSession, landing_dirs: Iterable[Path], options: JobOptions, *, deduplicate: bool
) -> DataFrame:
    """The landed rows within the run's time window."""
    # the landing schema is known: no inference job over the parts
    landed = spark.read.schema(LANDING_DDL).parquet(*[str(d) for d in landing_dirs])
    if deduplicate:  # merged runs may hold the same stored email twice
        landed = landed.dropDuplicates(["source", "mailbox", "key"])
    if options.since_ns is not None:
        landed = landed.filter(f"delivered_ns >= {int(options.since_ns)}")
    if options.until_ns is not None:
        landed = landed.filter(f"delivered_ns < {int(options.until_ns)}")
    return landed


def _messages(landed: DataFrame, options: JobOptions) -> DataFrame:
    """The ``messages`` rows of ``landed`` (emailmw's mail, of the run's topics), with the
    landing's ``offset`` (not a column of the table), by which ``publisher_health`` orders
    mbox messages delivered at the same instant."""
    ok = landed.filter("status = 'ok'")
    if options.topic_glob:  # anchored: a glob matches the whole topic
        ok = ok.filter(F.col("topic").rlike("^" + fnmatch.translate(options.topic_glob)))
    if not options.include_internal:  # emailmw's own topics stay out unless asked for
        ok = ok.filter(f"topic IS NULL OR NOT startswith(topic, '{INTERNAL_TOPIC_PREFIX}')")
    return ok.selectExpr(*_MESSAGE_COLUMNS, "offset")


def _rejects(landed: DataFrame) -> DataFrame:
    """The ``rejects`` rows of ``landed``: foreign and malformed mail."""
    return landed.filter("status != 'ok'").selectExpr(*REJECTS_COLUMNS)


# The aggregates as SQL text: a few py4j calls and one analysis per table (built with the
# DataFrame API, every function and literal is its own py4j round trip). The CDF's points
# are part of the text (CDF_ARRAY).
_TOPIC_STATS_SQL = """
WITH publishes AS (SELECT * FROM {messages} WHERE kind = 'publish'),
minute_rates AS (
  SELECT topic, CAST(delivered_ns / 60000000000 AS BIGINT) AS minute, count(1) AS messages
  FROM publishes GROUP BY topic, CAST(delivered_ns / 60000000000 AS BIGINT)),
series AS (
  SELECT topic, sort_array(collect_list(struct(minute, messages))) AS per_minute
  FROM minute_rates GROUP BY topic),
unmeasured AS (
  SELECT *,
    IF(latency_ms IS NULL, CAST(delivered_ns - source_ns AS DOUBLE) / 1.0E6D, NULL)
      AS latency_low_ms,
    IF(latency_ms IS NULL, delivered_res_ns, NULL) AS unmeasured_res_ns
  FROM publishes),
stats AS (
  SELECT topic, count(1) AS messages, sum(size) AS bytes, min(delivered_ns) AS first_ns,
    max(delivered_ns) AS last_ns,
    -- exact, and as cheap for 100 points as for 3: the report's CDF comes from here; only
    -- rows whose delivery time is fine enough have a latency_ms (the others are null)
    percentile(latency_ms, CDF_ARRAY) AS cdf,
    max(latency_ms) AS latency_max_ms, count(latency_ms) AS latency_measured,
    -- the others' latency lies in [low, low + resolution] with resolution <= R, the
    -- largest among them: their median in [median(low), median(low) + R]
    percentile(latency_low_ms, 0.5D) AS latency_p50_low_ms,
    max(unmeasured_res_ns) AS unmeasured_res_ns
  FROM unmeasured GROUP BY topic)
SELECT topic, messages, bytes,
  timestamp_micros(CAST(first_ns / 1000 AS BIGINT)) AS first,
  timestamp_micros(CAST(last_ns / 1000 AS BIGINT)) AS last,
  CASE WHEN CAST(last_ns - first_ns AS DOUBLE) / 1.0E9D > 0
    THEN messages / (CAST(last_ns - first_ns AS DOUBLE) / 1.0E9D) END AS mean_rate_per_s,
  cdf[49] AS latency_p50_ms, cdf[89] AS latency_p90_ms, cdf[98] AS latency_p99_ms,
  latency_max_ms, latency_measured, latency_p50_low_ms,
  latency_p50_low_ms + CAST(unmeasured_res_ns AS DOUBLE) / 1.0E6D AS latency_p50_high_ms,
  per_minute, cdf AS latency_cdf_ms
FROM stats LEFT JOIN series USING (topic)
""".replace("CDF_ARRAY", _CDF_ARRAY)

_SERVICE_CALLS_SQL = """
WITH requests AS (
  SELECT message_id, first(topic) AS service, first(client_gid) AS client_gid,
    first(request_seq) AS request_seq, min(source_ns) AS sent_ns,
    min(delivered_ns) AS request_delivered_ns
  FROM {messages} WHERE kind = 'request' GROUP BY message_id),
responses AS (
  SELECT in_reply_to, count(1) AS responses,
    min_by(struct(delivered_ns, delivered_res_ns), delivered_ns) AS first_response
  FROM {messages} WHERE kind = 'response' GROUP BY in_reply_to)
SELECT service, message_id, client_gid, request_seq, sent_ns, request_delivered_ns,
  first_response.delivered_ns AS response_delivered_ns,
  first_response.delivered_res_ns AS response_delivered_res_ns,
  coalesce(responses, 0) AS responses,
  responses IS NOT NULL AS answered,
  greatest(coalesce(responses, 0) - 1, 0) AS duplicates,
  IF(first_response.delivered_res_ns <= RESOLUTION,
    CAST(first_response.delivered_ns - sent_ns AS DOUBLE) / 1.0E6D, NULL) AS round_trip_ms
FROM requests LEFT JOIN responses ON requests.message_id = responses.in_reply_to
""".replace("RESOLUTION", str(LATENCY_RESOLUTION_NS))

# Arrival order within a stream: delivery time, then the message's place in its archive: an
# mbox message's offset (landed as a number; parts landed by earlier versions lack it, and
# their key, the offset written as 16 digits, is read as that number), else, for a Maildir
# file, its name as text, after the numbered ones. No string needs to go through the
# window's exchange for an mbox.
# (The query's text goes through PySpark's formatter: "{{16}}" reaches Spark as "{16}".)
_KEY_NUMBER = "coalesce(offset, IF(key RLIKE '^[0-9]{{16}}$', CAST(key AS BIGINT), NULL))"

# late: a sequence number below one that arrived earlier in its stream. Copies are counted
# per sequence number first, then per stream: the second grouping needs no new exchange (the
# window's partitioning serves both), and no countDistinct's Expand (at 2M messages 3.3 s
# against 4.4 s, warm). A stream was sent every sequence number from 0 to the highest
# received; in a ``:windowed`` run (--since/--until), from the lowest received in the
# window: what was sent before the window is not lost, so only gaps inside the window's
# sequence range count.
#
# A delivery-mode group's folders (its members' claims and done folders,
# docs/delivery-modes.md) are parts of one stream: each message processed once by one member.
# They count as one mailbox, ``<account>/.emailmw-<group>`` (a message in two done folders
# is a duplicate, one in none is lost).
_GROUP_STREAM = (
    "regexp_replace(mailbox, '(^|[./])emailmw-([A-Za-z0-9_]{{1,40}})-(done|claims)-"
    "[0-9a-f]{{8}}([.]mbox)?$', '$1emailmw-$2')"  # ({{}}: the SQL is a format template)
)
_PUBLISHER_HEALTH_SQL = """
WITH arrivals AS (
  SELECT publisher_gid, topic, GROUP_STREAM AS mailbox, publisher_seq, delivered_ns,
    KEY_NUMBER AS key_number, IF(KEY_NUMBER IS NULL, key, NULL) AS key_text
  FROM {messages} WHERE kind = 'publish' AND publisher_seq IS NOT NULL),
sequenced AS (
  SELECT publisher_gid, topic, mailbox, publisher_seq,
    CAST(publisher_seq < max(publisher_seq) OVER (
      PARTITION BY publisher_gid, topic, mailbox
      ORDER BY delivered_ns, key_number NULLS LAST, key_text
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS INT) AS late
  FROM arrivals),
per_seq AS (
  SELECT publisher_gid, topic, mailbox, publisher_seq, count(1) AS copies, sum(late) AS late
  FROM sequenced GROUP BY publisher_gid, topic, mailbox, publisher_seq),
streams AS (
  SELECT publisher_gid, topic, mailbox,
    max(publisher_seq) + 1 - IF(:windowed, min(publisher_seq), 0) AS sent,
    count(1) AS received,
    sum(copies) AS copies, coalesce(sum(late), 0) AS out_of_order
  FROM per_seq GROUP BY publisher_gid, topic, mailbox)
SELECT publisher_gid, topic, mailbox, sent, received, sent - received AS lost,
  copies - received AS duplicated, out_of_order
FROM streams
""".replace("KEY_NUMBER", _KEY_NUMBER).replace("GROUP_STREAM", _GROUP_STREAM)


def _topic_stats(messages: DataFrame) -> DataFrame:
    return messages.sparkSession.sql(_TOPIC_STATS_SQL, messages=messages)


def _service_calls(messages: DataFrame) -> DataFrame:
    return messages.sparkSession.sql(_SERVICE_CALLS_SQL, messages=messages)


def _publisher_health(messages: DataFrame, *, windowed: bool) -> DataFrame:
    return messages.sparkSession.sql(
        _PUBLISHER_HEALTH_SQL, args={"windowed": windowed}, messages=messages
    )


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
    # emailmw mail by its ``security`` column; plus "replayed" (copies of a signed email
    # beyond its first) and "quarantined" (every stored email in a quarantine folder)
    security: dict[str, int] = field(default_factory=dict)

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
            "latency_measured": sum(t["latency_measured"] for t in self.topic_stats),
            "round_trips_measured": sum(s["round_trip_measured"] for s in self.services),
            "lost": sum(h["lost"] for h in health),
            "duplicated": sum(h["duplicated"] for h in health),
            "out_of_order": sum(h["out_of_order"] for h in health),
            "publishers": len(health),
            **{mark: self.security.get(mark, 0) for mark in SECURITY_MARKS},
        }


def _nulls_first(value: Any) -> tuple[bool, Any]:  # Spark's ascending order
    return value is not None, value


def topic_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``topic_stats`` (as collected) as the overview holds it: rows ordered by topic."""
    rows = cast(list[dict[str, Any]], table.to_pylist())
    return sorted(rows, key=lambda r: _nulls_first(r["topic"]))


def health_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``publisher_health`` (as collected) as the overview holds it: the most lost first,
    then the most duplicated, then by publisher (the order of the SQL this replaced)."""
    rows = cast(list[dict[str, Any]], table.to_pylist())
    return sorted(
        rows, key=lambda r: (-r["lost"], -r["duplicated"], _nulls_first(r["publisher_gid"]))
    )


# The overview's counts in one job: emailmw mail by kind and security mark, rejects by status
# and reason, and both by whether they lie in a quarantine folder (a test of each mailbox's
# name, made once per mailbox rather than per message).
_COUNTS_SQL = """
SELECT status, reason, kind, security, QUARANTINE AS quarantined, sum(n) AS n FROM (
  SELECT 'ok' AS status, CAST(NULL AS STRING) AS reason, kind, security, mailbox,
    count(1) AS n
  FROM {messages} GROUP BY ALL
  UNION ALL
  SELECT status, reason, CAST(NULL AS STRING), CAST(NULL AS STRING), mailbox, count(1)
  FROM {rejects} GROUP BY ALL)
GROUP BY ALL
""".replace("QUARANTINE", QUARANTINE_SQL)


def _counts(tables: Tables) -> list[Row]:
    """The rows of :data:`_COUNTS_SQL` for ``tables``."""
    spark = tables.messages.sparkSession
    return spark.sql(_COUNTS_SQL, messages=tables.messages, rejects=tables.rejects).collect()


_SERVICES_SQL = """
SELECT *, round_trip_p50_low_ms + CAST(unmeasured_res_ns AS DOUBLE) / 1.0E6D
  AS round_trip_p50_high_ms
FROM (
  SELECT service, count(1) AS calls,
    coalesce(sum(CAST(answered AS INT)), 0) AS answered,
    coalesce(sum(duplicates), 0) AS duplicate_responses,
    percentile(round_trip_ms, 0.5D) AS round_trip_p50_ms,
    max(round_trip_ms) AS round_trip_max_ms,
    min(round_trip_ms) AS round_trip_min_ms,
    count(round_trip_ms) AS round_trip_measured,
    -- the bounds of the unmeasurable round trips' median, as topic_stats' of latency
    percentile(IF(round_trip_ms IS NULL,
      CAST(response_delivered_ns - sent_ns AS DOUBLE) / 1.0E6D, NULL), 0.5D)
      AS round_trip_p50_low_ms,
    max(IF(round_trip_ms IS NULL, response_delivered_res_ns, NULL)) AS unmeasured_res_ns
  FROM {calls} GROUP BY service)
ORDER BY service
"""


def overview(
    tables: Tables,
    *,
    collected: dict[str, pa.Table] | None = None,
    counted: list[Row] | None = None,
) -> Overview:
    """Collect the per-topic, per-publisher, per-service and per-reason rows (small: they
    grow with topics, publishers and services, never with messages) and the counts.
    ``collected`` holds ``topic_stats`` or ``publisher_health`` already on the driver (as
    Arrow), ``counted`` the counts (:func:`_counts`); what they lack is collected here.
    Timestamps are UTC-aware."""
    spark = tables.messages.sparkSession

    def small(name: str) -> pa.Table:
        table = (collected or {}).get(name)
        return getattr(tables, name).toArrow() if table is None else table

    services = [r.asDict() for r in spark.sql(_SERVICES_SQL, calls=tables.service_calls).collect()]
    if counted is None:
        counted = _counts(tables)
    kinds: dict[str, int] = {}
    security: dict[str, int] = {"quarantined": 0}
    reasons: dict[tuple[str, str | None], int] = {}
    for row in counted:
        if row["quarantined"]:
            security["quarantined"] += row["n"]
        if row["status"] != "ok":
            where = (row["status"], row["reason"])
            reasons[where] = reasons.get(where, 0) + row["n"]
            continue
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + row["n"]
        if row["security"]:
            security[row["security"]] = security.get(row["security"], 0) + row["n"]
    # most emails first, then status and reason, nulls first (Spark's ascending order)
    order = sorted(reasons.items(), key=lambda r: (-r[1], r[0][0], r[0][1] is not None, r[0][1]))
    rejects = [{"status": s, "reason": r, "emails": n} for (s, r), n in order]
    if security.get("signed", 0) or security.get("verified", 0):
        signed = tables.messages.filter("security IN ('signed', 'verified')")
        first = signed.agg(
            F.count(F.lit(1)).alias("n"), F.count_distinct("message_id").alias("d")
        ).collect()[0]
        # copies of a signed email beyond its first
        security["replayed"] = int(first["n"]) - int(first["d"])
    return Overview(
        round_trips=_round_trip_histogram(tables.service_calls, services),
        topic_stats=topic_rows(small("topic_stats")),
        publisher_health=health_rows(small("publisher_health")),
        services=services,
        rejects=rejects,
        kinds=kinds,
        security=security,
    )


#: the summary's security counts (docs/security.md): the ``security`` column's values, then
#: replayed and quarantined
SECURITY_MARKS: Final = (
    "verified", "signed", "unsigned", "invalid", "untrusted", "replayed", "quarantined",
)  # fmt: skip


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

    names = list(ranges)
    counted = service_calls.sparkSession.sql(
        """SELECT service, bin, count(1) AS calls FROM (
             SELECT service, CASE WHEN high > low THEN least(
                 CAST(floor((round_trip_ms - low) / ((high - low) / :bins)) AS INT), :last)
               ELSE 0 END AS bin
             FROM (SELECT service, round_trip_ms,
                     map_from_arrays(:names, :lows)[coalesce(service, '')] AS low,
                     map_from_arrays(:names, :highs)[coalesce(service, '')] AS high
                   FROM {calls} WHERE round_trip_ms IS NOT NULL))
           GROUP BY service, bin""",
        args={
            "bins": RTT_BINS,
            "last": RTT_BINS - 1,
            "names": names,
            "lows": [float(ranges[n][0]) for n in names],
            "highs": [float(ranges[n][1]) for n in names],
        },
        calls=service_calls,
    ).collect()
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


def _write_small(table: pa.Table, directory: Path) -> None:
    """A small aggregate as one zstd Parquet file, laid out as Spark lays out a table."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    pq.write_table(table, directory / "part-00000.zstd.parquet", compression="zstd")
    (directory / "_SUCCESS").touch()


def run_job(
    spark: SparkSession,
    out: Path,
    tables: Tables,
    *,
    on_collected: Callable[[str, pa.Table], None] | None = None,
) -> Overview:
    """Write every table of ``tables`` (:func:`compute`) under ``out`` and return the
    overview of them. ``messages`` is partitioned by topic and day.

    ``on_collected(name, table)`` is called, from a worker thread, as soon as
    ``topic_stats`` or ``publisher_health`` is on the driver (written, as Arrow), while the
    other tables may still be computing; an exception it raises fails the job."""

    def write(name: str, *partitions: str) -> Callable[[], None]:
        def run() -> None:
            writer = getattr(tables, name).write.mode("overwrite")
            writer.partitionBy(*partitions).parquet(str(out / name))

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
