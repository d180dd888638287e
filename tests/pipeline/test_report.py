"""The report's plots are plain matplotlib over collected rows: tested without Spark."""

from __future__ import annotations

import datetime as dt
import io
import warnings
from pathlib import Path
from typing import Any

import matplotlib.dates as mdates
import pytest

from emailmw._pipeline.overview import Details, Overview
from emailmw._pipeline.report import loss_figure, rate_figure, round_trip_figure, write_report

START = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


def _stats(*minutes: int) -> list[dict[str, Any]]:
    first = int(START.timestamp()) // 60
    return [{"topic": "/t", "per_minute": [{"minute": first + m, "messages": 3} for m in minutes]}]


def _x_range(stats: list[dict[str, Any]]) -> tuple[dt.datetime, dt.datetime]:
    low, high = rate_figure(stats).axes[0].get_xlim()
    return mdates.num2date(low, tz=dt.UTC), mdates.num2date(high, tz=dt.UTC)


def test_rate_plot_of_one_minute_of_traffic_spans_minutes_not_years() -> None:
    low, high = _x_range(_stats(0))
    assert low == pytest.approx(START - dt.timedelta(minutes=1), abs=dt.timedelta(seconds=1))
    assert high == pytest.approx(START + dt.timedelta(minutes=1), abs=dt.timedelta(seconds=1))


def test_rate_plot_spans_the_traffic_with_a_margin() -> None:
    low, high = _x_range(_stats(0, 30, 100))
    margin = dt.timedelta(minutes=5)  # 5 % of the 100 minutes
    assert low == pytest.approx(START - margin, abs=dt.timedelta(seconds=1))
    assert high == pytest.approx(
        START + dt.timedelta(minutes=100) + margin, abs=dt.timedelta(seconds=1)
    )


def test_rate_plot_leaves_out_publishes_without_a_delivery_time() -> None:
    """An undated publish (no Received or Date header, not a Dovecot file name) is counted
    under a null minute, first in its topic's series: the plot shows the dated minutes."""
    stats = _stats(0, 2)
    stats[0]["per_minute"].insert(0, {"minute": None, "messages": 1})
    (line,) = rate_figure(stats).axes[0].get_lines()
    assert list(line.get_ydata()) == [3 / 60, 3 / 60]  # per second, as in the tables
    assert _x_range(stats) == _x_range(_stats(0, 2))


def test_plots_escape_control_characters_in_names() -> None:
    """A topic may hold a tab: the legend shows it escaped, and no font is asked for a glyph
    it does not have (matplotlib warned about each)."""
    stats = _stats(0, 1)
    stats[0]["topic"] = "/tab\there"
    fig = rate_figure(stats)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.savefig(io.BytesIO(), format="png")
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["/tab\\there"]


def _health(*counts: tuple[int, int]) -> list[dict[str, Any]]:
    return [
        {"publisher_gid": gid, "topic": "/t", "lost": lost, "duplicated": duplicated}
        for gid, (lost, duplicated) in enumerate(counts)
    ]


def test_loss_plot_of_a_healthy_archive_says_so_on_an_axis_from_zero() -> None:
    ax = loss_figure(_health((0, 0), (0, 0))).axes[0]
    assert ax.get_xlim() == (0, 1)
    assert [t.get_text() for t in ax.texts] == ["no message lost or duplicated"]


def test_loss_plot_counts_from_zero_in_whole_messages() -> None:
    ax = loss_figure(_health((5, 2), (1, 0))).axes[0]
    low, high = ax.get_xlim()
    assert low == 0
    assert high >= 7
    assert not ax.texts
    assert all(float(t).is_integer() for t in ax.get_xticks())


def test_round_trip_histogram_counts_whole_calls() -> None:
    bins = [
        {"service": "/s", "bin": b, "low_ms": 22 + b, "high_ms": 23 + b, "calls": 1}
        for b in (0, 2, 5)
    ]
    ax = round_trip_figure(bins).axes[0]
    assert all(float(t).is_integer() for t in ax.get_yticks())


def test_report_prints_publisher_gids_as_identifiers(tmp_path: Path) -> None:
    health = [
        {
            "publisher_gid": 1318484409, "topic": "/t", "mailbox": "m", "sent": 12345,
            "received": 12345, "lost": 0, "duplicated": 0, "out_of_order": 0,
        }
    ]  # fmt: skip
    overview = Overview(
        topic_stats=[], publisher_health=health, services=[], rejects=[], kinds={},
        round_trips=[],
    )  # fmt: skip
    page = write_report(overview, overview.summary(), tmp_path).read_text()
    assert "<td>1318484409</td>" in page
    assert "<td>12,345</td>" in page  # counts keep their separators


def _many(topics: int, services: int) -> Overview:
    first = int(START.timestamp()) // 60
    stats = [
        {
            "topic": f"/fleet/robot{i:02d}/odom",
            "messages": 1000 + i,
            "per_minute": [{"minute": first + m, "messages": 120 + i} for m in range(5)],
            "latency_cdf_ms": [0.5 * (i + 1) * (k + 1) for k in range(100)],
            "bytes": 1,
            "first": START,
            "last": START,
            "mean_rate_per_s": 2.0,
            "latency_p50_ms": 1.0,
            "latency_p90_ms": 1.0,
            "latency_p99_ms": 1.0,
            "latency_max_ms": 1.0,
            "latency_measured": 1000 + i,
            "latency_p50_low_ms": None,
            "latency_p50_high_ms": None,
        }
        for i in range(topics)
    ]
    round_trips = [
        {"service": f"/svc{s}", "bin": b, "low_ms": 1.0 + b, "high_ms": 2.0 + b, "calls": 3}
        for s in range(services)
        for b in range(40)
    ]
    calls = [
        {"service": f"/svc{s}", "calls": 120 - s, "answered": 120 - s, "duplicate_responses": 0,
         "round_trip_measured": 120 - s, "round_trip_p50_ms": 2.0, "round_trip_max_ms": 41.0,
         "round_trip_p90_ms": 10.0, "round_trip_p99_ms": 30.0,
         "round_trip_min_ms": 1.0, "round_trip_p50_low_ms": None, "round_trip_p50_high_ms": None}
        for s in range(services)
    ]  # fmt: skip
    return Overview(
        topic_stats=stats, publisher_health=[], services=calls, rejects=[], kinds={},
        round_trips=round_trips,
    )  # fmt: skip


def _details(topics: int) -> Details:
    """Each topic's five bins of 10 s (the widths the job picks for a 50 s run)."""
    first = int(START.timestamp()) // 10
    bins = [
        {"topic": f"/fleet/robot{i:02d}/odom", "bin": first + b, "messages": 100 + i,
         "latency_p50_ms": 1.0 + i, "latency_p99_ms": 5.0 + i}
        for i in range(topics) for b in range(5)
    ]  # fmt: skip
    slowest = [
        {"topic": f"/fleet/robot{i:02d}/odom", "publisher_gid": 7, "publisher_seq": k,
         "message_id": f"<{i}.{k}@x>", "latency_ms": 9.0 - k, "delivered_ns": 0}
        for i in range(topics) for k in range(3)
    ]  # fmt: skip
    return Details(10 * 10**9, bins, [], slowest)


def test_the_interactive_plots_stay_readable_with_a_hundred_topics_and_thirty_services() -> None:
    """100 topics and 30 services: one selector (every topic can be chosen, the busiest
    eight shown at first) drives every topic plot; rates per second at the run's bin;
    latencies and round trips on log axes; no legend over any plot; 30 services as rows."""
    from bokeh.models import FactorRange, Legend, LogScale, MultiChoice, Plot

    from emailmw._pipeline import explore

    overview = _many(100, 30)
    plots = explore._Plots({f"/fleet/robot{i:02d}/odom": "#000" for i in range(100)})
    rates = explore._rates(_details(100), plots)
    busiest = next(r for r in rates.renderers if r.data_source.data["topic"][0].endswith("99/odom"))
    assert list(busiest.data_source.data["rate"]) == [(100 + 99) / 10] * 5  # per second
    latency = explore._latency_over_time(_details(100), plots)
    assert isinstance(latency.y_scale, LogScale)
    cdf, note = explore._cdf(overview, plots)
    assert isinstance(cdf.x_scale, LogScale)
    assert note == ""
    trips = explore._round_trips(overview, plots)
    assert isinstance(trips.x_scale, LogScale)
    assert isinstance(trips.y_range, FactorRange)
    assert len(trips.y_range.factors) == 30
    (choice,) = explore._selector("topics", list(plots.by_topic), plots.by_topic, plots.colors)
    assert isinstance(choice, MultiChoice)
    assert len(choice.options) == 100
    assert choice.value == list(plots.by_topic)[:8]
    visible = {r.data_source.data["topic"][0] for r in rates.renderers if r.visible}
    assert visible == set(choice.value)
    for plot in (rates, latency, cdf, trips):
        assert isinstance(plot, Plot)
        assert not [item for item in plot.right + plot.center if isinstance(item, Legend)]


def test_the_report_reads_at_a_glance() -> None:
    """#61 item 6: neighbours in the palette differ (Category20's light/dark pairs read as
    one colour); a bin without messages is a rate of 0 and a gap in the latency line and
    band (were: bridged by a straight line); log axes labelled 1-2-5 in every decade;
    latency bands drawn for the chosen topics only (the busiest at first); drill-down
    columns as wide as their widest cell, numbers formatted; an empty drill-down table says
    why; time plots fit their lines edge to edge."""
    import math

    from bokeh.models import Div, LogTicker, MultiChoice, NumberFormatter
    from bokeh.palettes import Category20_20

    from emailmw._pipeline import explore

    pairs = {frozenset(Category20_20[i : i + 2]) for i in range(0, 20, 2)}
    palette = [explore._color(i) for i in range(20)]
    assert len(set(palette)) == 20
    assert all(frozenset(palette[i : i + 2]) not in pairs for i in range(19))

    first = int(START.timestamp()) // 10
    topic = "/sparse"
    bins = [{"topic": topic, "bin": first + b, "messages": 3, "latency_p50_ms": 2.0,
             "latency_p99_ms": 4.0} for b in (0, 1, 5)]  # fmt: skip
    bins += [{"topic": "/busy", "bin": first + b, "messages": 50, "latency_p50_ms": 1.0,
              "latency_p99_ms": 3.0} for b in range(6)]  # fmt: skip
    slowest = [{"topic": "/busy", "publisher_gid": 1017763228, "publisher_seq": 12345,
                "message_id": "<a-long-message-id.1234567890@robot.example.test>",
                "latency_ms": 1234.5678, "delivered_ns": 0}]  # fmt: skip
    details = Details(10 * 10**9, bins, [], slowest)
    plots = explore._Plots({"/busy": explore._color(0), topic: explore._color(1)})
    rates = explore._rates(details, plots)
    sparse = next(r for r in rates.renderers if r.data_source.data["topic"][0] == topic)
    assert list(sparse.data_source.data["rate"]) == [0.3, 0.3, 0.0, 0.0, 0.0, 0.3]
    assert rates.x_range.range_padding <= 0.02
    latency = explore._latency_over_time(details, plots)
    line = next(r for r in latency.renderers if r.data_source.data["topic"][0] == topic
                and type(r.glyph).__name__ == "Line")  # fmt: skip
    drawn = list(line.data_source.data["p50"])
    assert [math.isnan(v) for v in drawn] == [False, False, True, True, True, False]
    assert isinstance(latency.yaxis[0].ticker, LogTicker)
    assert list(latency.yaxis[0].ticker.mantissas) == [1, 2, 5]
    selectors = explore._selector("topics", ["/busy", topic], plots.by_topic, plots.colors,
                                  plots.bands)  # fmt: skip
    assert [type(s) for s in selectors] == [MultiChoice, MultiChoice]
    assert selectors[1].value == ["/busy"]
    shown = {r.data_source.data["topic"][0] for rs in plots.bands.values() for r in rs
             if r.visible}  # fmt: skip
    assert shown == {"/busy"}

    overview = Overview(
        topic_stats=[], rejects=[], kinds={}, round_trips=[], services=[],
        publisher_health=[{"topic": "/busy", "publisher_gid": 1017763228, "mailbox": "m",
                           "sent": 12000, "received": 11990, "lost": 10, "duplicated": 0,
                           "out_of_order": 0}],
    )  # fmt: skip
    drill = explore._drilldown(overview, details, [topic, "/busy"])
    tables = [c for c in drill.children if type(c).__name__ == "DataTable"]
    notes = [c for c in drill.children if isinstance(c, Div) and "why-empty" in c.css_classes]
    assert "numbered its messages" in notes[0].text  # (/sparse has no publisher rows)
    assert "No latency of /sparse" in notes[1].text
    widths = {c.field: c.width for t in tables for c in t.columns}
    assert widths["publisher_gid"] >= 8 * len("1017763228")
    assert widths["message_id"] >= 8 * len(slowest[0]["message_id"])
    formats = {c.field: c.formatter for c in tables[1].columns}
    assert isinstance(formats["latency_ms"], NumberFormatter)
    assert formats["latency_ms"].format == "0,0.000"


def test_the_interactive_report_is_one_page_that_works_offline(tmp_path: Path) -> None:
    """report.html carries BokehJS itself: no script or style is loaded from elsewhere."""
    import re

    overview = _many(3, 2)
    page = write_report(overview, overview.summary(), tmp_path, details=_details(3)).read_text()
    assert re.findall(r"<script[^>]*\bsrc=", page) == []
    assert re.findall(r"<link[^>]*\bhref=", page) == []
    assert "Bokeh.embed.embed_items" in page  # the plots, drawn by the inlined BokehJS
    assert "/fleet/robot02/odom" in page
    static = (tmp_path / "report-static.html").read_text()
    assert "<script" not in static
    assert static.count("data:image/png;base64,") == 3  # rate, latency, round trips


class _Overview:
    def __init__(self, health: list[dict[str, Any]], stats: list[dict[str, Any]]) -> None:
        self.publisher_health = health
        self.topic_stats = stats


def test_the_verdict_says_in_a_word_and_in_sentences_what_is_wrong() -> None:
    """Healthy when nothing is over its threshold; loss or unanswered calls beyond theirs
    make it unhealthy; a slow p99 or a clock ahead of the server's, degraded; each finding
    a sentence; the thresholds the user gives are the ones applied."""
    from emailmw._pipeline.health import HealthThresholds, health_verdict

    limits = HealthThresholds()
    health = [{"sent": 1000}]
    fine = [{"topic": "/a", "latency_p50_ms": 12.0, "latency_p99_ms": 40.0}]
    summary = {"lost": 0, "calls": 5, "answered": 5}
    assert health_verdict(_Overview(health, fine), summary, limits)[0] == "healthy"
    level, lines = health_verdict(_Overview(health, fine), {**summary, "lost": 3}, limits)
    assert (level, lines) == ("unhealthy", ["3 of 1,000 messages lost (0.30 %, over 0.1 %)"])
    relaxed = HealthThresholds(loss_percent=1.0)
    assert health_verdict(_Overview(health, fine), {**summary, "lost": 3}, relaxed)[0] == "healthy"
    slow = [{"topic": "/b", "latency_p50_ms": -250.0, "latency_p99_ms": 2500.0}]
    level, lines = health_verdict(_Overview(health, slow), {**summary, "answered": 4}, limits)
    assert level == "unhealthy"
    assert lines == [
        "1 topic(s) with a p99 latency over 1000 ms (worst /b: 2,500 ms)",
        "1 service call(s) unanswered",
        "a publisher's clock is ahead of the server's (/b's median latency is -250.0 ms): "
        "latencies are off by as much",
    ]
    assert health_verdict(_Overview(health, slow), summary, limits)[0] == "degraded"
    # (#61) a median below zero within --max-skew-ms: still said, the verdict still healthy
    ahead = [{"topic": "/c", "latency_p50_ms": -10.6, "latency_p99_ms": 40.0}, *fine]
    assert health_verdict(_Overview(health, ahead), summary, limits) == ("healthy", [
        "no loss, latency, unanswered call or clock skew over its threshold",
        "a publisher's clock is ahead of the server's (/c's median latency is -10.6 ms): "
        "latencies are off by as much"])  # fmt: skip


def test_a_symmetric_log_axis_reads_latencies_either_side_of_zero() -> None:
    """Latencies below zero (a publisher's clock ahead of the server's) sit on a symmetric
    log axis as mirror images of those above, linear within 1 ms of zero, in order; its
    ticks are 0 and the powers of ten each side as far as the values go, labelled with the
    milliseconds they stand for."""
    from emailmw._pipeline.explore import symlog, symlog_ticks

    assert symlog(0.0) == 0.0
    assert symlog(-150.0) == -symlog(150.0)
    assert abs(symlog(0.01) - 0.01 / 2.302585) < 1e-3  # (near zero: about v / ln 10)
    values = [-149.0, -60.0, -0.5, 0.0, 0.3, 12.0, 50.0]
    assert [symlog(v) for v in values] == sorted(symlog(v) for v in values)
    ticks = symlog_ticks(values)
    assert list(ticks.values()) == ["-1,000", "-100", "-10", "-1", "0", "1", "10", "100"]
    assert list(ticks) == sorted(ticks)
    assert symlog_ticks([2.0, 40.0]) == {0.0: "0", symlog(1): "1", symlog(10): "10",
                                        symlog(100): "100"}  # fmt: skip


def test_a_font_matplotlib_falls_back_from_is_not_said_on_stderr(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """matplotlib warns of each font family it cannot find and falls back from (a font
    cache another process is rebuilding: 21 such lines once reached ``emailmw analyze``'s
    stderr, failing a census run): nothing a user can act on, so the report says none."""
    from matplotlib import font_manager

    with caplog.at_level("WARNING"):
        font_manager.fontManager.findfont("No Such Family For Emailmw")
    assert not [r for r in caplog.records if r.name.startswith("matplotlib")]
