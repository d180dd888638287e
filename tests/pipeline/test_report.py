"""The report's plots are plain matplotlib over collected rows: tested without Spark."""

from __future__ import annotations

import datetime as dt
from typing import Any

import matplotlib.dates as mdates
import pytest

from emailmw._pipeline.report import rate_figure

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
