"""The report's interactive part: Bokeh, embedded with BokehJS itself, so that
``report.html`` works offline and alone.

Laid out as engineers read a traffic dashboard (Grafana, CARET, Foxglove): one selector of
topics and one of services at the top drive every plot below them (the busiest
:data:`SHOWN_FIRST` are chosen at first; any can be added or taken away); then each
topic's rate over time, at a bin that fits the run (:data:`~.overview.BINS_NS`, seconds
to hours); its latency over time (p50 and the band up to p99) and its latency CDF, on a log
axis, or a symmetric log axis when some latency is at or below zero (clock skew: said in the
title, those counted under the CDF); each stream's loss and
reordering over time; each service's round trip as p50, p90 and p99 with its unanswered
calls; and a drill-down: a topic's publishers and its slowest messages. No legend runs
over a plot (the selectors say what is drawn, hovers name each line), and every plot has
the report's width, so 100 topics and 30 services read as well as 3.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any, Final, Literal

from bokeh.embed import components
from bokeh.layouts import column
from bokeh.models import (  # type: ignore[attr-defined]  # lazily exported names
    BasicTicker,
    ColumnDataSource,
    CustomJS,
    DataTable,
    Div,
    FactorRange,
    FixedTicker,
    HoverTool,
    InlineStyleSheet,
    LogTicker,
    MultiChoice,
    NumberFormatter,
    NumeralTickFormatter,
    Range1d,
    Select,
    StringFormatter,
    TableColumn,
    Whisker,
)
from bokeh.palettes import Category20_20
from bokeh.plotting import figure
from bokeh.resources import Resources

from .overview import Details, Overview
from .tables import CDF_POINTS

__all__ = ["SHOWN_FIRST", "interactive_plots"]

#: topics or services the plots show before the reader picks others (the busiest ones)
SHOWN_FIRST = 8
_NS = 1_000_000_000


def _name(value: str | None) -> str:
    """A topic or service as a selector and a hover name it."""
    if value is None:
        return "(none)"
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


#: Category20's ten dark colours, then its ten light ones: neighbours in the busiest-first
#: order differ in hue and lightness (its pairs, light after dark, read as one colour)
_PALETTE: Final = (*Category20_20[0::2], *Category20_20[1::2])


def _color(index: int) -> str:
    return str(_PALETTE[index % len(_PALETTE)])


def _log_axis(axis: Any) -> None:
    """Labels across a log axis's range, 1, 2 and 5 in each decade, as plain numbers (a
    range within one decade gets labels too)."""
    axis.ticker = LogTicker(mantissas=[1, 2, 5], desired_num_ticks=8)
    axis.formatter = NumeralTickFormatter(format="0,0.[000]")


def _edge_to_edge(plot: Any) -> None:
    """The x axis fits the shown lines with little room beside them (Bokeh's default
    pads a tenth on each side and counts hidden lines)."""
    x_range: Any = plot.x_range
    x_range.range_padding = 0.02
    x_range.only_visible = True


def _bins(items: list[dict[str, Any]]) -> list[int]:
    """Every bin from the first to the last of ``items`` (sorted by bin): the empty ones
    are drawn as empty, never bridged by a line."""
    return list(range(items[0]["bin"], items[-1]["bin"] + 1)) if items else []


#: within this many ms of zero a symmetric log axis is linear
SYMLOG_LINEAR_MS: Final = 1.0


def symlog(value: float) -> float:
    """Where ``value`` (ms) sits on a symmetric log axis: ``sign * log10(1 + |v| / 1 ms)``,
    so that latencies below zero (a publisher's clock ahead of the server's) read as well
    as those above."""
    return math.copysign(math.log10(1.0 + abs(value) / SYMLOG_LINEAR_MS), value)


def symlog_ticks(values: list[float]) -> dict[float, str]:
    """The ticks of a symmetric log axis over ``values`` (ms): 0 and the powers of ten
    each side as far as the values reach, each labelled with the ms it stands for."""
    ticks = {0.0: "0"}
    for sign in (-1, 1):
        reach = max((abs(v) for v in values if v * sign > 0), default=0.0)
        power = 1.0
        while reach > 0:
            ticks[symlog(sign * power)] = f"{sign * power:,.0f}"
            if power >= reach:
                break
            power *= 10
    return dict(sorted(ticks.items()))


def _symlog_axis(axis: Any, values: list[float]) -> None:
    ticks = symlog_ticks(values)
    axis.ticker = FixedTicker(ticks=list(ticks))
    axis.major_label_overrides = ticks


def _figure(
    title: str,
    x_axis_type: Literal["linear", "log", "datetime"],
    x_label: str,
    y_label: str,
    height: int = 320,
) -> Any:
    """A plot of the page's width (it follows the window), with zoom and pan; its x axis
    fits what is shown, edge to edge."""
    plot = figure(
        title=title,
        x_axis_type=x_axis_type,
        x_axis_label=x_label,
        y_axis_label=y_label,
        sizing_mode="stretch_width",
        height=height,
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )
    _edge_to_edge(plot)
    return plot


def _width_text(bin_ns: int) -> str:
    seconds = bin_ns // _NS
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def _time(bin_index: int, bin_ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(bin_index * bin_ns / _NS, dt.UTC)


class _Plots:
    """The plots and what the selectors drive: name -> the renderers of that name."""

    def __init__(self, colors: dict[str, str]) -> None:
        self.colors = colors
        self.by_topic: dict[str, list[Any]] = {}
        self.by_service: dict[str, list[Any]] = {}
        #: each topic's p50-p99 bands (shown for the topics chosen for bands only)
        self.bands: dict[str, list[Any]] = {}

    def add(self, table: dict[str, list[Any]], name: str, renderers: list[Any]) -> None:
        table.setdefault(name, []).extend(renderers)


def _rates(details: Details, plots: _Plots) -> Any | None:
    """Each topic's messages per second, per bin."""
    per_topic: dict[str, list[dict[str, Any]]] = {}
    for item in details.topic_bins:
        per_topic.setdefault(_name(item["topic"]), []).append(item)
    if not per_topic:
        return None
    width = _width_text(details.bin_ns)
    plot = _figure(f"Message rate (per {width})", "datetime", "time (UTC)", "messages per second")
    seconds = details.bin_ns / _NS
    for name, items in per_topic.items():
        items.sort(key=lambda i: i["bin"])
        counts = {i["bin"]: i["messages"] for i in items}
        bins = _bins(items)  # (a bin without messages: a rate of 0, drawn as such)
        source = ColumnDataSource(
            {
                "time": [_time(b, details.bin_ns) for b in bins],
                "rate": [counts.get(b, 0) / seconds for b in bins],
                "messages": [counts.get(b, 0) for b in bins],
                "topic": [name] * len(bins),
            }
        )
        color = plots.colors.get(name, "#777")
        line = plot.line("time", "rate", source=source, color=color, line_width=2)
        dots = plot.scatter("time", "rate", source=source, color=color, size=4)
        plots.add(plots.by_topic, name, [line, dots])
    plot.add_tools(
        HoverTool(
            tooltips=[("topic", "@topic"), ("from", "@time{%F %T}"), ("msg/s", "@rate{0.00}"),
                      ("messages", "@messages")],
            formatters={"@time": "datetime"},
        )
    )  # fmt: skip
    return plot


def _latency_over_time(details: Details, plots: _Plots) -> Any | None:
    """Each topic's latency p50 per bin, with the band up to its p99: on a log axis when
    every value is positive, else on a symmetric log axis (said in the title)."""
    per_topic: dict[str, list[dict[str, Any]]] = {}
    for item in details.topic_bins:
        if item["latency_p50_ms"] is not None:
            per_topic.setdefault(_name(item["topic"]), []).append(item)
    if not per_topic:
        return None
    values = [v for items in per_topic.values() for i in items
              for v in (i["latency_p50_ms"], i["latency_p99_ms"]) if v is not None]  # fmt: skip
    lowest = min(values)
    title = f"Latency over time (p50, band to p99, per {_width_text(details.bin_ns)})"
    if lowest <= 0:
        title += ": symmetric log axis (below 0: the publisher's clock ahead of the server's)"
    plot = _figure(title, "datetime", "time (UTC)", "latency (ms)")
    if lowest > 0:
        plot = figure(
            title=plot.title.text, x_axis_type="datetime", y_axis_type="log",
            x_axis_label="time (UTC)", y_axis_label="latency (ms)", height=320,
            sizing_mode="stretch_width", tools="pan,wheel_zoom,box_zoom,reset,save",
        )  # fmt: skip
        _edge_to_edge(plot)
        _log_axis(plot.yaxis[0])
    else:
        _symlog_axis(plot.yaxis[0], values)
    at = (lambda v: v) if lowest > 0 else symlog  # (where a value sits on the axis)
    gap = math.nan  # (a bin without a latency: the line and band break there)
    for name, items in per_topic.items():
        items.sort(key=lambda i: i["bin"])
        by_bin = {i["bin"]: i for i in items}
        bins = _bins(items)
        p50 = [by_bin[b]["latency_p50_ms"] if b in by_bin else None for b in bins]
        p99 = [by_bin[b]["latency_p99_ms"] if b in by_bin else None for b in bins]
        source = ColumnDataSource(
            {
                "time": [_time(b, details.bin_ns) for b in bins],
                "p50": [gap if v is None else at(v) for v in p50],
                "p99": [gap if v is None else at(v) for v in p99],
                "p50_ms": [gap if v is None else v for v in p50],
                "p99_ms": [gap if v is None else v for v in p99],
                "topic": [name] * len(bins),
            }
        )
        color = plots.colors.get(name, "#777")
        band = plot.varea("time", "p50", "p99", source=source, fill_color=color, fill_alpha=0.2)
        line = plot.line("time", "p50", source=source, color=color, line_width=2)
        dots = plot.scatter("time", "p50", source=source, color=color, size=3)
        plots.add(plots.by_topic, name, [line, dots])
        plots.add(plots.bands, name, [band])
    plot.add_tools(
        HoverTool(
            tooltips=[("topic", "@topic"), ("from", "@time{%F %T}"),
                      ("p50 ms", "@p50_ms{0.000}"), ("p99 ms", "@p99_ms{0.000}")],
            formatters={"@time": "datetime"},
        )
    )  # fmt: skip
    return plot


def _cdf(overview: Overview, plots: _Plots) -> tuple[Any, str] | None:
    """Each topic's latency CDF on a log axis, or, when some latency is at or below zero
    (the publisher's clock ahead of the server's), on a symmetric log axis (said in the
    title), those latencies counted in the note under it."""
    measured = [s for s in overview.topic_stats if s["latency_cdf_ms"]]
    if not measured:
        return None
    values = [v for s in measured for v in s["latency_cdf_ms"]]
    symmetric = min(values) <= 0
    plot = figure(
        title="Latency CDF (delivery - source timestamp, where the delivery time is known "
        "to 1 ms or better)" + (": symmetric log axis" if symmetric else ""),
        x_axis_type="linear" if symmetric else "log",
        x_axis_label="latency (ms, symmetric log)" if symmetric else "latency (ms, log)",
        y_axis_label="% of messages", sizing_mode="stretch_width", height=320,
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )  # fmt: skip
    if symmetric:
        _symlog_axis(plot.xaxis[0], values)
    else:
        _log_axis(plot.xaxis[0])
    percent = [q * 100 for q in CDF_POINTS]
    skewed = []
    for stat in measured:
        name = _name(stat["topic"])
        points = [(v, p) for v, p in zip(stat["latency_cdf_ms"], percent, strict=True)
                  if symmetric or v > 0]  # fmt: skip
        below = sum(1 for v in stat["latency_cdf_ms"] if v <= 0)
        if below:
            skewed.append(f"{name}: {below} % of its measured latencies at or below 0 ms")
        if not points:
            continue
        source = ColumnDataSource(
            {"latency": [symlog(v) if symmetric else v for v, _ in points],
             "latency_ms": [v for v, _ in points], "percent": [p for _, p in points],
             "topic": [name] * len(points)}
        )  # fmt: skip
        line = plot.line("latency", "percent", source=source, color=plots.colors.get(name, "#777"),
                         line_width=2)  # fmt: skip
        plots.add(plots.by_topic, name, [line])
    plot.add_tools(
        HoverTool(
            tooltips=[("topic", "@topic"), ("p", "@percent{0}"), ("ms", "@latency_ms{0.000}")]
        )
    )
    note = ""
    if skewed:
        note = (
            "At or below 0 ms (clocks apart: the publisher's ahead of the server's), drawn "
            "left of 0 on the symmetric log axis: " + "; ".join(skewed)
        )
    return plot, note


def _loss(details: Details, plots: _Plots) -> Any | None:
    """Lost and out-of-order messages per bin, a line each per stream with any."""
    streams: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for item in details.publisher_bins:
        streams.setdefault((item["publisher_gid"], item["topic"], item["mailbox"]), []).append(item)
    bad = {k: v for k, v in streams.items() if any(i["lost"] or i["out_of_order"] for i in v)}
    if not bad:
        return None
    plot = _figure(
        f"Lost and out-of-order messages (per {_width_text(details.bin_ns)}; solid: lost, "
        "dashed: out of order)",
        "datetime", "time (UTC)", "messages",
    )  # fmt: skip
    for (gid, topic, mailbox), items in bad.items():
        items.sort(key=lambda i: i["bin"])
        name = _name(topic)
        by_bin = {i["bin"]: i for i in items}
        bins = _bins(items)  # (a bin without messages: nothing lost there, drawn as 0)
        source = ColumnDataSource(
            {
                "time": [_time(b, details.bin_ns) for b in bins],
                "lost": [by_bin[b]["lost"] if b in by_bin else 0 for b in bins],
                "late": [by_bin[b]["out_of_order"] if b in by_bin else 0 for b in bins],
                "stream": [f"{gid} {name} ({mailbox})"] * len(bins),
            }
        )
        color = plots.colors.get(name, "#777")
        lost = plot.line("time", "lost", source=source, color=color, line_width=2)
        late = plot.line("time", "late", source=source, color=color, line_dash="dashed")
        plots.add(plots.by_topic, name, [lost, late])
    # counts: whole numbers on the axis, from zero
    plot.yaxis.ticker = BasicTicker(min_interval=1)
    plot.yaxis.formatter = NumeralTickFormatter(format="0")
    plot.y_range.start = 0
    plot.add_tools(
        HoverTool(
            tooltips=[("stream", "@stream"), ("from", "@time{%F %T}"), ("lost", "@lost"),
                      ("out of order", "@late")],
            formatters={"@time": "datetime"},
        )
    )  # fmt: skip
    return plot


def _round_trips(overview: Overview, plots: _Plots) -> Any | None:
    """Each service's round trip: p50 (dot), p90 and p99 (the whisker's ends), with its
    unanswered calls in the label."""
    services = [s for s in overview.services if s["round_trip_p50_ms"] is not None]
    if not services:
        return None
    labels = [f"{_name(s['service'])} ({s['calls'] - s['answered']} unanswered)" for s in services]
    source = ColumnDataSource(
        {
            "service": labels,
            "name": [_name(s["service"]) for s in services],
            "p50": [s["round_trip_p50_ms"] for s in services],
            "p90": [s["round_trip_p90_ms"] for s in services],
            "p99": [s["round_trip_p99_ms"] for s in services],
            "calls": [s["calls"] for s in services],
            "answered": [s["answered"] for s in services],
        }
    )
    lowest = min(s["round_trip_p50_ms"] for s in services)
    # the axis fits the whiskers' ends (p99) too, not only the dots
    highest = max(s["round_trip_p99_ms"] or s["round_trip_p50_ms"] for s in services)
    x_range = (
        Range1d(start=lowest / 1.5, end=highest * 1.5)
        if lowest > 0
        else Range1d(start=min(0.0, lowest * 1.1), end=highest * 1.1 or 1.0)
    )
    plot = figure(
        title="Service round trips (dot: p50; whisker: p90 to p99)",
        y_range=FactorRange(factors=list(reversed(labels))), x_range=x_range,
        x_axis_type="log" if lowest > 0 else "linear", x_axis_label="round trip (ms)",
        sizing_mode="stretch_width", height=max(180, 26 * len(labels) + 80),
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )  # fmt: skip
    if lowest > 0:
        _log_axis(plot.xaxis[0])
    plot.add_layout(Whisker(source=source, base="service", lower="p90", upper="p99",
                            dimension="width"))  # fmt: skip
    dots = plot.scatter("p50", "service", source=source, size=9, color="#1f77b4")
    for name in source.data["name"]:
        plots.add(plots.by_service, name, [])
    plot.add_tools(
        HoverTool(
            renderers=[dots],
            tooltips=[("service", "@name"), ("calls", "@calls"), ("answered", "@answered"),
                      ("p50 ms", "@p50{0.000}"), ("p90 ms", "@p90{0.000}"),
                      ("p99 ms", "@p99{0.000}")],
        )
    )  # fmt: skip
    return plot


def _drilldown(overview: Overview, details: Details, topics: list[str]) -> Any | None:
    """A topic chosen: its publishers (sent, received, lost, duplicated, out of order) and
    its slowest messages (subject, GID, sequence number, Message-ID, latency)."""
    if not topics:
        return None
    pub_all = {
        "topic": [_name(r["topic"]) for r in overview.publisher_health],
        "publisher_gid": [r["publisher_gid"] for r in overview.publisher_health],
        "mailbox": [r["mailbox"] for r in overview.publisher_health],
        **{k: [r[k] for r in overview.publisher_health]
           for k in ("sent", "received", "lost", "duplicated", "out_of_order")},
    }  # fmt: skip
    slow_all = {
        "topic": [_name(r["topic"]) for r in details.slowest],
        "publisher_gid": [r["publisher_gid"] for r in details.slowest],
        "publisher_seq": [r["publisher_seq"] for r in details.slowest],
        "message_id": [r["message_id"] for r in details.slowest],
        "latency_ms": [r["latency_ms"] for r in details.slowest],
    }

    def only(data: dict[str, list[Any]], topic: str) -> dict[str, list[Any]]:
        keep = [i for i, t in enumerate(data["topic"]) if t == topic]
        return {k: [v[i] for i in keep] for k, v in data.items()}

    first = topics[0]
    publishers = ColumnDataSource(only(pub_all, first))
    slowest = ColumnDataSource(only(slow_all, first))
    # what an empty table of a topic means, said under it
    pub_why = {t: "" if t in pub_all["topic"] else (
        f"No publisher of {t} numbered its messages (no Publisher-GID with sequence "
        "numbers, as a C++ rmw_email peer sends): its loss and order cannot be told.")
        for t in topics}  # fmt: skip
    slow_why = {t: "" if t in slow_all["topic"] else (
        f"No latency of {t} is known to 1 ms or better (its delivery times are coarser, or "
        "its messages carry no source timestamp).") for t in topics}  # fmt: skip
    pub_note = Div(text=pub_why[first], css_classes=["why-empty"])
    slow_note = Div(text=slow_why[first], css_classes=["why-empty"])
    choose = Select(title="Drill down into a topic", options=topics, value=first, width=400)
    choose.js_on_change(
        "value",
        CustomJS(
            args={
                "pubs": publishers,
                "slow": slowest,
                "pub_all": pub_all,
                "slow_all": slow_all,
                "pub_note": pub_note,
                "slow_note": slow_note,
                "pub_why": pub_why,
                "slow_why": slow_why,
            },
            code="""
            function only(data, topic) {
              const out = {};
              const keep = data.topic.map((t, i) => t === topic ? i : -1).filter(i => i >= 0);
              for (const [k, v] of Object.entries(data)) out[k] = keep.map(i => v[i]);
              return out;
            }
            // each table emptied first: a grid given as many rows as it shows keeps
            // drawing the rows it has (BokehJS's DataTable redraws on a new row count)
            for (const [source, all] of [[pubs, pub_all], [slow, slow_all]]) {
              source.data = only(all, null);
              source.data = only(all, cb_obj.value);
            }
            pub_note.text = pub_why[cb_obj.value];
            slow_note.text = slow_why[cb_obj.value];
            """,
        ),
    )
    headings = {"publisher_gid": "publisher GID", "out_of_order": "out of order",
                "publisher_seq": "sequence", "message_id": "Message-ID",
                "latency_ms": "latency (ms)"}  # fmt: skip

    def table(source: Any, everything: dict[str, list[Any]], keys: list[str],
              height: int) -> Any:  # fmt: skip
        """Columns as wide as their widest cell of any topic (never cut: the table scrolls
        sideways when they do not fit), numbers formatted as in the tables."""
        columns = []
        for key in keys:
            title = headings.get(key, key)
            if key == "latency_ms":
                formatter, texts = NumberFormatter(format="0,0.000"), [
                    f"{v:,.3f}" for v in everything[key] if v is not None]  # fmt: skip
            elif key in ("sent", "received", "lost", "duplicated", "out_of_order",
                         "publisher_seq"):  # fmt: skip
                formatter, texts = NumberFormatter(format="0,0"), [
                    f"{v:,}" for v in everything[key] if v is not None]  # fmt: skip
            else:
                formatter, texts = StringFormatter(), [str(v) for v in everything[key]]
            chars = max([len(title), *map(len, texts)])
            columns.append(TableColumn(field=key, title=title, formatter=formatter,
                                       width=8 * chars + 24))  # fmt: skip
        return DataTable(
            source=source, columns=columns, autosize_mode="none",
            sizing_mode="stretch_width", height=height, index_position=None,
        )  # fmt: skip

    return column(
        choose,
        Div(text="<b>Its publishers</b>"),
        table(
            publishers,
            pub_all,
            ["publisher_gid", "mailbox", "sent", "received", "lost", "duplicated", "out_of_order"],
            160,
        ),
        pub_note,
        Div(text="<b>Its slowest messages</b>"),
        table(
            slowest, slow_all, ["publisher_gid", "publisher_seq", "message_id", "latency_ms"], 160
        ),
        slow_note,
        sizing_mode="stretch_width",
    )


def _chip_colors(colors: dict[str, str]) -> InlineStyleSheet:
    """Each chosen topic's chip in its lines' colour (the selector draws in a shadow root:
    the rules go in with it)."""

    def text(color: str) -> str:  # dark on the palette's light colours, else white
        hexes = color.lstrip("#")
        if len(hexes) == 3:
            hexes = "".join(c * 2 for c in hexes)
        try:
            r, g, b = (int(hexes[i : i + 2], 16) for i in (0, 2, 4))
        except ValueError:
            return "#fff"
        return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"

    rules = "".join(
        f'.choices__list--multiple .choices__item[data-value="{json.dumps(name)[1:-1]}"]'
        f"{{background-color:{color};border-color:{color};color:{text(color)}}}"
        for name, color in colors.items()
    )
    return InlineStyleSheet(css=rules)


def _selector(
    title: str, names: list[str], lines: dict[str, list[Any]], colors: dict[str, str],
    bands: dict[str, list[Any]] | None = None,
) -> list[Any]:  # fmt: skip
    """A selector of ``names`` that shows, in every plot, the lines of the chosen ones;
    each chip in the colour of its lines. With ``bands``, a second one chooses whose
    p50-p99 bands are drawn (the busiest topic's at first; a band is drawn while its
    topic is shown): eight bands over each other read as one haze."""
    shown = names[:SHOWN_FIRST]
    banded = [n for n in names if n in (bands or {})][:1]
    for name, renderers in lines.items():
        for renderer in renderers:
            renderer.visible = name in shown
    for name, renderers in (bands or {}).items():
        for renderer in renderers:
            renderer.visible = name in shown and name in banded
    choice = MultiChoice(title=title, options=names, value=shown, sizing_mode="stretch_width",
                         stylesheets=[_chip_colors(colors)])  # fmt: skip
    if not bands:
        choice.js_on_change("value", CustomJS(
            args={"lines": lines},
            code="for (const [name, rs] of Object.entries(lines)) {"
            " const on = cb_obj.value.includes(name); for (const r of rs) r.visible = on; }",
        ))  # fmt: skip
        return [choice]
    band_choice = MultiChoice(
        title="Latency bands (p50 to p99) drawn for", options=[n for n in names if n in bands],
        value=banded, sizing_mode="stretch_width", stylesheets=[_chip_colors(colors)],
    )  # fmt: skip
    redraw = CustomJS(
        args={"lines": lines, "bands": bands, "shown": choice, "banded": band_choice},
        code="""
        for (const [name, rs] of Object.entries(lines)) {
          const on = shown.value.includes(name);
          for (const r of rs) r.visible = on;
        }
        for (const [name, rs] of Object.entries(bands)) {
          const on = shown.value.includes(name) && banded.value.includes(name);
          for (const r of rs) r.visible = on;
        }
        """,
    )
    choice.js_on_change("value", redraw)
    band_choice.js_on_change("value", redraw)
    return [choice, band_choice]


def interactive_plots(overview: Overview, details: Details | None) -> tuple[str, str, str]:
    """(the resources to put in the page's head: BokehJS itself, inlined; the plots'
    script; their markup). Empty markup when there is nothing to plot."""
    topics = [_name(s["topic"]) for s in sorted(overview.topic_stats, key=lambda s: -s["messages"])]
    services = [_name(s["service"]) for s in sorted(overview.services, key=lambda s: -s["calls"])]
    plots = _Plots({name: _color(i) for i, name in enumerate(topics)})
    parts: list[Any] = []
    if details is not None:
        parts += [_rates(details, plots), _latency_over_time(details, plots)]
    cdf = _cdf(overview, plots)
    if cdf is not None:
        parts.append(cdf[0])
        if cdf[1]:
            parts.append(Div(text=cdf[1], sizing_mode="stretch_width"))
    if details is not None:
        parts.append(_loss(details, plots))
    parts.append(_round_trips(overview, plots))
    if details is not None:
        parts.append(_drilldown(overview, details, topics))
    shown = [part for part in parts if part is not None]
    if not shown:
        return "", "", ""
    selectors = []
    if plots.by_topic:
        selectors += _selector(
            f"Topics shown in every plot (the {SHOWN_FIRST} busiest at first)",
            [t for t in topics if t in plots.by_topic],
            plots.by_topic,
            plots.colors,
            plots.bands,
        )
    if len(services) > 1:
        selectors.append(Div(text=f"{len(services)} services, all in the round-trip plot."))
    script, div = components(column(*selectors, *shown, sizing_mode="stretch_width"))
    # BokehJS and its widgets and tables inlined: the page needs nothing else to work
    resources = Resources(mode="inline", components=["bokeh", "bokeh-widgets", "bokeh-tables"])
    return resources.render(), script, div
