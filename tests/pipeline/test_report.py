"""The report's plots are plain matplotlib over collected rows: tested without Spark."""

from __future__ import annotations

import datetime as dt
import io
import warnings
from pathlib import Path
from typing import Any

import matplotlib.dates as mdates
import pytest

from emailmw._pipeline.job import Overview
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
    assert list(line.get_ydata()) == [3, 3]
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
