"""Each table of ``emailmw analyze``, defined once: the landed rows (:func:`land`: the
executors parse the archives), ``messages``, ``topic_stats``, ``service_calls``,
``publisher_health`` and ``rejects`` as SQL over them (:func:`compute`), and
``group_stats`` (:func:`group_stats`, pyarrow over the group folders' keywords). A plain
run, a merge of earlier runs and the tests all use these definitions.

Spark does the work, the same code on ``local[*]`` or any cluster master (the archives and
the output directory must then be on storage every executor sees): the driver lists the
archives into units of work and the executors parse them with emailmw's wire parser
(``mapInArrow``, Arrow batches, no per-row Python); Spark writes the landed rows under
``_landing/src=<digest>/``.

``group_stats``: what each member of each delivery-mode group processed
(``docs/delivery-modes.md``), from where the group left it.

A member moves what it processed into its own done folder, ``emailmw-GROUP-done-MEMBER``,
so an archive of the group's account says who processed what. A message that reached a
member after another member failed holding it carries the keyword ``DeliveryN`` (N >= 2):
in a Dovecot Maildir, a lower-case letter in the file name's flags, mapped to its keyword by
the folder's ``dovecot-keywords`` file. ``redelivered`` counts those; it is null where the
archive does not say (an mbox, a merge of earlier output).

Computed with pyarrow from the ``messages`` table's ``mailbox``, ``key`` and ``source``
columns (no Spark job: the table has one row per member).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .landing import (
    INTERNAL_TOPIC_PREFIX,
    LANDED_SCHEMA,
    LANDING_SCHEMA,
    LATENCY_RESOLUTION_NS,
    REJECTS_COLUMNS,
    Source,
    land_numbered_units,
)

__all__ = [
    "CDF_POINTS",
    "GROUP_STATS_SCHEMA",
    "GROUP_STREAM_SQL",
    "LANDED_DDL",
    "EMAIL_KEY_SQL",
    "INNER_NUMBER_SQL",
    "LANDING_DDL",
    "RTT_BINS",
    "JobOptions",
    "Tables",
    "compute",
    "group_stats",
    "land",
    "write_group_stats",
]

_SPARK_TYPES = {"string": "string", "int64": "bigint"}
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
        # one partition per unit: the units are spread over the executors as they free up.
        # A task carries the unit's number only; the list (a Maildir unit names 20,000
        # files: a 5.5 MB task when it was the data) reaches each executor once, broadcast
        listed = spark.sparkContext.broadcast(units)
        frame = spark.range(units.num_rows, numPartitions=units.num_rows)
        landed = frame.mapInArrow(
            functools.partial(land_numbered_units, units=listed, keystore=keystore), LANDED_DDL
        )
        landed.write.mode("append").partitionBy("src").parquet(str(landing))
        listed.destroy()
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
    "packed",
    "mailbox",
    "source",
    "key",
    "to_date(timestamp_micros((delivered_ns - pmod(delivered_ns, 1000)) DIV 1000)) AS day",
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
    mbox messages delivered at the same instant. A message sent as parts is one row
    (:data:`_JOINED_PARTS_SQL`)."""
    ok = landed.filter("status = 'ok'")
    if options.topic_glob:  # anchored: a glob matches the whole topic
        ok = ok.filter(F.col("topic").rlike("^" + fnmatch.translate(options.topic_glob)))
    if not options.include_internal:  # emailmw's own topics stay out unless asked for
        ok = ok.filter(f"topic IS NULL OR NOT startswith(topic, '{INTERNAL_TOPIC_PREFIX}')")
    rows = ok.selectExpr(*_MESSAGE_COLUMNS, "offset", "part_of")
    return ok.sparkSession.sql(_JOINED_PARTS_SQL, rows=rows).drop("part_of")


# A message sent as several emails (``Part: i/N``, ``Part-Of``) is one message: its parts
# (those of one mailbox) joined into one row: the whole's Message-ID, its metadata (every
# part carries the message's), delivered when its last part was, the parts' sizes added up,
# ``packed`` "parts n/N" (n of its N parts in the archive), the worst of their signature
# marks, the first part's key. The summary counts them by ``packed``.
_JOINED_PARTS_SQL = """
SELECT * FROM {rows} WHERE part_of IS NULL
UNION ALL
SELECT kind, topic, part_of AS message_id, in_reply_to, publisher_gid, publisher_seq,
  client_gid, request_seq, source_ns, delivered_ns, delivered_res_ns,
  IF(delivered_res_ns <= RESOLUTION, CAST(delivered_ns - source_ns AS DOUBLE) / 1.0E6D, NULL)
    AS latency_ms,
  size, from_addr, to_addr, security,
  concat('parts ', parts, '/', total) AS packed, mailbox, source, key,
  to_date(timestamp_micros((delivered_ns - pmod(delivered_ns, 1000)) DIV 1000)) AS day,
  offset, part_of
FROM (
  SELECT part_of, mailbox, source, first(kind) AS kind, first(topic) AS topic,
    first(in_reply_to) AS in_reply_to, first(publisher_gid) AS publisher_gid,
    first(publisher_seq) AS publisher_seq, first(client_gid) AS client_gid,
    first(request_seq) AS request_seq, first(source_ns) AS source_ns,
    max(delivered_ns) AS delivered_ns,
    max_by(delivered_res_ns, delivered_ns) AS delivered_res_ns,
    sum(size) AS size, first(from_addr) AS from_addr, first(to_addr) AS to_addr,
    max_by(security, CASE security WHEN 'invalid' THEN 5 WHEN 'untrusted' THEN 4
      WHEN 'unsigned' THEN 3 WHEN 'signed' THEN 2 ELSE 1 END) AS security,
    count(1) AS parts,
    max(CAST(nullif(regexp_extract(packed, '/([0-9]+)$', 1), '') AS INT)) AS total,
    min_by(key, CAST(nullif(regexp_extract(packed, ' ([0-9]+)/', 1), '') AS INT)) AS key,
    min(offset) AS offset
  FROM {rows} WHERE part_of IS NOT NULL
  GROUP BY part_of, mailbox, source)
""".replace("RESOLUTION", str(LATENCY_RESOLUTION_NS))


def _rejects(landed: DataFrame) -> DataFrame:
    """The ``rejects`` rows of ``landed``: foreign and malformed mail."""
    return landed.filter("status != 'ok'").selectExpr(*REJECTS_COLUMNS)


# The aggregates as SQL text: a few py4j calls and one analysis per table (built with the
# DataFrame API, every function and literal is its own py4j round trip). The CDF's points
# are part of the text (CDF_ARRAY).
_TOPIC_STATS_SQL = """
WITH publishes AS (SELECT * FROM {messages} WHERE kind = 'publish'),
minute_rates AS (
  SELECT topic, (delivered_ns - pmod(delivered_ns, 60000000000)) DIV 60000000000 AS minute,
    count(1) AS messages
  FROM publishes GROUP BY ALL),
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
  timestamp_micros((first_ns - pmod(first_ns, 1000)) DIV 1000) AS first,
  timestamp_micros((last_ns - pmod(last_ns, 1000)) DIV 1000) AS last,
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
# The messages of one batch email share its delivery time and its key (plus "#i"): they
# count in the order the batch carries them, by number (#2 before #10), not as text.
EMAIL_KEY_SQL: Final = "regexp_replace(key, '#[0-9]+$', '')"
INNER_NUMBER_SQL: Final = "CAST(nullif(regexp_extract(key, '#([0-9]+)$', 1), '') AS INT)"

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
GROUP_STREAM_SQL: Final = (
    "regexp_replace(mailbox, '(^|[./])emailmw-([A-Za-z0-9_]{{1,40}})-(done|claims)-"
    "[0-9a-f]{{8}}([.]mbox)?$', '$1emailmw-$2')"  # ({{}}: the SQL is a format template)
)
_PUBLISHER_HEALTH_SQL = """
WITH arrivals AS (
  SELECT publisher_gid, topic, GROUP_STREAM AS mailbox, publisher_seq, delivered_ns,
    KEY_NUMBER AS key_number, IF(KEY_NUMBER IS NULL, EMAIL_KEY, NULL) AS key_text,
    INNER_NUMBER AS inner_number
  FROM {messages} WHERE kind = 'publish' AND publisher_seq IS NOT NULL),
sequenced AS (
  SELECT publisher_gid, topic, mailbox, publisher_seq,
    CAST(publisher_seq < max(publisher_seq) OVER (
      PARTITION BY publisher_gid, topic, mailbox
      ORDER BY delivered_ns, key_number NULLS LAST, key_text, inner_number NULLS FIRST
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
""".replace("KEY_NUMBER", _KEY_NUMBER).replace("GROUP_STREAM", GROUP_STREAM_SQL)
_PUBLISHER_HEALTH_SQL = _PUBLISHER_HEALTH_SQL.replace("EMAIL_KEY", EMAIL_KEY_SQL).replace(
    "INNER_NUMBER", INNER_NUMBER_SQL
)


def _topic_stats(messages: DataFrame) -> DataFrame:
    return messages.sparkSession.sql(_TOPIC_STATS_SQL, messages=messages)


def _service_calls(messages: DataFrame) -> DataFrame:
    return messages.sparkSession.sql(_SERVICE_CALLS_SQL, messages=messages)


def _publisher_health(messages: DataFrame, *, windowed: bool) -> DataFrame:
    return messages.sparkSession.sql(
        _PUBLISHER_HEALTH_SQL, args={"windowed": windowed}, messages=messages
    )


# ----------------------------------------------------------------------------- group_stats

GROUP_STATS_SCHEMA: Final = pa.schema(
    [
        ("group", pa.string()),
        ("member", pa.string()),
        ("processed", pa.int64()),
        ("redelivered", pa.int64()),  # null: the archive does not keep keywords
        ("mailbox", pa.string()),
    ]
)
_DONE: Final = re.compile(
    r"(?:^|[./])emailmw-(?P<group>[A-Za-z0-9_]{1,40})-done-(?P<member>[0-9a-f]{8})(?:\.mbox)?$"
)
_DELIVERY: Final = re.compile(r"^Delivery(\d{1,3})$")


def _redelivered_keys(folder: Path) -> set[str] | None:
    """The files (by key: the name without its flags) of Maildir ``folder`` that carry a
    ``DeliveryN`` keyword with N >= 2: Dovecot keeps keywords as lower-case letters in the
    name's flags (``:2,ab``), mapped by ``dovecot-keywords`` (``index keyword`` per line,
    index 0 = letter a). None where the folder keeps no keywords (unknown)."""
    try:
        lines = (folder / "dovecot-keywords").read_text(errors="replace").splitlines()
    except OSError:
        return None
    letters = set()
    for line in lines:
        index, _, keyword = line.partition(" ")
        found = _DELIVERY.match(keyword.strip())
        if index.isdigit() and int(index) < 26 and found and int(found.group(1)) >= 2:
            letters.add(chr(ord("a") + int(index)))
    keys = set()
    for sub in ("cur", "new"):
        try:
            names = [entry.name for entry in os.scandir(folder / sub)]
        except OSError:
            continue
        for name in names:
            key, _, flags = name.partition(":2,")
            if letters & set(flags):
                keys.add(key)
    return keys


def group_stats(messages: pa.Table, roots: dict[str, Path]) -> pa.Table:
    """``group_stats`` of the ``messages`` rows (``mailbox``, ``key``, ``source``);
    ``roots``: source label -> the Maildir root it was read from (for the keywords)."""
    if messages.num_rows == 0:
        return GROUP_STATS_SCHEMA.empty_table()
    mailboxes = messages["mailbox"]
    mask = pc.match_substring_regex(mailboxes, r"emailmw-[A-Za-z0-9_]+-done-[0-9a-f]{8}")
    rows = messages.filter(pc.fill_null(mask, False)).to_pylist()
    stats: dict[tuple[str, str, str], dict[str, Any]] = {}
    redelivered_in: dict[tuple[str, str], set[str] | None] = {}
    for row in rows:
        found = _DONE.search(row["mailbox"] or "")
        if found is None:
            continue
        key = (found.group("group"), found.group("member"), row["mailbox"])
        entry = stats.setdefault(key, {"processed": 0, "redelivered": 0, "known": True})
        entry["processed"] += 1
        where = (row["source"], row["mailbox"])
        if where not in redelivered_in:
            root = roots.get(row["source"] or "")
            folder = None if root is None else (
                root if root.name == row["mailbox"] else root / row["mailbox"]
            )  # fmt: skip
            redelivered_in[where] = None if folder is None else _redelivered_keys(folder)
        keys = redelivered_in[where]
        if keys is None:
            entry["known"] = False
        elif row["key"] in keys:
            entry["redelivered"] += 1
    out = [
        {"group": g, "member": m, "processed": e["processed"],
         "redelivered": e["redelivered"] if e["known"] else None, "mailbox": mailbox}
        for (g, m, mailbox), e in sorted(stats.items())
    ]  # fmt: skip
    return pa.Table.from_pylist(out, schema=GROUP_STATS_SCHEMA)


def write_group_stats(out: Path, roots: dict[str, Path]) -> pa.Table:
    """Compute ``group_stats`` from ``out/messages`` and write it to ``out/group_stats``."""
    directory = out / "messages"
    table = GROUP_STATS_SCHEMA.empty_table()
    if directory.is_dir() and any(directory.rglob("*.parquet")):
        # the mailbox column alone first (dictionary-encoded: cheap); the rest only when
        # some group's done folder is among them
        # (no partition columns read: a day partition that is null everywhere, mail
        # without a delivery time, cannot even be typed: the run failed on it)
        labels = pq.read_table(directory, columns=["mailbox"], partitioning=None)[
            "mailbox"
        ].unique()
        if pc.any(pc.fill_null(pc.match_substring(labels, "-done-"), False)).as_py():
            messages = pq.read_table(
                directory, columns=["mailbox", "key", "source"], partitioning=None
            )
            table = group_stats(messages, roots)
    target = out / "group_stats"
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.parquet"):
        old.unlink()
    pq.write_table(table, target / "part-00000.zstd.parquet", compression="zstd")
    (target / "_SUCCESS").touch()
    return table
