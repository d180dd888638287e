"""The report's interactive plots: Bokeh, embedded with BokehJS itself, so that
``report.html`` works offline and alone.

Made for archives with dozens of topics and services: each plot has a selector (the busiest
:data:`SHOWN_FIRST` topics or services are shown at first, any of them can be added or taken
away), legends outside the plot that hide a line on a click, hovers that name what is under
the pointer, log-scaled latencies and round trips, and rates per second everywhere. Like the
PNG plots it draws only the overview's aggregates.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from bokeh.embed import components
from bokeh.layouts import column
from bokeh.models import (  # type: ignore[attr-defined]  # lazily exported names
    ColumnDataSource,
    CustomJS,
    FactorRange,
    HoverTool,
    Legend,
    LegendItem,
    MultiChoice,
)
from bokeh.palettes import Category20_20
from bokeh.plotting import figure
from bokeh.resources import Resources

from .overview import Overview
from .tables import CDF_POINTS

__all__ = ["SHOWN_FIRST", "interactive_plots"]

#: topics or services a plot shows before the reader picks others (the busiest ones)
SHOWN_FIRST = 8
_WIDTH = 1000


def _name(value: str | None) -> str:
    """A topic or service as a legend and a selector name it."""
    if value is None:
        return "(none)"
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


def _selector(title: str, names: list[str], shown: list[str], lines: dict[str, list[Any]]) -> Any:
    """A selector of ``names`` that shows the lines (renderers) of the chosen ones."""
    choice = MultiChoice(title=title, options=names, value=shown, width=_WIDTH)
    choice.js_on_change(
        "value",
        CustomJS(
            args={"lines": lines},
            code="for (const [name, rs] of Object.entries(lines)) {"
            " const on = cb_obj.value.includes(name); for (const r of rs) r.visible = on; }",
        ),
    )
    return choice


def _legend(figure_: Any, items: list[tuple[str, list[Any]]]) -> None:
    if items:
        legend = Legend(
            items=[LegendItem(label=name, renderers=rs) for name, rs in items],
            click_policy="hide",
            label_text_font_size="8pt",
        )
        figure_.add_layout(legend, "right")


def _color(index: int) -> str:
    return str(Category20_20[index % len(Category20_20)])


def _figure(
    title: str, x_axis_type: Literal["linear", "log", "datetime"], x_label: str, y_label: str
) -> Any:
    """A plot of the report's width, with zoom and pan."""
    return figure(
        title=title,
        x_axis_type=x_axis_type,
        x_axis_label=x_label,
        y_axis_label=y_label,
        width=_WIDTH,
        height=380,
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )


def _rates(stats: list[dict[str, Any]]) -> tuple[Any, Any] | None:
    """Messages per second over time (each minute's mean), a line per topic."""
    ranked = sorted(stats, key=lambda s: -s["messages"])
    plot = _figure(
        "Message rate per topic (each minute's mean)", "datetime", "time (UTC)",
        "messages per second",
    )  # fmt: skip
    lines: dict[str, list[Any]] = {}
    for index, stat in enumerate(ranked):
        points = [p for p in stat["per_minute"] or () if p["minute"] is not None]
        if not points:
            continue
        name = _name(stat["topic"])
        source = ColumnDataSource(
            {
                "time": [dt.datetime.fromtimestamp(p["minute"] * 60, dt.UTC) for p in points],
                "rate": [p["messages"] / 60 for p in points],
                "topic": [name] * len(points),
            }
        )
        color = _color(index)
        line = plot.line("time", "rate", source=source, color=color, line_width=2)
        dots = plot.scatter("time", "rate", source=source, color=color, size=4)
        lines[name] = [line, dots]
    if not lines:
        return None
    plot.add_tools(
        HoverTool(
            tooltips=[("topic", "@topic"), ("minute", "@time{%F %T}"), ("msg/s", "@rate{0.00}")],
            formatters={"@time": "datetime"},
        )
    )
    return plot, lines


def _latency(stats: list[dict[str, Any]]) -> tuple[Any, Any] | None:
    """The latency CDF per topic on a log axis (where every latency is positive)."""
    measured = [s for s in sorted(stats, key=lambda s: -s["messages"]) if s["latency_cdf_ms"]]
    if not measured:
        return None
    lowest = min(min(s["latency_cdf_ms"]) for s in measured)
    plot = _figure(
        "Latency CDF per topic (delivery - source timestamp; rows whose delivery time is "
        "known to 1 ms or better)",
        "log" if lowest > 0 else "linear", "latency (ms)", "% of messages",
    )  # fmt: skip
    lines: dict[str, list[Any]] = {}
    percent = [q * 100 for q in CDF_POINTS]
    for index, stat in enumerate(measured):
        name = _name(stat["topic"])
        source = ColumnDataSource(
            {"latency": stat["latency_cdf_ms"], "percent": percent, "topic": [name] * 100}
        )
        lines[name] = [
            plot.line("latency", "percent", source=source, color=_color(index), line_width=2)
        ]
    plot.add_tools(
        HoverTool(tooltips=[("topic", "@topic"), ("p", "@percent{0}"), ("ms", "@latency{0.000}")])
    )
    return plot, lines


def _round_trips(overview: Overview) -> tuple[Any, Any] | None:
    """Every answered call's round trip, a histogram per service (log-scaled axis where
    every bin's edge is positive)."""
    by_service: dict[str, list[dict[str, Any]]] = {}
    for row in overview.round_trips:
        by_service.setdefault(_name(row["service"]), []).append(row)
    if not by_service:
        return None
    calls = {_name(s["service"]): s["calls"] for s in overview.services}
    lowest = min(b["low_ms"] for bins in by_service.values() for b in bins)
    plot = _figure(
        "Service round trips (answered calls per bin)",
        "log" if lowest > 0 else "linear", "round trip (ms)", "calls",
    )  # fmt: skip
    lines: dict[str, list[Any]] = {}
    ranked = sorted(by_service, key=lambda name: -calls.get(name, 0))
    for index, name in enumerate(ranked):
        bins = by_service[name]
        source = ColumnDataSource(
            {
                "left": [b["low_ms"] for b in bins],
                # a bin of no width (every call as fast): a sliver, to be seen
                "right": [max(b["high_ms"], b["low_ms"] * 1.001 + 1e-3) for b in bins],
                "calls": [b["calls"] for b in bins],
                "service": [name] * len(bins),
            }
        )
        color = _color(index)
        quad = plot.quad(
            left="left", right="right", top="calls", bottom=0, source=source,
            fill_color=color, line_color=color, fill_alpha=0.35,
        )  # fmt: skip
        lines[name] = [quad]
    plot.add_tools(
        HoverTool(
            tooltips=[
                ("service", "@service"),
                ("ms", "@left{0.000} to @right{0.000}"),
                ("calls", "@calls"),
            ]
        )
    )
    return plot, lines


def _loss(health: list[dict[str, Any]]) -> Any | None:
    """Lost, duplicated and out-of-order messages of the streams with any (the worst first),
    as stacked horizontal bars."""
    bad = [r for r in health if r["lost"] or r["duplicated"] or r["out_of_order"]][:60]
    if not bad:
        return None
    labels = [f"{r['publisher_gid']} {_name(r['topic'])} ({r['mailbox']})" for r in bad]
    kinds = ["lost", "duplicated", "out_of_order"]
    source = ColumnDataSource(
        {"stream": labels, **{kind: [r[kind] for r in bad] for kind in kinds}}
    )
    plot = figure(
        title="Publishers with lost, duplicated or out-of-order messages (worst first)",
        y_range=FactorRange(factors=list(reversed(labels))),
        x_axis_label="messages",
        width=_WIDTH,
        height=max(200, 22 * len(labels) + 80),
        tools="pan,wheel_zoom,reset,save",
    )
    plot.hbar_stack(
        kinds, y="stream", height=0.8, source=source, color=["#d62728", "#ff7f0e", "#9467bd"],
        legend_label=kinds,
    )  # fmt: skip
    plot.legend.click_policy = "hide"
    plot.x_range.start = 0  # type: ignore[attr-defined]  # a DataRange1d
    plot.add_tools(
        HoverTool(
            tooltips=[("stream", "@stream"), *((kind, f"@{kind}") for kind in kinds)],
        )
    )
    return plot


def _with_selector(made: tuple[Any, Any] | None, title: str) -> Any | None:
    if made is None:
        return None
    plot, lines = made
    names = list(lines)
    shown = names[:SHOWN_FIRST]
    for name, renderers in lines.items():
        for renderer in renderers:
            renderer.visible = name in shown
    _legend(plot, [(name, renderers) for name, renderers in lines.items()])
    return column(_selector(title, names, shown, lines), plot)


def interactive_plots(overview: Overview) -> tuple[str, str, str]:
    """(the resources to put in the page's head: BokehJS itself, inlined; the plots'
    script; their markup). Empty markup when there is nothing to plot."""
    stats = overview.topic_stats
    parts = [
        _with_selector(_rates(stats), f"Topics shown (the {SHOWN_FIRST} busiest at first)"),
        _with_selector(_latency(stats), f"Topics shown (the {SHOWN_FIRST} busiest at first)"),
        _with_selector(
            _round_trips(overview), f"Services shown (the {SHOWN_FIRST} most called at first)"
        ),
        _loss(overview.publisher_health),
    ]
    shown = [part for part in parts if part is not None]
    if not shown:
        return "", "", ""
    script, div = components(column(*shown))
    # BokehJS and its widgets inlined (1.7 MB): the page needs nothing else to work
    resources = Resources(mode="inline", components=["bokeh", "bokeh-widgets"])
    return resources.render(), script, div
