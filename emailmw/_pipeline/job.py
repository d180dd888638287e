"""The Spark job: landed rows -> the ``messages``, ``topic_stats``, ``service_calls``,
``publisher_health`` and ``rejects`` tables (Parquet).

Only native Spark SQL on typed columns: no Python UDF, nothing but small result tables ever
reaches the driver, and the same code runs on ``local[*]`` or any cluster master (the output
directory must then be on storage every executor sees).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from .._exceptions import ConfigError
from .jvm import driver_java_options
from .landing import (
    INTERNAL_TOPIC_PREFIX,
    LANDING_SCHEMA,
    LATENCY_RESOLUTION_NS,
    MESSAGES_SCHEMA,
    QUARANTINE_SQL,
    REJECTS_COLUMNS,
    Tally,
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
    "landed_messages",
    "overview",
    "run_job",
    "series_rows",
    "topic_rows",
    "write_landed",
]

_SPARK_TYPES = {"string": "string", "int64": "bigint", "double": "double", "date32[day]": "date"}
# below this many messages (the rough count made before landing) the driver JIT-compiles
# with C1 only (see jvm.py)
SHORT_JOB_MESSAGES = 3_000_000
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
MESSAGES_DDL = _ddl(MESSAGES_SCHEMA)
REJECTS_DDL = _ddl(LANDING_SCHEMA.field(name) for name in REJECTS_COLUMNS)
AGGREGATES = ("topic_stats", "service_calls", "publisher_health")


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


# The columns of ``messages`` as SQL expressions over the landed rows: a few py4j calls for
# all of them, where Column objects would take one or more each.
# The arithmetic is Spark's and the landing's alike (see TableSink._write_messages).
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
    """Every table from landed parts, as DataFrames (nothing runs until they are used)."""
    landed = _landed(spark, landing_dirs, options, deduplicate=deduplicate)
    messages = _messages(landed, options)
    return Tables(messages, *aggregate(messages, windowed=options.windowed), _rejects(landed))


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


def _messages(landed: DataFrame, options: JobOptions, *, offsets: bool = False) -> DataFrame:
    """The ``messages`` rows of ``landed`` (emailmw's mail, of the run's topics)."""
    ok = landed.filter("status = 'ok'")
    if options.topic_glob:  # anchored: a glob matches the whole topic
        ok = ok.filter(F.col("topic").rlike("^" + fnmatch.translate(options.topic_glob)))
    if not options.include_internal:  # landing.wanted_topic's rule
        ok = ok.filter(f"topic IS NULL OR NOT startswith(topic, '{INTERNAL_TOPIC_PREFIX}')")
    return ok.selectExpr(*_MESSAGE_COLUMNS, *(["offset"] if offsets else []))


def _rejects(landed: DataFrame) -> DataFrame:
    """The ``rejects`` rows of ``landed``: foreign and malformed mail."""
    return landed.filter("status != 'ok'").selectExpr(*REJECTS_COLUMNS)


def landed_messages(
    spark: SparkSession, landing_dirs: Iterable[Path], options: JobOptions
) -> DataFrame:
    """A plain run's ``messages`` rows read straight from its landed parts, with the run's
    filters: the rows the landing wrote into the table (a test compares the aggregates of
    both), from one file per landed part instead of one per part and topic-day.

    Spark pays for every file it opens (a Hadoop configuration copied, a footer read,
    column vectors allocated, a task's share of the scheduling), and a part holds many
    topic-days.

    The rows also carry the landing's ``offset`` (the table has no such column), by which
    ``publisher_health`` orders mbox messages delivered at the same instant.
    """
    landed = _landed(spark, landing_dirs, options, deduplicate=False)
    return _messages(landed, options, offsets=True)


# The aggregates as SQL text: a few py4j calls and one analysis per table (built with the
# DataFrame API, every function and literal is its own py4j round trip). The CDF's points
# are part of the text (CDF_ARRAY).
_TOPIC_STATS_SQL = """
WITH publishes AS (SELECT * FROM {messages} WHERE kind = 'publish'),
SERIES_CTES
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
  PER_MINUTE_COLUMN cdf AS latency_cdf_ms
FROM stats SERIES_JOIN
"""
# The per-minute rate series, filled in for SERIES_CTES, PER_MINUTE_COLUMN and SERIES_JOIN.
# A plain run takes the query without them (all three empty): its landing counted the same
# publishes per topic and minute as it wrote them, and :func:`_with_series` puts those
# counts in place as this SQL would (a test compares). That saves a second scan of the
# archive and its aggregation: 1.2 JVM CPU-seconds of a cold 200k-message job.
_SERIES = {
    "SERIES_CTES": """minute_rates AS (
  SELECT topic, CAST(delivered_ns / 60000000000 AS BIGINT) AS minute, count(1) AS messages
  FROM publishes GROUP BY topic, CAST(delivered_ns / 60000000000 AS BIGINT)),
series AS (
  SELECT topic, sort_array(collect_list(struct(minute, messages))) AS per_minute
  FROM minute_rates GROUP BY topic),""",
    "PER_MINUTE_COLUMN": "per_minute,",
    "SERIES_JOIN": "LEFT JOIN series USING (topic)",
}
# per_minute as Spark types it
PER_MINUTE_TYPE: Final = pa.list_(
    pa.field(
        "element",
        pa.struct([("minute", pa.int64()), pa.field("messages", pa.int64(), nullable=False)]),
        nullable=False,
    )
)

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

# Arrival order within a stream: delivery time, then the message's place in its archive. An
# mbox key is the message's offset written as 16 digits: compared as a number, which orders
# those keys as their text does, so that no string goes through the window's exchange; any
# other key, a Maildir file name, is compared as text, after the numbered ones.
# (The queries' text goes through PySpark's formatter: "{{16}}" reaches Spark as "{16}".)
_KEY_NUMBER = "IF(key RLIKE '^[0-9]{{16}}$', CAST(key AS BIGINT), NULL)"
# Rows read from landed parts carry the offset as a number (null for a Maildir file, and in
# parts landed by earlier versions): the same number without the regular expression.
_KEY_NUMBER_FROM_OFFSET = f"coalesce(offset, {_KEY_NUMBER})"
_ARRIVAL_ORDER = "delivered_ns, key_number NULLS LAST, key_text"


def _arrival(messages: DataFrame) -> str:
    number = _KEY_NUMBER_FROM_OFFSET if "offset" in messages.columns else _KEY_NUMBER
    return f"{number} AS key_number, IF({number} IS NULL, key, NULL) AS key_text"


# late: a sequence number below one that arrived earlier in its stream. Copies are counted
# per sequence number first, then per stream: the second grouping needs no new exchange (the
# window's partitioning serves both), and no countDistinct's Expand (at 2M messages 3.3 s
# against 4.4 s, warm). This form keys each stream by its three columns: exact, and the
# definition; run_job computes the same table from a 64-bit stream key (see below).
_PUBLISHER_HEALTH_SQL = """
WITH arrivals AS (
  SELECT publisher_gid, topic, mailbox, publisher_seq, delivered_ns, ARRIVAL
  FROM {messages} WHERE kind = 'publish' AND publisher_seq IS NOT NULL),
sequenced AS (
  SELECT publisher_gid, topic, mailbox, publisher_seq,
    CAST(publisher_seq < max(publisher_seq) OVER (
      PARTITION BY publisher_gid, topic, mailbox ORDER BY ARRIVAL_ORDER
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS INT) AS late
  FROM arrivals),
per_seq AS (
  SELECT publisher_gid, topic, mailbox, publisher_seq, count(1) AS copies, sum(late) AS late
  FROM sequenced GROUP BY publisher_gid, topic, mailbox, publisher_seq),
streams AS (
  SELECT publisher_gid, topic, mailbox, max(publisher_seq) + 1 - FIRST_SEQ AS sent,
    count(1) AS received,
    sum(copies) AS copies, coalesce(sum(late), 0) AS out_of_order
  FROM per_seq GROUP BY publisher_gid, topic, mailbox)
SELECT publisher_gid, topic, mailbox, sent, received, sent - received AS lost,
  copies - received AS duplicated, out_of_order
FROM streams
"""

# The same table with each stream keyed by a 64-bit hash of its three columns, which the
# window partitions and sorts on, so that its exchange carries four longs a message and no
# string. A second, small aggregation names the streams again.
# Two streams with one hash would be counted as one: the names then repeat a stream key,
# which :func:`_health_with_names` checks, and it runs the exact form instead.
_STREAM_KEY = "xxhash64(publisher_gid, topic, mailbox)"
_PUBLISHER_HEALTH_BY_KEY_SQL = """
WITH publishes AS (
  SELECT STREAM_KEY AS stream, publisher_gid, topic, mailbox, publisher_seq, delivered_ns,
    ARRIVAL
  FROM {messages} WHERE kind = 'publish' AND publisher_seq IS NOT NULL),
arrivals AS (SELECT stream, publisher_seq, delivered_ns, key_number, key_text FROM publishes),
sequenced AS (
  SELECT stream, publisher_seq,
    CAST(publisher_seq < max(publisher_seq) OVER (
      PARTITION BY stream ORDER BY ARRIVAL_ORDER
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS INT) AS late
  FROM arrivals),
per_seq AS (
  SELECT stream, publisher_seq, count(1) AS copies, sum(late) AS late
  FROM sequenced GROUP BY stream, publisher_seq),
streams AS (
  SELECT stream, max(publisher_seq) + 1 - FIRST_SEQ AS sent, count(1) AS received,
    sum(copies) AS copies, coalesce(sum(late), 0) AS out_of_order
  FROM per_seq GROUP BY stream)NAMES_CTE
SELECT NAME_COLUMNS sent, received, sent - received AS lost,
  copies - received AS duplicated, out_of_order, stream
FROM streams NAMES_JOIN
"""
# The streams' names, filled in for NAMES_CTE, NAME_COLUMNS and NAMES_JOIN. A plain run
# takes the query without them (all three empty): its landing listed the streams it wrote,
# and :func:`_named_streams` hashes each as Spark's ``xxhash64`` does and puts the names in
# place (a test compares). That saves the names' scan, aggregation and join.
_NAMES = {
    "NAMES_CTE": """,
names AS (SELECT DISTINCT stream, publisher_gid, topic, mailbox FROM publishes)""",
    "NAME_COLUMNS": "publisher_gid, topic, mailbox,",
    "NAMES_JOIN": "JOIN names USING (stream)",
}
_HEALTH_COLUMNS: Final = (
    "publisher_gid", "topic", "mailbox", "sent", "received", "lost", "duplicated",
    "out_of_order",
)  # fmt: skip


def _stream_key(publisher_gid: int | None, topic: str | None, mailbox: str | None) -> int:
    """``xxhash64(publisher_gid, topic, mailbox)`` as Spark computes it (its _STREAM_KEY):
    XXH64 of each non-null value in turn (a long as 8 little-endian bytes, a string as
    UTF-8), seeded with 42 and then with the hash so far; a signed 64-bit result."""
    seed = 42
    if publisher_gid is not None:
        seed = xxhash.xxh64_intdigest(publisher_gid.to_bytes(8, "little", signed=True), seed)
    for text in (topic, mailbox):
        if text is not None:
            seed = xxhash.xxh64_intdigest(text.encode(), seed)
    return seed - (1 << 64) if seed >= 1 << 63 else seed


def _named_streams(table: pa.Table, streams: pa.Table) -> pa.Table | None:
    """``publisher_health`` as collected from the query without names, named from the
    landing's list of streams; None if two of them share a stream key (or, which cannot
    happen, a stream has no name): the exact form must be computed then."""
    keys = [_stream_key(*names) for names in zip(*streams.to_pydict().values(), strict=True)]
    if len(set(keys)) < len(keys):
        return None
    named = streams.append_column("stream", pa.array(keys, pa.int64()))
    joined = table.join(named, "stream", join_type="inner", use_threads=False)
    if joined.num_rows != table.num_rows:
        return None
    # the names typed as listed, every count as Spark typed it (not null where it is)
    fields = {field.name: field for field in (*streams.schema, *table.schema)}
    schema = pa.schema([fields[name] for name in _HEALTH_COLUMNS])
    return joined.select(list(_HEALTH_COLUMNS)).cast(schema)


# service_calls' columns, as Spark's job writes them (a test compares): the empty table of a
# run without requests is written from this, no query analysed for it
_SERVICE_CALLS_SCHEMA: Final = pa.schema(
    [
        ("service", pa.string()),
        ("message_id", pa.string()),
        ("client_gid", pa.int64()),
        ("request_seq", pa.int64()),
        ("sent_ns", pa.int64()),
        ("request_delivered_ns", pa.int64()),
        ("response_delivered_ns", pa.int64()),
        ("response_delivered_res_ns", pa.int64()),
        pa.field("responses", pa.int64(), nullable=False),
        pa.field("answered", pa.bool_(), nullable=False),
        pa.field("duplicates", pa.int64(), nullable=False),
        ("round_trip_ms", pa.float64()),
    ]
)


def _with_parts(query: str, parts: dict[str, str], *, keep: bool) -> str:
    """``query`` with each placeholder of ``parts`` replaced by its text, or by nothing."""
    for placeholder, text in parts.items():
        query = query.replace(placeholder, text if keep else "")
    return query


def _topic_stats(messages: DataFrame, *, series: bool = True) -> DataFrame:
    """``topic_stats``; without its ``per_minute`` column unless ``series``."""
    query = _with_parts(_TOPIC_STATS_SQL, _SERIES, keep=series).replace("CDF_ARRAY", _CDF_ARRAY)
    return messages.sparkSession.sql(query, messages=messages)


def _series(minutes: pa.Table) -> tuple[pa.Array, pa.ListArray]:
    """(the topics, each topic's per_minute series) of the landing's counts (see
    ``TableSink.per_minute``), as the full query makes a series: (minute, messages) in
    ascending order, a null minute first."""
    # a null minute first: sorted after a "has a minute" key (pyarrow's null placement
    # changed form between the versions this supports)
    ordered = minutes.append_column("dated", pc.is_valid(minutes["minute"])).sort_by(
        [("topic", "ascending"), ("dated", "ascending"), ("minute", "ascending")]
    )
    runs = pc.run_end_encode(ordered["topic"].combine_chunks())
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), runs.run_ends.cast(pa.int32())])
    points = pa.StructArray.from_arrays(
        [ordered["minute"].combine_chunks(), ordered["messages"].combine_chunks()],
        fields=list(PER_MINUTE_TYPE.value_type),
    )
    return runs.values, pa.ListArray.from_arrays(offsets, points, type=PER_MINUTE_TYPE)


def _with_series(stats: pa.Table, minutes: pa.Table) -> pa.Table:
    """``topic_stats`` as collected without its series, with the ``per_minute`` column made
    from the landing's counts, as the full query makes it: null for the null topic (which
    the query's join does not match)."""
    topics, series = _series(minutes)
    per_minute = series.take(pc.index_in(stats["topic"], value_set=topics, skip_nulls=True))
    at = stats.schema.get_field_index("latency_p50_high_ms") + 1
    return stats.add_column(at, pa.field("per_minute", PER_MINUTE_TYPE), per_minute)


def series_rows(minutes: pa.Table) -> list[dict[str, Any]]:
    """The ``topic`` and ``per_minute`` of every ``topic_stats`` row, as :func:`topic_rows`
    gives them, from the landing's counts alone (a test compares): the rate plot can be
    drawn before Spark has computed anything. The landing counted every publish, dated or
    not, so its topics are the table's."""
    topics, series = _series(minutes)
    rows = [
        {"topic": topic, "per_minute": None if topic is None else points}
        for topic, points in zip(topics.to_pylist(), series.to_pylist(), strict=True)
    ]
    return sorted(rows, key=lambda r: _nulls_first(r["topic"]))


def _service_calls(messages: DataFrame) -> DataFrame:
    return messages.sparkSession.sql(_SERVICE_CALLS_SQL, messages=messages)


def aggregate(
    messages: DataFrame, *, windowed: bool = False
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """``topic_stats``, ``service_calls`` and ``publisher_health`` of a ``messages`` table
    (``windowed``: see :func:`_publisher_health`)."""
    return (
        _topic_stats(messages),
        _service_calls(messages),
        _exact_publisher_health(messages, windowed=windowed),
    )


def _publisher_health(
    template: str, messages: DataFrame, *, names: bool = True, windowed: bool = False
) -> DataFrame:
    """One of the ``publisher_health`` queries on ``messages``, its placeholders filled in
    (ARRIVAL_ORDER before ARRIVAL, which is a prefix of it); the stream-key form without
    the streams' names unless ``names``.

    A stream ``sent`` every sequence number from 0 to the highest received; in a
    ``windowed`` run (``--since``/``--until``), from the lowest received in the window to
    the highest: what was sent before the window is not lost, so only gaps inside the
    window's sequence range count."""
    query = (
        template.replace("STREAM_KEY", _STREAM_KEY)
        .replace("ARRIVAL_ORDER", _ARRIVAL_ORDER)
        .replace("ARRIVAL", _arrival(messages))
        .replace("FIRST_SEQ", "min(publisher_seq)" if windowed else "0")
    )
    query = _with_parts(query, _NAMES, keep=names)
    return messages.sparkSession.sql(query, messages=messages)


def _exact_publisher_health(messages: DataFrame, *, windowed: bool = False) -> DataFrame:
    return _publisher_health(_PUBLISHER_HEALTH_SQL, messages, windowed=windowed)


def _keyed_publisher_health(
    messages: DataFrame, *, names: bool = True, windowed: bool = False
) -> DataFrame:
    return _publisher_health(_PUBLISHER_HEALTH_BY_KEY_SQL, messages, names=names, windowed=windowed)


def _health_with_names(
    table: pa.Table, messages: DataFrame, streams: pa.Table | None, *, windowed: bool = False
) -> pa.Table:
    """``publisher_health`` as collected from its stream-key form, without the key: named
    from the landing's list of ``streams`` when there is one (else by the query itself); if
    two streams shared a key (or, which cannot happen, one has no name), computed again in
    the exact form."""
    if streams is not None:
        named = _named_streams(table, streams)
    elif pc.count_distinct(table["stream"]).as_py() < table.num_rows:
        named = None  # the query's names repeat a key
    else:
        named = table.drop_columns(["stream"])
    if named is None:
        return _exact_publisher_health(messages, windowed=windowed).toArrow()
    return named


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
    landed = _landed(spark, landing_dirs, options, deduplicate=deduplicate)
    messages, rejects = _messages(landed, options), _rejects(landed)
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


def _no_request(tally: Tally | None) -> bool:
    """The landing counted what it wrote and no request was among it: ``service_calls``
    is empty."""
    return tally is not None and tally.get(("kind", "request"), 0) == 0


def overview(
    tables: Tables, tally: Tally | None = None, *, collected: dict[str, pa.Table] | None = None
) -> Overview:
    """Collect the per-topic, per-publisher, per-service and per-reason rows (small: they
    grow with topics, publishers and services, never with messages) and the kind counts.

    ``tally``, the landing's count of what it wrote (see ``TableSink``), stands in for the
    jobs that count kinds and reject reasons, and for the service query when it counted no
    request. ``collected`` holds ``topic_stats`` or ``publisher_health`` already on the
    driver (as Arrow); what it lacks is collected here. Timestamps are UTC-aware.
    """

    spark = tables.messages.sparkSession

    def rows(query: str, table: DataFrame) -> list[dict[str, Any]]:  # query reads {t}
        return [r.asDict() for r in spark.sql(query, t=table).collect()]

    def small(name: str) -> pa.Table:
        table = (collected or {}).get(name)
        return getattr(tables, name).toArrow() if table is None else table

    service_rows = (
        []
        if _no_request(tally)
        else rows(
            # the bounds of the unmeasurable round trips' median as topic_stats' of latency
            """SELECT *, round_trip_p50_low_ms + CAST(unmeasured_res_ns AS DOUBLE) / 1.0E6D
               AS round_trip_p50_high_ms
             FROM (
             SELECT service, count(1) AS calls,
               coalesce(sum(CAST(answered AS INT)), 0) AS answered,
               coalesce(sum(duplicates), 0) AS duplicate_responses,
               percentile(round_trip_ms, 0.5D) AS round_trip_p50_ms,
               max(round_trip_ms) AS round_trip_max_ms,
               min(round_trip_ms) AS round_trip_min_ms,
               count(round_trip_ms) AS round_trip_measured,
               percentile(IF(round_trip_ms IS NULL,
                 CAST(response_delivered_ns - sent_ns AS DOUBLE) / 1.0E6D, NULL), 0.5D)
                 AS round_trip_p50_low_ms,
               max(IF(round_trip_ms IS NULL, response_delivered_res_ns, NULL))
                 AS unmeasured_res_ns
             FROM {t} GROUP BY service) ORDER BY service""",
            tables.service_calls,
        )
    )
    if tally is None:
        rejects = rows(
            """SELECT status, reason, count(1) AS emails FROM {t}
               GROUP BY status, reason ORDER BY emails DESC, status, reason""",
            tables.rejects,
        )
        kinds = rows("SELECT kind, count(1) AS n FROM {t} GROUP BY kind", tables.messages)
        kind_counts = {r["kind"]: r["n"] for r in kinds}
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
    health = health_rows(small("publisher_health"))
    security = _security_counts(tables, tally)
    return Overview(
        round_trips=_round_trip_histogram(tables.service_calls, service_rows),
        topic_stats=topic_rows(small("topic_stats")),
        publisher_health=health,
        services=service_rows,
        rejects=rejects,
        kinds=kind_counts,
        security=security,
    )


#: the summary's security counts (docs/security.md): the ``security`` column's values, then
#: replayed and quarantined
SECURITY_MARKS: Final = (
    "verified", "signed", "unsigned", "invalid", "untrusted", "replayed", "quarantined",
)  # fmt: skip


def _security_counts(tables: Tables, tally: Tally | None) -> dict[str, int]:
    """Counts of the ``security`` column, copies of signed emails beyond the first
    (``replayed``: a Spark job only when there is signed mail) and emails in quarantine
    folders (from the landing's tally, else a job over both tables)."""
    messages = tables.messages
    if tally is not None:
        counts = {key[1]: n for key, n in tally.items() if key[0] == "security" and key[1]}
        counts["quarantined"] = tally.get(("quarantined",), 0)
    else:
        rows = messages.groupBy("security").count().collect()
        counts = {r["security"]: r["count"] for r in rows if r["security"]}
        counts["quarantined"] = sum(
            frame.filter(QUARANTINE_SQL).count() for frame in (messages, tables.rejects)
        )
    if counts.get("signed", 0) or counts.get("verified", 0):
        signed = messages.filter("security IN ('signed', 'verified')")
        row = signed.agg(F.count(F.lit(1)).alias("n"), F.count_distinct("message_id").alias("d"))
        first = row.collect()[0]
        counts["replayed"] = int(first["n"]) - int(first["d"])
    return counts


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
    tally: Tally | None = None,
    *,
    on_collected: Callable[[str, pa.Table], None] | None = None,
    messages: DataFrame | None = None,
    per_minute: pa.Table | None = None,
    streams: pa.Table | None = None,
    windowed: bool = False,
) -> tuple[Tables, Overview]:
    """The aggregates of ``out/messages`` (written by the landing or :func:`write_landed`),
    written next to it; returns the messages aggregated and every other table as read back
    from ``out``, and the overview (``tally``: see :func:`overview`). ``messages``: the same
    rows from elsewhere, to aggregate instead of the table (see :func:`landed_messages`);
    the table is then not read at all (listing its topic-day directories is work too).
    ``per_minute``: the landing's count of the same publishes per topic and minute
    (``TableSink.per_minute``), from which ``topic_stats`` gets its rate series instead of
    a second scan. ``streams``: the landing's list of the publisher streams among them
    (``TableSink.streams``), which names ``publisher_health``'s streams instead of Spark.
    ``windowed``: the rows are a time window's (see :func:`_publisher_health`).

    ``on_collected(name, table)`` is called, from a worker thread, as soon as
    ``topic_stats`` or ``publisher_health`` is on the driver (written, as Arrow), while the
    other tables may still be computing; an exception it raises fails the job."""

    # with the schema: no inference, and an empty table has no files
    def read(name: str, schema: str | StructType) -> DataFrame:
        return spark.read.schema(schema).parquet(str(out / name))

    if messages is None:
        messages = read("messages", MESSAGES_DDL)

    def write_calls(frame: DataFrame | None) -> tuple[None, DataFrame]:
        """service_calls, which grows with the archive: Spark writes it, a file a task (or,
        with no request, ``frame`` None, it is empty and no job needs to say so)."""
        name = "service_calls"
        if frame is None:
            _write_small(_SERVICE_CALLS_SCHEMA.empty_table(), out / name)
            return None, read(name, from_arrow_schema(_SERVICE_CALLS_SCHEMA))
        frame.write.mode("overwrite").parquet(str(out / name))
        return None, read(name, frame.schema)

    def write(name: str, frame: DataFrame) -> tuple[pa.Table, DataFrame]:
        """(the table as collected, the table as read back from ``out``)"""
        # The per-topic and per-publisher tables are small (they grow with topics and
        # publishers, never with messages) and the overview needs them on the driver
        # anyway: collected once, as Arrow, and written here. That is one Spark job each
        # instead of a write (with a shuffle to one partition) and a query to read it back.
        table = frame.toArrow()
        if name == "topic_stats" and per_minute is not None:
            table = _with_series(table, per_minute)
        if name == "publisher_health":
            table = _health_with_names(table, messages, streams, windowed=windowed)
        _write_small(table, out / name)
        if on_collected is not None:
            on_collected(name, table)
        return table, read(name, from_arrow_schema(table.schema))

    # The three jobs run at once: each has stages narrower than the cores (a final
    # aggregation over a few partitions) and a cold driver plans and compiles one while
    # another computes. Each table is read back by its own thread, as soon as it is
    # written, and rejects meanwhile: after the last job only its own table is left to read.
    #
    # Only the queries that run are parsed and analysed (a cold driver's analysis is not
    # cheap): none for service_calls without a request, and publisher_health in its
    # stream-key form alone. Analysed here, one after the other, and each job started as
    # soon as its query is analysed (in this dictionary's order): publisher_health, the
    # longest, plans and computes while topic_stats is analysed.
    with ThreadPoolExecutor(len(AGGREGATES), thread_name_prefix="emailmw-table") as pool:
        futures: dict[str, Future[tuple[pa.Table | None, DataFrame]]] = {
            "publisher_health": pool.submit(
                write,
                "publisher_health",
                _keyed_publisher_health(messages, names=streams is None, windowed=windowed),
            ),
            "topic_stats": pool.submit(
                write, "topic_stats", _topic_stats(messages, series=per_minute is None)
            ),
            "service_calls": pool.submit(
                write_calls, None if _no_request(tally) else _service_calls(messages)
            ),
        }
        rejects = read("rejects", REJECTS_DDL)
        done = {name: future.result() for name, future in futures.items()}

    collected = {name: table for name, (table, _) in done.items()}
    back = {name: frame for name, (_, frame) in done.items()}
    written = Tables(
        messages, back["topic_stats"], back["service_calls"], back["publisher_health"], rejects
    )
    small = {name: table for name, table in collected.items() if table is not None}
    return written, overview(written, tally, collected=small)
