"""The Spark pipeline against archives with known answers."""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from emailmw._core.errors import ConfigError
from emailmw._pipeline.analyze import AnalyzeRequest, analyze, parse_time
from emailmw._pipeline.job import run_job
from emailmw._pipeline.landing import LANDING_SCHEMA
from emailmw._pipeline.overview import Overview, details, health_rows
from emailmw._pipeline.report import loss_plot, topic_plots, write_report
from emailmw._pipeline.tables import RTT_BINS, JobOptions, compute
from emailmw.testing.archive import Archive, generate

pytestmark = pytest.mark.spark


def _run(spark: SparkSession, sources: list[Path], out: Path, **kw: Any) -> dict[str, Any]:
    del spark  # the session fixture started the JVM; analyze() reuses it
    return analyze(AnalyzeRequest([str(s) for s in sources], out, **kw))


def _table(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.parquet(str(out / name)).collect()]


@pytest.fixture(scope="module")
def archive() -> Archive:
    return generate()


@pytest.fixture(scope="module")
def analyzed(
    spark: SparkSession, archive: Archive, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("archive")
    archive.write_maildir(root / "maildirs")
    out = root / "out"
    return out, _run(spark, [root / "maildirs"], out)


def test_counts_rejects_and_summary(
    analyzed: tuple[Path, dict[str, Any]], archive: Archive
) -> None:
    _, summary = analyzed
    expected = archive.expected
    health = expected["publisher_health"].values()
    assert summary["foreign"] == expected["foreign"]
    assert summary["malformed"] == expected["malformed"]
    assert summary["lost"] == sum(h["lost"] for h in health) == 5
    assert summary["duplicated"] == sum(h["duplicated"] for h in health) == 3
    assert summary["out_of_order"] == sum(h["out_of_order"] for h in health)
    assert summary["calls"] == len(expected["calls"])
    assert summary["answered"] == sum(1 for c in expected["calls"] if c["responses"])
    assert summary["duplicate_responses"] == 1


def _health(spark: SparkSession, out: Path) -> dict[tuple[int, str], dict[str, int]]:
    return {
        (r["publisher_gid"], r["topic"]): {
            k: r[k] for k in ("sent", "received", "lost", "duplicated", "out_of_order")
        }
        for r in _table(spark, out, "publisher_health")
    }


def test_publisher_health_is_exact(
    spark: SparkSession, analyzed: tuple[Path, dict[str, Any]], archive: Archive
) -> None:
    out, _ = analyzed
    assert _health(spark, out) == archive.expected["publisher_health"]


def test_topic_latency_percentiles_are_exact(
    spark: SparkSession, analyzed: tuple[Path, dict[str, Any]], archive: Archive
) -> None:
    out, _ = analyzed
    rows = {r["topic"]: r for r in _table(spark, out, "topic_stats")}
    assert set(rows) == set(archive.expected["topics"])
    for topic, want in archive.expected["topics"].items():
        for key, value in want.items():
            if key == "latency_cdf_ms":  # the 1st to 100th percentiles, the report's CDF
                assert len(rows[topic][key]) == len(value) == 100
                for got, expected in zip(rows[topic][key], value, strict=True):
                    assert math.isclose(got, expected, rel_tol=1e-9), (topic, key)
                continue
            assert math.isclose(rows[topic][key], value, rel_tol=1e-9), (topic, key)
        assert rows[topic]["bytes"] > 0
        assert sum(p["messages"] for p in rows[topic]["per_minute"]) == want["messages"]


def test_service_calls_join_requests_to_responses(
    spark: SparkSession, analyzed: tuple[Path, dict[str, Any]], archive: Archive
) -> None:
    out, _ = analyzed
    got = {r["message_id"]: r for r in _table(spark, out, "service_calls")}
    for call in archive.expected["calls"]:
        row = got[call["message_id"]]
        assert row["responses"] == call["responses"]
        assert row["answered"] == bool(call["responses"])
        if call["rtt_ms"] is None:
            assert row["round_trip_ms"] is None
        else:
            assert math.isclose(row["round_trip_ms"], call["rtt_ms"], rel_tol=1e-9)


@pytest.fixture(scope="module")
def overview(
    spark: SparkSession,
    analyzed: tuple[Path, dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Overview:
    out, _ = analyzed
    tables = compute(spark, (out / "_landing").glob("src=*"), JobOptions(), deduplicate=False)
    return run_job(spark, tmp_path_factory.mktemp("again"), tables)


def test_overview_holds_the_small_tables_in_order(
    spark: SparkSession, analyzed: tuple[Path, dict[str, Any]], overview: Overview
) -> None:
    out, _ = analyzed
    topics = sorted(_table(spark, out, "topic_stats"), key=lambda r: r["topic"])
    assert [r["topic"] for r in overview.topic_stats] == [r["topic"] for r in topics]
    for row, want in zip(overview.topic_stats, topics, strict=True):
        for key in ("first", "last"):  # the report shows them: UTC, and saying so
            assert row[key].utcoffset() == dt.timedelta(0)
            assert row[key].timestamp() == want[key].timestamp()
        assert row["latency_cdf_ms"] == want["latency_cdf_ms"]
        assert [p["messages"] for p in row["per_minute"]] == [
            p["messages"] for p in want["per_minute"]
        ]
    health = overview.publisher_health
    assert len(health) == len(_table(spark, out, "publisher_health"))
    order = [(-h["lost"], -h["duplicated"], h["publisher_gid"]) for h in health]
    assert order == sorted(order)
    assert health[0]["lost"] > 0  # the generator's gaps: the worst publisher comes first


def test_round_trip_histogram_counts_every_answered_call(
    archive: Archive, overview: Overview
) -> None:
    rtts = [c["rtt_ms"] for c in archive.expected["calls"] if c["rtt_ms"] is not None]
    low, high = min(rtts), max(rtts)
    width = (high - low) / RTT_BINS
    want: dict[int, int] = {}
    for rtt in rtts:
        index = min(math.floor((rtt - low) / width), RTT_BINS - 1)
        want[index] = want.get(index, 0) + 1
    assert {r["service"] for r in overview.round_trips} == {
        c["service"] for c in archive.expected["calls"]
    }
    assert {r["bin"]: r["calls"] for r in overview.round_trips} == want
    for row in overview.round_trips:
        assert math.isclose(row["low_ms"], low + row["bin"] * width, rel_tol=1e-9)
        assert math.isclose(row["high_ms"], low + (row["bin"] + 1) * width, rel_tol=1e-9)


def test_report_is_written(analyzed: tuple[Path, dict[str, Any]]) -> None:
    out, _ = analyzed
    static = (out / "report-static.html").read_text()
    assert static.count("data:image/png;base64,") == 4
    assert "<script" not in static
    page = (out / "report.html").read_text()
    for text in (page, static):
        assert "/sensors/t0" in text
        # it says what made it: the sources, the master, the filters, the time range, and
        # how well each latency is known (this Maildir's file names: the microsecond)
        assert "<details><summary>Run</summary>" in text  # at the end, folded
        assert text.index("<h2>Overview</h2>") < text.index("<h2>Topics</h2>")
        assert f"<td>{out.parent / 'maildirs'}</td>" in text
        assert "<td>local[*]</td>" in text
        assert "<td>messages delivered</td>" in text
        assert "<td>&lt;= 1 ms (all)</td>" in text
    for plot in ("rate", "latency_cdf", "round_trips", "loss"):
        assert (out / "plots" / f"{plot}.png").stat().st_size > 1000


def test_plots_drawn_while_spark_works_make_the_same_report(
    overview: Overview, tmp_path: Path
) -> None:
    """analyze() draws the per-topic plots as soon as topic_stats is collected, and the loss
    plot as soon as publisher_health is; the report must not depend on whether they were
    drawn then or by write_report itself."""
    early, late = tmp_path / "early", tmp_path / "late"
    (early / "plots").mkdir(parents=True)
    images = topic_plots(overview.topic_stats, early / "plots")
    assert [title for title, _ in images] == ["Message rate over time", "Latency CDF"]
    table = pa.Table.from_pylist(list(reversed(overview.publisher_health)))
    loss = loss_plot(health_rows(table), early / "plots")  # from the table as collected
    summary = overview.summary()
    write_report(overview, summary, early, topic_images=images, loss_image=loss)
    write_report(overview, summary, late)

    def page(out: Path) -> str:  # all but the generation time
        return re.sub(r"<p>Generated [^<]*</p>", "", (out / "report-static.html").read_text())

    assert "data:image/png" in page(early)
    assert page(early) == page(late)
    for plot in ("rate", "latency_cdf", "round_trips", "loss"):
        assert (early / "plots" / f"{plot}.png").read_bytes() == (
            late / "plots" / f"{plot}.png"
        ).read_bytes()


# what depends on how well the delivery time is known: a Maildir file name says the
# microsecond, an mbox only its Received: header's second
_RESOLUTION_COLUMNS = {
    "delivered_res_ns", "latency_ms", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms",
    "latency_max_ms", "latency_measured", "latency_p50_low_ms", "latency_p50_high_ms",
    "latency_cdf_ms",
    "response_delivered_res_ns", "round_trip_ms",
}  # fmt: skip


def test_maildir_and_mbox_give_the_same_answers(spark: SparkSession, tmp_path: Path) -> None:
    """The same mail, delivered at whole seconds, stored both ways: every answer is the same
    but latency, which only the Maildir's file names can measure; the mbox's bounds hold
    the Maildir's measured median."""
    same = generate(subsecond=False, seed=11)
    same.write_maildir(tmp_path / "maildirs")
    same.write_mbox(tmp_path / "all.mbox")
    _run(spark, [tmp_path / "maildirs"], tmp_path / "a", report=False)
    _run(spark, [tmp_path / "all.mbox"], tmp_path / "b", report=False)
    ignore = {"mailbox", "source", "key", *_RESOLUTION_COLUMNS}
    for name in ("topic_stats", "service_calls", "publisher_health", "rejects", "messages"):
        a = spark.read.parquet(str(tmp_path / "a" / name))
        b = spark.read.parquet(str(tmp_path / "b" / name))
        keep = [c for c in a.columns if c not in ignore]
        assertDataFrameEqual(a.select(keep), b.select(keep))
    exact = {r["topic"]: r for r in pq.read_table(tmp_path / "a" / "topic_stats").to_pylist()}
    for row in pq.read_table(tmp_path / "b" / "topic_stats").to_pylist():
        measured = exact[row["topic"]]
        assert measured["latency_measured"] == measured["messages"]
        assert row["latency_measured"] == 0
        assert row["latency_p50_ms"] is None
        assert row["latency_p50_low_ms"] <= measured["latency_p50_ms"]
        assert measured["latency_p50_ms"] <= row["latency_p50_high_ms"]
        assert row["latency_p50_high_ms"] - row["latency_p50_low_ms"] == pytest.approx(1000)


def test_a_groups_done_and_claims_folders_are_one_stream(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A stateless group of two processed ten messages, odd and even, and a third member
    holds the eleventh: publisher_health counted each member's folder as a stream of its
    own ("4 lost" and "5 lost" while every message was processed once). They are one."""
    rows = [
        _row(seq, 100 + seq, f"k{seq}", f"u/Maildir/.emailmw-crew-done-{member}")
        for seq, member in [(s, "aaaaaaaa" if s % 2 else "bbbbbbbb") for s in range(10)]
    ]
    rows.append(_row(10, 200, "k10", "u/Maildir/.emailmw-crew-claims-cccccccc"))
    # another group's member, and a plain mailbox: streams of their own
    rows.append(_row(0, 100, "o0", "u/Maildir/.emailmw-other-done-dddddddd"))
    rows.append(_row(1, 110, "p1", "u/Maildir"))
    path = tmp_path / "landing"
    path.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=LANDING_SCHEMA), path / "part.parquet")
    expected = spark.createDataFrame(
        [
            (1, "/t", "u/Maildir/.emailmw-crew", 11, 11, 0, 0, 0),
            (1, "/t", "u/Maildir/.emailmw-other", 1, 1, 0, 0, 0),
            (1, "/t", "u/Maildir", 2, 1, 1, 0, 0),
        ],
        "publisher_gid long, topic string, mailbox string, sent long, received long, "
        "lost long, duplicated long, out_of_order long",
    )
    tables = compute(spark, [path], JobOptions(), deduplicate=False)
    assertDataFrameEqual(tables.publisher_health, expected)


def test_the_reports_loss_over_time_sees_a_group_as_one_stream(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The report's loss per time bin counted each group member's folder as a stream of its
    own (the odd messages "lost" in one, the even in the other) while publisher_health said
    0 lost: the two now agree."""
    rows = [
        _row(seq, 100 + seq, f"k{seq}", f"u/Maildir/.emailmw-crew-done-{member}")
        for seq, member in [(s, "aaaaaaaa" if s % 2 else "bbbbbbbb") for s in range(10)]
    ]
    rows.append(_row(12, 200, "k12", "u/Maildir"))  # a plain stream that lost 0..11
    path = tmp_path / "landing"
    path.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=LANDING_SCHEMA), path / "part.parquet")
    tables = compute(spark, [path], JobOptions(), deduplicate=False)
    found = details(tables.messages, 1_000)
    per_stream: dict[str, list[int]] = {}
    for row in found.publisher_bins:
        totals = per_stream.setdefault(row["mailbox"], [0, 0])
        totals[0] += row["received"]
        totals[1] += row["lost"]
    assert per_stream == {"u/Maildir/.emailmw-crew": [10, 0], "u/Maildir": [1, 12]}


def test_the_reports_loss_over_time_in_a_window_counts_no_loss_before_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """In a --since/--until run publisher_health counts only gaps inside the window; the
    report's loss per bin counted every sequence number below the window's first as lost."""
    rows = [_row(seq, 100 + seq, f"k{seq}") for seq in range(20) if seq != 15]
    path = tmp_path / "landing"
    path.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=LANDING_SCHEMA), path / "part.parquet")
    tables = compute(spark, [path], JobOptions(since_ns=110), deduplicate=False)
    found = details(tables.messages, 1_000, windowed=True)
    assert sum(row["lost"] for row in found.publisher_bins) == 1
    assert sum(row["lost"] for row in tables.publisher_health.collect()) == 1


def _row(seq: int, delivered: int, key: str, mailbox: str = "m") -> dict[str, Any]:
    """A landed publish of publisher 1 on /t."""
    return {
        "source": "s",
        "mailbox": mailbox,
        "key": key,
        "status": "ok",
        "kind": "publish",
        "topic": "/t",
        "message_id": f"<{key}@x>",
        "publisher_gid": 1,
        "publisher_seq": seq,
        "source_ns": delivered - 1_000_000,
        "delivered_ns": delivered,
        "size": 10,
    }


def test_transforms_on_a_handmade_landing(spark: SparkSession, tmp_path: Path) -> None:
    """publisher_health from a few rows: a gap, a duplicate and late arrivals, also among
    messages delivered at the same time (then in mbox offset order, else by file name)."""

    row = _row
    rows = [row(0, 10, "a"), row(2, 20, "b"), row(1, 30, "c"), row(2, 40, "d"), row(4, 50, "e")]
    # mailbox n, in an order the ties must not keep: offsets 10 and 9 at one time (9, seq
    # 1, comes first: 10, seq 0, is late), then file names b and a at one time (a, seq 3,
    # comes first: b, seq 2, is late)
    rows += [
        row(0, 10, "0000000000000010", "n"),
        row(1, 10, "0000000000000009", "n"),
        row(2, 20, "b", "n"),
        row(3, 20, "a", "n"),
    ]
    path = tmp_path / "landing"
    path.mkdir()
    # a part as earlier versions landed it: no offset column
    earlier = LANDING_SCHEMA.remove(LANDING_SCHEMA.get_field_index("offset"))
    pq.write_table(pa.Table.from_pylist(rows, schema=earlier), path / "part.parquet")
    expected = spark.createDataFrame(
        # m: seq 1 after 2 is late; the 2nd 2 is a duplicate
        [(1, "/t", "m", 5, 4, 1, 1, 1), (1, "/t", "n", 4, 4, 0, 0, 2)],
        "publisher_gid long, topic string, mailbox string, sent long, received long, "
        "lost long, duplicated long, out_of_order long",
    )
    tables = compute(spark, [path], JobOptions(), deduplicate=False)
    assertDataFrameEqual(tables.publisher_health, expected)
    # this version lands an mbox message's offset as a number too, which orders it the same
    for r in rows:
        r["offset"] = int(r["key"]) if r["key"].isdigit() else None
    pq.write_table(pa.Table.from_pylist(rows, schema=LANDING_SCHEMA), path / "part.parquet")
    tables = compute(spark, [path], JobOptions(), deduplicate=False)
    assertDataFrameEqual(tables.publisher_health, expected)


def test_since_until_and_topic_filters(
    spark: SparkSession, archive: Archive, analyzed: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, _ = analyzed
    summary = _run(spark, [out], tmp_path / "t0", topic_glob="/sensors/t0", report=False)
    assert summary["publish"] == archive.expected["topics"]["/sensors/t0"]["messages"]
    assert summary["request"] == 0
    none = _run(spark, [out], tmp_path / "late", since_ns=2_000_000_000 * 10**9, report=False)
    assert none["publish"] == 0
    everything = _run(spark, [out], tmp_path / "all", until_ns=2_000_000_000 * 10**9, report=False)
    assert everything["publish"] == sum(t["messages"] for t in archive.expected["topics"].values())


def test_an_earlier_run_merges_without_double_counting(
    spark: SparkSession, archive: Archive, analyzed: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, first = analyzed
    other = generate(seed=99, topics=1)
    other.write_mbox(tmp_path / "other.mbox")
    merged = _run(spark, [out, tmp_path / "other.mbox"], tmp_path / "merged", report=False)
    other_count = sum(t["messages"] for t in other.expected["topics"].values())
    assert merged["publish"] == first["publish"] + other_count
    again = _run(
        spark, [tmp_path / "merged", tmp_path / "other.mbox"], tmp_path / "merged", report=False
    )
    assert again["publish"] == merged["publish"]


def _odd_topics() -> list[bytes]:
    """Publishes whose topics need escaping in a partition directory name, or have none."""
    topics = ["/a b/caf\u00e9/\u20ac\U0001f600", "/x=y:z", '/%#"*?[]^{}\\q', "/tab\there", ""]
    mails = [
        (
            f"Received: from m by m; Tue, 17 Nov 2026 10:00:0{i} +0000\n"
            f"Subject: {topic}\nPublisher-GID: {900 + i}\nPublisher-Sequence-Number: 0\n"
            f"Source-Timestamp: {1_794_909_600_000_000_000 + i}\n\nodd\n"
        ).encode()
        for i, topic in enumerate(topics)
    ]
    # no Received and no Date: no delivery time, so no day (and no latency)
    mails.append(
        b"Subject: /undated\nPublisher-GID: 999\nPublisher-Sequence-Number: 0\n"
        b"Source-Timestamp: 1\n\nodd\n"
    )
    # and one in a topic with dated ones: its rate series starts with a null minute
    mails.append(
        b"Subject: /x=y:z\nPublisher-GID: 901\nPublisher-Sequence-Number: 1\n"
        b"Source-Timestamp: 2\n\nodd\n"
    )
    # delivered a second before 1970: its day is 1969-12-31 (floored, not truncated to 0)
    mails.append(
        b"Received: from m by m; Wed, 31 Dec 1969 23:59:59 +0000\nSubject: /old\n"
        b"Publisher-GID: 998\nPublisher-Sequence-Number: 0\nSource-Timestamp: 0\n\nodd\n"
    )
    return mails


def test_a_merge_of_a_run_gives_the_run_s_tables(spark: SparkSession, tmp_path: Path) -> None:
    """A plain run lands the archive and computes its tables; a merge reads an earlier run's
    landed rows (dropping emails landed twice). Both must give the same directories and the
    same rows in every table, filters included, whatever the topic names (an empty one too,
    and ones Spark escapes in a directory name) and delivery times (none, or before 1970)."""
    archive = generate(topics=2, services=1, seed=5)
    mbox = archive.write_mbox(tmp_path / "a.mbox")
    with open(mbox, "ab") as out:
        for raw in _odd_topics():
            out.write(b"From x@example.test Thu Jan  1 00:00:00 2026\n" + raw + b"\n")
    runs: list[dict[str, Any]] = [  # (both filters at once: one pair of runs fewer)
        {},
        {"topic_glob": "/sensors/*", "since_ns": archive.stored[40].delivered_ns,
         "until_ns": archive.stored[90].delivered_ns},
    ]  # fmt: skip
    for i, filters in enumerate(runs):
        landed = _run(spark, [mbox], tmp_path / f"landed{i}", report=False, **filters)
        # the unfiltered run's landed rows, re-read with the same filters
        merged = _run(
            spark, [tmp_path / "landed0"], tmp_path / f"merged{i}", report=False, **filters
        )
        assert landed == merged | {k: landed[k] for k in ("seconds", "phases", "spark_parts")}
        a, b = tmp_path / f"landed{i}", tmp_path / f"merged{i}"
        for name in ("messages", "rejects", "topic_stats", "service_calls", "publisher_health"):
            assertDataFrameEqual(
                spark.read.parquet(str(a / name)), spark.read.parquet(str(b / name))
            )
        dirs = [
            sorted(str(p.relative_to(root / "messages")) for p in (root / "messages").glob("*/*"))
            for root in (a, b)
        ]
        assert dirs[0] == dirs[1], filters
    everything = tmp_path / "landed0" / "messages"
    assert (everything / "topic=%2Fx%3Dy%3Az").is_dir()
    assert (everything / "topic=__HIVE_DEFAULT_PARTITION__").is_dir()
    assert (everything / "topic=%2Fundated" / "day=__HIVE_DEFAULT_PARTITION__").is_dir()
    assert (everything / "topic=%2Fold" / "day=1969-12-31").is_dir()
    rows = spark.read.parquet(str(everything)).collect()
    assert {r["topic"] for r in rows} >= {"/a b/caf\u00e9/\u20ac\U0001f600", "/tab\there", None}
    # a glob matches whole topics, not their ends: this one matches none, on either path
    for source in (mbox, tmp_path / "landed0"):
        with pytest.raises(ConfigError, match="no message's topic matches 'sensors/t1'"):
            _run(spark, [source], tmp_path / "nothing", report=False, topic_glob="sensors/t1")


def test_an_archive_without_services_gets_an_empty_service_calls_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    """No request landed: the service_calls table is still there, empty, with its columns."""
    generate(topics=2, services=0).write_mbox(tmp_path / "a.mbox")
    summary = _run(spark, [tmp_path / "a.mbox"], tmp_path / "out", report=False)
    assert summary["calls"] == 0
    table = spark.read.parquet(str(tmp_path / "out" / "service_calls"))
    assert table.count() == 0
    assert "round_trip_ms" in table.columns


def test_an_empty_archive_lands_as_no_mail(spark: SparkSession, tmp_path: Path) -> None:
    """An empty mbox (a folder with nothing in it yet) has no unit of work: it is analysed
    as an archive of no mail, and merged later as one."""
    (tmp_path / "empty.mbox").touch()
    summary = _run(spark, [tmp_path / "empty.mbox"], tmp_path / "out", report=False)
    assert (summary["publish"], summary["foreign"]) == (0, 0)
    (landed,) = (tmp_path / "out" / "_landing").glob("src=*")
    assert landed.is_dir()
    again = _run(spark, [tmp_path / "out"], tmp_path / "again", report=False)
    assert again["publish"] == 0


def test_command_line(tmp_path: Path) -> None:
    generate(topics=1, services=0).write_mbox(tmp_path / "a.mbox")
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "emailmw",
            "analyze",
            str(tmp_path / "a.mbox"),
            "--out",
            str(tmp_path / "out"),
            "--conf",
            "spark.driver.memory=1g",
            "--profile",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "messages" in ok.stdout
    assert (tmp_path / "out" / "report.html").exists()
    # --profile: where Spark's time went, each table, the overview and the series a line
    lines = ok.stdout.splitlines()
    said = lines[lines.index(next(x for x in lines if x.startswith("where Spark's time went"))) :]
    parts = {line.split()[0]: line.split() for line in said[1:]}
    assert set(parts) == {"publisher_health", "topic_stats", "messages", "service_calls",
                          "rejects", "overview", "series"}, said  # fmt: skip
    for part, words in parts.items():  # NAME S s N jobs N stages N tasks
        assert words[2:] == ["s", words[3], "jobs", words[5], "stages", words[7], "tasks"]
        assert int(words[3]) >= 1, (part, said)  # every part ran Spark jobs of its own
    # nothing but its own lines: not the JVM's (every Spark 4 start printed "WARNING:
    # Using incubator modules: jdk.incubator.vector"), not Spark's
    assert [line for line in ok.stderr.splitlines() if not line.startswith("[analyze]")] == []
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "emailmw",
            "analyze",
            str(tmp_path / "nope"),
            "--out",
            str(tmp_path / "x"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1
    assert missing.stderr.strip().startswith("emailmw: error:")
    assert "Traceback" not in missing.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "emailmw", "analyze"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert usage.returncode == 2


# ---------------------------------------------------------------- what the data supports


@pytest.mark.filterwarnings("error::UserWarning")  # a latency plot with nothing to draw
def test_delivery_times_known_to_the_second_give_bounds_never_negative_latencies(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An mbox has only its Received: headers' seconds: no latency or round trip is
    computed from them (they came out negative), each median is given as bounds that
    hold the true one, and the report says so."""
    coarse = generate(subsecond=False, seed=5)
    coarse.write_mbox(tmp_path / "all.mbox")
    out = tmp_path / "out"
    summary = _run(spark, [tmp_path / "all.mbox"], out)
    assert summary["latency_measured"] == 0
    assert summary["round_trips_measured"] == 0
    for row in pq.read_table(out / "messages").to_pylist():
        assert row["delivered_res_ns"] == 10**9
        assert row["latency_ms"] is None
    for row in pq.read_table(out / "topic_stats").to_pylist():
        assert row["latency_p50_ms"] is None
        assert row["latency_cdf_ms"] is None
        assert row["latency_p50_low_ms"] < row["latency_p50_high_ms"]
        true = coarse.expected["topics"][row["topic"]]["latency_p50_ms"]
        assert row["latency_p50_low_ms"] <= true <= row["latency_p50_high_ms"]
    for row in pq.read_table(out / "service_calls").to_pylist():
        assert row["round_trip_ms"] is None
        if row["answered"]:
            assert row["response_delivered_res_ns"] == 10**9
    page = (out / "report.html").read_text()
    assert "(delivery times known to the second)" in page
    assert "<td>1 s (bounds only)</td>" in page
    assert not re.search(r"<td>-[0-9]", page)  # no negative figure anywhere
    assert "<td>None</td>" not in page


def test_a_window_counts_as_lost_only_the_gaps_inside_it(
    spark: SparkSession, archive: Archive, analyzed: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """--since in the middle of every stream: what was sent before the window is not lost;
    the gaps inside it still are."""
    out, whole = analyzed
    health = {(r["publisher_gid"], r["topic"]): r for r in _table(spark, out, "publisher_health")}
    messages = pq.read_table(out / "messages").to_pylist()
    middle = sorted(r["delivered_ns"] for r in messages if r["kind"] == "publish")[
        len([r for r in messages if r["kind"] == "publish"]) // 2
    ]
    windowed = _run(spark, [out], tmp_path / "w", since_ns=middle, report=False)
    got = {
        (r["publisher_gid"], r["topic"]): r
        for r in _table(spark, tmp_path / "w", "publisher_health")
    }
    assert windowed["lost"] <= whole["lost"]
    for key, row in got.items():
        seqs = sorted(
            r["publisher_seq"]
            for r in messages
            if (r["publisher_gid"], r["topic"]) == key and r["delivered_ns"] >= middle
        )
        assert row["sent"] == seqs[-1] - seqs[0] + 1
        assert row["lost"] == row["sent"] - len(set(seqs))
        assert row["lost"] <= health[key]["lost"]


def test_emailmw_s_own_graph_topic_stays_out_unless_asked_for(
    spark: SparkSession, tmp_path: Path
) -> None:
    from emailmw._core.protocol import Recipients, publish_email
    from emailmw._core.types import Gid
    from emailmw._delivery.graph import GRAPH_TOPIC
    from emailmw.testing.archive import T0, Stored, _store

    graphed = generate(seed=3, topics=1)
    announcer = Gid(424242)
    for seq in range(5):
        announcement = publish_email(
            GRAPH_TOPIC, "node: /talker", recipients=Recipients("a@example.test", ("b@x.test",)),
            gid=announcer, sequence_number=seq, timestamp_ns=T0 + seq * 10**9,
        )  # fmt: skip
        stored: Stored = _store("listener", announcement, T0 + seq * 10**9 + 5_000_000)
        graphed.stored.append(stored)
    graphed.write_maildir(tmp_path / "maildirs")
    plain = _run(spark, [tmp_path / "maildirs"], tmp_path / "plain", report=False)
    topics = {r["topic"] for r in _table(spark, tmp_path / "plain", "topic_stats")}
    assert GRAPH_TOPIC not in topics
    streams = {r["topic"] for r in _table(spark, tmp_path / "plain", "publisher_health")}
    assert GRAPH_TOPIC not in streams
    internal = _run(
        spark, [tmp_path / "maildirs"], tmp_path / "all", report=False, include_internal=True
    )
    assert GRAPH_TOPIC in {r["topic"] for r in _table(spark, tmp_path / "all", "topic_stats")}
    assert internal["publish"] == plain["publish"] + 5
    merged = _run(spark, [tmp_path / "all"], tmp_path / "merged", report=False)  # Spark's filter
    assert merged["publish"] == plain["publish"]


def _analyze_cli(
    *args: str,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
    timeout: float = 45,  # each is a mistake said within seconds, not a minute of retries
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *prefix, "-m", "emailmw", "analyze", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def _one_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if not line.startswith("[analyze]")]
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("emailmw: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_bad_input_is_one_line_said_within_seconds(tmp_path: Path) -> None:
    import os
    import socket

    mbox = generate(topics=1, services=0).write_mbox(tmp_path / "a.mbox")
    out = str(tmp_path / "out")
    _one_line(_analyze_cli("/etc/passwd", "--out", out), "not an mbox file")
    # an --out nobody may write in (root neither): said before the archive is read
    _one_line(_analyze_cli(str(mbox), "--out", "/sys/kernel"), "--out /sys/kernel: cannot write")
    _one_line(_analyze_cli(str(mbox), "--out", out, "--master", "spork://x"), "not a Spark master")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, never listening: connection refused
        _one_line(
            _analyze_cli(str(mbox), "--out", out, "--master", f"spark://127.0.0.1:{port}"),
            "no Spark master answers",
        )
    no_java = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    no_java["PATH"] = str(Path(sys.executable).parent)  # python, not java
    _one_line(_analyze_cli(str(mbox), "--out", out, env=no_java), "no Java runtime found")
    # a JVM that cannot start says why in the one line (its own output stays off the screen)
    _one_line(
        _analyze_cli(str(mbox), "--out", out, "--conf", "spark.driver.memory=lots"),
        "the Spark driver JVM did not start: Invalid maximum heap size",
    )
    no_numpy = ("-c", "import sys; sys.modules['numpy'] = None; import runpy; "
                "runpy.run_module('emailmw', run_name='__main__')")  # fmt: skip
    result = subprocess.run(
        [sys.executable, *no_numpy, "analyze", str(mbox), "--out", out],
        capture_output=True, text=True, timeout=45, check=False,
    )  # fmt: skip
    _one_line(result, "needs the spark extra", "numpy", "pip install")


def test_a_topic_glob_that_matches_nothing_says_so(tmp_path: Path) -> None:
    mbox = generate(topics=1, services=0).write_mbox(tmp_path / "a.mbox")
    # (known only once Spark read the archive: a job, 37 s in a parallel run, past 45 s
    # once in a loaded one; the limit here is against a hang)
    result = _analyze_cli(
        str(mbox), "--out", str(tmp_path / "out"), "--topic", "/nothing/*", "--no-report",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "emailmw: error: --topic: no message's topic matches '/nothing/*' (a glob matches the "
        "whole topic, as in '/sensors/*'; see the topics of a run without --topic)"
    )
    assert "Traceback" not in result.stderr


def test_batches_and_parts_are_one_row_a_message_and_counted(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A batch email of twelve publishes and a message sent as two parts, in a Maildir and
    an mbox: a row per message (a batch's messages keyed email#i, with the batch email's
    own delivery time: its topmost Received, not the submission at the bottom), in the
    batch's order (#2 before #10: none counted out of order), the split message one row
    (was: a row a part), the batch and the parts counted in the summary."""
    from emailmw._core.packing import build_batch, split_email
    from emailmw._core.protocol import Recipients, publish_email
    from emailmw._core.types import Gid
    from emailmw._core.wire import build

    recipients = Recipients("a@example.test", ("b@example.test",))

    def message(seq: int, body: str) -> Any:
        email = publish_email(
            "/packed", body, recipients=recipients, gid=Gid(11), sequence_number=seq,
            timestamp_ns=1_800_000_000 * 10**9 - 10**6 + seq,
        )  # fmt: skip
        return email.with_message_id(f"<{seq}@example.test>")

    received = (
        "Received: by mx; Fri, 15 Jan 2027 08:00:00 +0000\r\n"  # the delivery, on top
        "Received: from submission; Fri, 15 Jan 2027 07:59:57 +0000\r\n"
    )
    batch = received.encode() + build_batch(
        [build(message(i, f"m{i}")) for i in range(12)], from_="a@example.test",
        to=["b@example.test"], message_id="<batch@example.test>",
        timestamp_ns=1_800_000_000 * 10**9, subjects=["/packed"],
    )  # fmt: skip
    whole = message(12, "y" * 30)
    delivered = b"Received: by mx; Fri, 15 Jan 2027 08:00:00 +0000\r\n"
    parts = [delivered + build(p) for p in split_email(whole, 16)]
    assert len(parts) == 2
    root = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True)
    for i, raw in enumerate([batch, *parts]):
        (root / "cur" / f"1800000000.M{i}P1.x,S={len(raw)}:2,S").write_bytes(raw)
    mbox = tmp_path / "packed.mbox"
    mbox.write_bytes(
        b"".join(b"From x Thu Jan  1 00:00:00 2027\n" + r.replace(b"\r\n", b"\n") + b"\n"
                 for r in [batch, *parts])
    )  # fmt: skip
    for source in (root, mbox):
        out = tmp_path / f"out-{source.name}"
        summary = _run(spark, [source], out, report=False)
        assert (summary["publish"], summary["batch_emails"], summary["batched_messages"]) == (
            13, 1, 12,
        )  # fmt: skip
        assert (summary["split_messages"], summary["message_parts"]) == (1, 2)
        assert summary["out_of_order"] == 0  # the batch's own order, by number
        rows = sorted(_table(spark, out, "messages"), key=lambda r: r["publisher_seq"])
        packed = [(r["packed"], r["publisher_seq"]) for r in rows]
        assert packed == [(f"batch {i + 1}/12", i) for i in range(12)] + [("parts 2/2", 12)]
        batch_rows = rows[:12]
        assert [r["key"].rpartition("#")[2] for r in batch_rows] == [str(i) for i in range(1, 13)]
        assert len({r["key"].rpartition("#")[0] for r in batch_rows}) == 1
        assert {r["delivered_ns"] // 10**9 for r in batch_rows} == {1_800_000_000}
        joined = rows[12]
        assert joined["message_id"] == whole.message_id
        assert joined["size"] == sum(len(p) for p in parts) or source == mbox
        if source == root:  # delivered at the Maildir name's microsecond: latency known
            assert all(r["latency_ms"] is not None for r in batch_rows)


def _maildir_of(root: Path, mails: list[tuple[int, bytes]]) -> Path:
    """A Maildir whose files are named as Dovecot names them: (delivered ns, raw)."""
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for i, (delivered, raw) in enumerate(mails):
        secs, nanos = divmod(delivered, 10**9)
        (root / "cur" / f"{secs}.M{nanos // 1000:06d}P{i}.t,S={len(raw)}:2,").write_bytes(raw)
    return root


def _publish(seq: int, stamp: int = 1_790_000_000 * 10**9) -> bytes:
    return (
        f"Subject: /exact\nPublisher-GID: 77\nPublisher-Sequence-Number: {seq}\n"
        f"Source-Timestamp: {stamp}\n\nm\n"
    ).encode()


def test_windows_are_exact_to_the_nanosecond_at_both_bounds(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``--since`` and ``--until`` as written, to the microsecond a Maildir name gives:
    the message delivered exactly at ``since`` counts, the one exactly at ``until`` does
    not; first/last as delivered (once 1 µs low through floating point)."""
    base = 1_790_000_224 * 10**9
    times = [base + 625_040_000 + i * 1_000 for i in range(6)]  # 1 µs apart
    root = _maildir_of(tmp_path / "m", [(t, _publish(i)) for i, t in enumerate(times)])
    since, until = times[1], times[4]
    summary = _run(spark, [root], tmp_path / "out", report=False,
                   since_ns=parse_time(f"{since // 10**9}.{since % 10**9:09d}"),
                   until_ns=parse_time(f"{until // 10**9}.{until % 10**9:09d}"))  # fmt: skip
    assert summary["publish"] == 3
    (stats,) = _table(spark, tmp_path / "out", "topic_stats")
    first = stats["first"].replace(tzinfo=dt.UTC)
    assert first == dt.datetime.fromtimestamp(since // 10**9, dt.UTC) + dt.timedelta(
        microseconds=since % 10**9 // 1000
    )
    assert parse_time("1790000224.62504") == 1_790_000_224_625_040_000
    assert parse_time("2026-09-21T12:17:04.625040001Z") == 1_789_993_024_625_040_001


def test_rejects_keep_their_delivery_time_and_count_in_their_window(
    spark: SparkSession, tmp_path: Path
) -> None:
    base = 1_790_000_000 * 10**9
    html = b"Subject: hi\nContent-Type: text/html\n\n<p>person</p>\n"
    injected = b"Subject: =?utf-8?q?a=0Ab?=\nPublisher-GID: 1\nSource-Timestamp: 1\n\nx\n"
    root = _maildir_of(tmp_path / "m", [
        (base + 10**9, html), (base + 2 * 10**9, injected), (base + 3 * 10**9, _publish(0)),
        (base + 9 * 10**9, html),
    ])  # fmt: skip
    halves = [
        _run(spark, [root], tmp_path / f"out{i}", report=False, since_ns=a, until_ns=b)
        for i, (a, b) in enumerate([(base, base + 5 * 10**9), (base + 5 * 10**9, base + 10**10)])
    ]
    assert [(h["foreign"], h["malformed"]) for h in halves] == [(1, 1), (1, 0)]
    whole = _run(spark, [root], tmp_path / "all", report=False)
    assert whole["foreign"] + whole["malformed"] == 3


def test_a_rerun_after_mail_was_removed_keeps_what_was_landed(
    spark: SparkSession, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The same Maildir analysed again with the earlier run as input, after old mail was
    removed from it: what the earlier run landed stays counted, and the run says so."""
    base = 1_790_000_000 * 10**9
    root = _maildir_of(tmp_path / "m", [(base + i * 10**9, _publish(i)) for i in range(10)])
    out = tmp_path / "out"
    assert _run(spark, [root], out, report=False)["publish"] == 10
    for path in sorted((root / "cur").iterdir())[:4]:
        path.unlink()
    root.joinpath("cur", f"{(base + 20 * 10**9) // 10**9}.M0P99.t,S=1:2,").write_bytes(_publish(10))
    capfd.readouterr()
    _run(spark, [out, root], out, report=False)  # (in this process: no second JVM start)
    assert "kept 4 email(s) of" in capfd.readouterr().err
    again = _run(spark, [out, root], out, report=False)
    assert (again["publish"], again["lost"]) == (11, 0)


def test_an_empty_archive_is_an_empty_report_and_one_line_without_spark(tmp_path: Path) -> None:
    """An empty mbox or a Maildir without mail: one line saying so and where the (empty)
    report is, nothing on standard error, within seconds (no Spark is started: it printed
    a screen of lines and took minutes); the landing is there, for a later merge."""
    (tmp_path / "e.mbox").touch()
    for sub in ("cur", "new", "tmp"):
        (tmp_path / "md" / sub).mkdir(parents=True)
    for source in (tmp_path / "e.mbox", tmp_path / "md"):
        out = tmp_path / f"out-{source.name}"
        result = _analyze_cli(str(source), "--out", str(out))
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout == (
            f"no mail in {source}: nothing to analyze (an empty report: {out}/report.html)\n"
        )
        assert result.stderr == ""
        assert (out / "report.html").is_file()
        assert len(list((out / "_landing").glob("src=*/*.parquet"))) == 1


def _landed_rows(directory: Path) -> int:
    import pyarrow.dataset as ds

    from emailmw._pipeline.landing import LANDING_SCHEMA

    return ds.dataset(str(directory), schema=LANDING_SCHEMA, format="parquet").count_rows()


def test_a_rerun_over_a_grown_archive_lands_only_the_new_mail(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The same output re-run over sources that grew: a Maildir's new files and an mbox's
    appended messages are all that is landed (beside the earlier landing), and the tables
    count everything once; an mbox rewritten at its head is landed again whole."""
    base = 1_790_000_000 * 10**9
    root = _maildir_of(tmp_path / "m", [(base + i * 10**9, _publish(i)) for i in range(10)])
    mbox = tmp_path / "a.mbox"

    def mbox_of(seqs: range) -> bytes:
        own = (_publish(i).replace(b"GID: 77", b"GID: 78") for i in seqs)  # (its publisher)
        return b"".join(b"From x@example.test Thu Jan  1 00:00:00 2026\n" + raw + b"\n"
                        for raw in own)  # fmt: skip

    mbox.write_bytes(mbox_of(range(5)))
    out = tmp_path / "out"
    assert _run(spark, [root, mbox], out, report=False)["publish"] == 15
    (root / "cur" / f"{(base + 30 * 10**9) // 10**9}.M0P99.t,S=1:2,").write_bytes(_publish(10))
    (root / "cur" / f"{(base + 31 * 10**9) // 10**9}.M0P98.t,S=1:2,").write_bytes(_publish(11))
    with mbox.open("ab") as grow:
        grow.write(mbox_of(range(5, 8)))
    again = _run(spark, [out, root, mbox], out, report=False)
    assert (again["publish"], again["lost"], again["duplicated"]) == (20, 0, 0)
    added = sorted((out / "_landing").glob("src=*-inc-*"))
    assert sorted(_landed_rows(d) for d in added) == [2, 3]  # the new files, the new tail
    mbox.write_bytes(mbox_of(range(1, 8)))  # rewritten: its first message gone
    third = _run(spark, [out, root, mbox], out, report=False)
    assert third["publish"] == 20  # (the removed message kept: it was landed)


def test_an_mbox_an_expunge_rewrote_is_landed_again_and_each_email_counted_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """(#61) A mail client's expunge rewrites an mbox: every message after the first one
    removed moves. Re-run with --since-last after one message was removed at its start or
    after its first 64 KiB, and 5 appended: the tables are those of a run from scratch over
    everything the mbox ever held (the removed one kept, as a Maildir's removed files are).
    Was: the removed-at-start case counted every email twice (keyed by offset), the
    after-64-KiB case landed from the old size into the middle of a moved message."""

    def dated(i: int) -> bytes:  # (delivered a second apart, as the server stamped it)
        when = email.utils.formatdate(1_790_000_000 + i, usegmt=True)
        head = f"Message-ID: <m{i}@x>\nDate: {when}\nSubject:".encode()
        return _publish(i, (1_790_000_000 + i) * 10**9).replace(b"Subject:", head)

    def mbox_of(seqs: list[int]) -> bytes:
        return b"".join(
            b"From x@example.test Thu Jan  1 00:00:00 2026\n" + dated(i) + b"padding " * 50
            + b"\n" for i in seqs
        )  # fmt: skip

    everything = list(range(205))
    scratch = tmp_path / "all.mbox"
    scratch.write_bytes(mbox_of(everything))
    want = _run(spark, [scratch], tmp_path / "scratch", report=False)
    want_health = _health(spark, tmp_path / "scratch")
    assert (want["publish"], want["lost"], want["duplicated"]) == (205, 0, 0)
    for removed in (1, 180):
        mbox = tmp_path / f"without-{removed}.mbox"
        mbox.write_bytes(mbox_of(list(range(200))))
        assert (len(mbox_of(list(range(removed)))) > 64 << 10) == (removed == 180)
        out = tmp_path / f"out-{removed}"
        _run(spark, [mbox], out, report=False)
        mbox.write_bytes(mbox_of([i for i in range(200) if i != removed] + everything[200:]))
        again = _run(spark, [out, mbox], out, report=False)  # (--since-last)
        got = {k: again[k] for k in ("publish", "lost", "duplicated", "out_of_order")}
        assert got == {k: want[k] for k in got}, removed
        assert _health(spark, out) == want_health, removed


def test_an_archive_whose_mail_carries_no_delivery_time_is_analysed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """No Received, no Date (a C++ peer's hand-made mail, an export that dropped them):
    the messages have no day; the run completes (was: ArrowInvalid from the group
    statistics, which read the day partition that nothing could type)."""
    mbox = tmp_path / "undated.mbox"
    mbox.write_bytes(b"".join(b"From x@example.test Thu Jan  1 00:00:00 2026\n" + _publish(i)
                              + b"\n" for i in range(3)))  # fmt: skip
    assert _run(spark, [mbox], tmp_path / "out", report=False)["publish"] == 3


def test_a_truncated_mbox_is_said_on_the_terminal(
    spark: SparkSession, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """(#61: said only in the rejects table) An mbox that ends inside its last message
    (a copy cut short): one line says so while the analysis goes on."""
    mbox = tmp_path / "cut.mbox"
    mbox.write_bytes(b"From x@example.test Thu Jan  1 00:00:00 2026\n" + _publish(0)
                     + b"\nFrom x@example.test Thu Jan  1 00:00:00 2026\n"
                     + _publish(1)[:-1])  # fmt: skip
    capfd.readouterr()
    summary = _run(spark, [mbox], tmp_path / "out", report=False)
    assert (summary["publish"], summary["malformed"]) == (1, 1)
    said = capfd.readouterr().err
    assert f"{mbox} ends inside its last message (a copy cut short?)" in said


def test_a_small_run_is_interpreted_and_a_large_one_compiled(spark: SparkSession) -> None:
    """Whole-stage code generation is decided per run: off below 20,000 messages (compiling
    each plan costs more than it saves there), on above or when the size is unknown, and
    a --conf naming it decides."""
    from emailmw._pipeline.session import SMALL_RUN_MESSAGES, set_codegen

    key = "spark.sql.codegen.wholeStage"
    try:
        set_codegen(spark, 674, {})
        assert spark.conf.get(key) == "false"
        set_codegen(spark, SMALL_RUN_MESSAGES, {})
        assert spark.conf.get(key) == "true"
        set_codegen(spark, None, {})
        assert spark.conf.get(key) == "true"
        set_codegen(spark, 674, {key: "true"})
        assert spark.conf.get(key) == "true"
        set_codegen(spark, 2_000_000, {key: "false"})
        assert spark.conf.get(key) == "false"
    finally:
        spark.conf.unset(key)
