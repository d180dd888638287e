"""The report's plots are plain matplotlib over collected rows: tested without Spark."""

from __future__ import annotations

import datetime as dt
import io
import warnings
from pathlib import Path
from typing import Any

import matplotlib.dates as mdates
import pytest

from emailmw._pipeline.overview import Overview
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
         "round_trip_min_ms": 1.0, "round_trip_p50_low_ms": None, "round_trip_p50_high_ms": None}
        for s in range(services)
    ]  # fmt: skip
    return Overview(
        topic_stats=stats, publisher_health=[], services=calls, rejects=[], kinds={},
        round_trips=round_trips,
    )  # fmt: skip


def test_the_interactive_plots_stay_readable_with_dozens_of_topics_and_services() -> None:
    """Thirty topics and twelve services: every one can be chosen, the busiest eight are
    shown at first, rates are per second, latencies and round trips on log axes."""
    from bokeh.models import LogScale, MultiChoice

    from emailmw._pipeline import explore

    overview = _many(30, 12)
    rates = explore._with_selector(explore._rates(overview.topic_stats), "topics")
    choice, plot = rates.children
    assert isinstance(choice, MultiChoice)
    assert len(choice.options) == 30
    # the busiest first: robot29 has the most messages
    assert choice.value == [f"/fleet/robot{i:02d}/odom" for i in range(29, 21, -1)]
    visible = {r.data_source.data["topic"][0] for r in plot.renderers if r.visible}
    assert visible == set(choice.value)
    busiest = next(r for r in plot.renderers if r.data_source.data["topic"][0] == choice.value[0])
    assert list(busiest.data_source.data["rate"]) == [(120 + 29) / 60] * 5  # per second
    assert len(plot.legend[0].items) == 30  # outside the plot, a click hides a line
    latency = explore._with_selector(explore._latency(overview.topic_stats), "topics")
    assert isinstance(latency.children[1].x_scale, LogScale)
    trips = explore._with_selector(explore._round_trips(overview), "services")
    assert len(trips.children[0].options) == 12
    assert trips.children[0].value == [f"/svc{s}" for s in range(8)]  # the most called
    assert isinstance(trips.children[1].x_scale, LogScale)


def test_the_interactive_report_is_one_page_that_works_offline(tmp_path: Path) -> None:
    """report.html carries BokehJS itself: no script or style is loaded from elsewhere."""
    import re

    overview = _many(3, 2)
    page = write_report(overview, overview.summary(), tmp_path).read_text()
    assert re.findall(r"<script[^>]*\bsrc=", page) == []
    assert re.findall(r"<link[^>]*\bhref=", page) == []
    assert "Bokeh.embed.embed_items" in page  # the plots, drawn by the inlined BokehJS
    assert "/fleet/robot02/odom" in page
    static = (tmp_path / "report-static.html").read_text()
    assert "<script" not in static
    assert static.count("data:image/png;base64,") == 3  # rate, latency, round trips
