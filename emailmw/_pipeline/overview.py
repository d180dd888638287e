"""The overview of a run: the small results (they grow with topics, publishers and
services, never with messages) that the summary and the report are made of, collected on
the driver."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, cast

import pyarrow as pa
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from .landing import QUARANTINE_SQL
from .tables import EMAIL_KEY_SQL, GROUP_STREAM_SQL, INNER_NUMBER_SQL, RTT_BINS, Tables

__all__ = [
    "BINS_NS",
    "SECURITY_MARKS",
    "Details",
    "Overview",
    "bin_width",
    "details",
    "health_rows",
    "overview",
    "topic_rows",
]


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
    # messages by how they travelled: batch_first, batch (the other parts of batches),
    # part_first, part (the other parts of messages sent as several emails)
    packing: dict[str, int] = field(default_factory=dict)

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
            "unreadable": by_status.get("unreadable", 0),
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
            # batches (docs/batching.md): batch emails, the messages they carried; messages
            # sent as parts, and their parts
            "batch_emails": self.packing.get("batch_first", 0),
            "batched_messages": self.packing.get("batch_first", 0) + self.packing.get("batch", 0),
            "split_messages": self.packing.get("part_first", 0),
            "message_parts": self.packing.get("part_first", 0) + self.packing.get("part", 0),
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
SELECT status, reason, kind, security, packing, QUARANTINE AS quarantined, sum(n) AS n,
  sum(parts) AS parts
FROM (
  SELECT 'ok' AS status, CAST(NULL AS STRING) AS reason, kind, security,
    CASE WHEN packed LIKE 'batch 1/%' THEN 'batch_first' WHEN packed LIKE 'batch %'
      THEN 'batch' WHEN packed LIKE 'parts %' THEN 'split' END AS packing,
    mailbox, count(1) AS n,
    coalesce(sum(CAST(nullif(regexp_extract(packed, '^parts ([0-9]+)/', 1), '') AS INT)), 0)
      AS parts
  FROM {messages} GROUP BY ALL
  UNION ALL
  SELECT status, reason, CAST(NULL AS STRING), CAST(NULL AS STRING), CAST(NULL AS STRING),
    mailbox, count(1), 0
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
    percentile(round_trip_ms, 0.9D) AS round_trip_p90_ms,
    percentile(round_trip_ms, 0.99D) AS round_trip_p99_ms,
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
    packing: dict[str, int] = {}
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
        if row["packing"] == "split":  # messages sent as parts (each landed as one row)
            packing["part_first"] = packing.get("part_first", 0) + row["n"]
            packing["part"] = packing.get("part", 0) + row["parts"] - row["n"]
        elif row["packing"]:
            packing[row["packing"]] = packing.get(row["packing"], 0) + row["n"]
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
        packing=packing,
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


# ----------------------------------------------------------------------------- the report's


@dataclass
class Details:
    """What the report draws beyond the overview (small: topics x bins, publishers x bins,
    five messages a topic): each topic's rate and latency per time bin, each stream's loss
    and reordering per bin, and each topic's slowest messages. ``bin_ns``: the bin's width,
    the step of :data:`BINS_NS` that gives at most :data:`MOST_BINS` bins over the run."""

    bin_ns: int
    topic_bins: list[dict[str, Any]]
    publisher_bins: list[dict[str, Any]]
    slowest: list[dict[str, Any]]


#: the bin widths the report's time series use, seconds to hours
BINS_NS: Final = tuple(
    s * 1_000_000_000 for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600,
                                 7200, 21600, 43200, 86400)
)  # fmt: skip
MOST_BINS: Final = 240

_TOPIC_BINS_SQL = """
SELECT topic, (delivered_ns - pmod(delivered_ns, :bin)) DIV :bin AS bin, count(1) AS messages,
  percentile(latency_ms, 0.5D) AS latency_p50_ms, percentile(latency_ms, 0.99D) AS latency_p99_ms
FROM {messages} WHERE kind = 'publish' AND delivered_ns IS NOT NULL
GROUP BY ALL
"""

# A stream is what publisher_health calls one (a group's folders are one) in the same
# arrival order (a stream's keys are all an mbox's 16-digit offsets or all Maildir names: as
# text they sort as publisher_health's numbers do), and in a ``:windowed`` run
# (--since/--until) nothing before the window's first sequence number is lost: the bins add
# up to publisher_health's figures.
_PUBLISHER_BINS_SQL = (
    """
WITH arrivals AS (
  SELECT publisher_gid, topic, mailbox, publisher_seq, delivered_ns,
    CAST(publisher_seq < max(publisher_seq) OVER (
      PARTITION BY publisher_gid, topic, mailbox
      ORDER BY delivered_ns, EMAIL_KEY, INNER_NUMBER NULLS FIRST
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS INT) AS late
  FROM (SELECT publisher_gid, topic, GROUP_STREAM AS mailbox, publisher_seq, delivered_ns, key
    FROM {messages}
    WHERE kind = 'publish' AND publisher_seq IS NOT NULL AND delivered_ns IS NOT NULL)),
firsts AS (
  SELECT publisher_gid, topic, mailbox, publisher_seq, min(delivered_ns) AS delivered_ns
  FROM arrivals GROUP BY ALL),
gaps AS (
  SELECT publisher_gid, topic, mailbox, delivered_ns,
    greatest(publisher_seq - coalesce(lag(publisher_seq) OVER (
      PARTITION BY publisher_gid, topic, mailbox ORDER BY publisher_seq),
      IF(:windowed, publisher_seq, 0) - 1) - 1, 0) AS lost
  FROM firsts)
SELECT publisher_gid, topic, mailbox, bin, sum(received) AS received, sum(lost) AS lost,
  sum(late) AS out_of_order
FROM (
  SELECT publisher_gid, topic, mailbox, (delivered_ns - pmod(delivered_ns, :bin)) DIV :bin
    AS bin, 1 AS received, 0 AS lost, late FROM arrivals
  UNION ALL
  SELECT publisher_gid, topic, mailbox, (delivered_ns - pmod(delivered_ns, :bin)) DIV :bin,
    0, lost, 0 FROM gaps WHERE lost > 0)
GROUP BY ALL
""".replace("GROUP_STREAM", GROUP_STREAM_SQL)
    .replace("EMAIL_KEY", EMAIL_KEY_SQL)
    .replace("INNER_NUMBER", INNER_NUMBER_SQL)
)

_SLOWEST_SQL = """
SELECT topic, publisher_gid, publisher_seq, message_id, latency_ms, delivered_ns FROM (
  SELECT *, row_number() OVER (PARTITION BY topic ORDER BY latency_ms DESC, key) AS rank
  FROM {messages} WHERE kind = 'publish' AND latency_ms IS NOT NULL)
WHERE rank <= :most
"""


def bin_width(span_ns: int) -> int:
    """The narrowest of :data:`BINS_NS` that cuts ``span_ns`` into at most
    :data:`MOST_BINS` bins."""
    for width in BINS_NS:
        if span_ns // width < MOST_BINS:
            return width
    return BINS_NS[-1]


def details(
    messages: DataFrame, span_ns: int, slowest: int = 5, *, windowed: bool = False
) -> Details:
    """The report's :class:`Details` of ``messages`` (the written table: each of three
    small jobs reads a few of its columns), binned to fit ``span_ns``; ``windowed``: the
    run read a time window (no loss counted before a stream's first sequence number in it,
    as in ``publisher_health``)."""
    spark = messages.sparkSession
    width = bin_width(span_ns)
    queries: list[tuple[str, dict[str, Any]]] = [
        (_TOPIC_BINS_SQL, {"bin": width}),
        (_PUBLISHER_BINS_SQL, {"bin": width, "windowed": windowed}),
        (_SLOWEST_SQL, {"most": slowest}),
    ]

    def rows(query: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (
            spark.sql(query[0], args=query[1], messages=messages).toArrow().to_pylist()
        )
        return found

    # the three jobs at once: each is narrower than the cores for most of its time (in
    # the caller's job group: PySpark pins one to each Python thread)
    from pyspark import inheritable_thread_target

    with ThreadPoolExecutor(3, thread_name_prefix="emailmw-details") as pool:
        topic_bins, publisher_bins, worst = pool.map(
            inheritable_thread_target(spark)(rows), queries
        )
    return Details(width, topic_bins, publisher_bins, worst)
