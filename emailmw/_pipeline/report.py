"""The report: ``report.html``, interactive (Bokeh, see ``explore.py``), and
``report-static.html`` with ``plots/*.png`` for non-interactive use; each page
self-contained (BokehJS or the PNGs inlined) and working offline.

Everything plotted is an aggregate computed by Spark and collected in the
:class:`~emailmw._pipeline.overview.Overview` (the per-topic latency CDF and per-minute counts in
``topic_stats``, per-publisher figures, a histogram of every answered call's round trip):
the report itself is plain Python and needs no Spark session, and the driver never holds
the archive.

Plots are drawn on :class:`matplotlib.figure.Figure` objects, never through pyplot's global
state, so :func:`topic_plots` may run in another thread while Spark still computes the
other tables (one caller at a time per figure; nothing else is shared).
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import logging
from pathlib import Path
from typing import Any

import matplotlib.dates as mdates
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .health import HealthThresholds, health_verdict
from .overview import Details, Overview
from .tables import CDF_POINTS

__all__ = [
    "latency_plot",
    "measured",
    "loss_figure",
    "loss_plot",
    "rate_figure",
    "rate_plot",
    "round_trip_figure",
    "topic_plots",
    "write_report",
]

# matplotlib says on stderr each font family it falls back from (a font cache another
# process is rebuilding, a system without the family): nothing a user can act on, and the
# fallback draws the report (it once put 21 such lines on `emailmw analyze`'s stderr)
logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)

_MAX_ROWS = 200
# integer columns that name something rather than count it: no thousands separators
_IDENTIFIERS = frozenset({"publisher_gid", "client_gid", "request_seq"})


def _png(fig: Figure, path: Path) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    path.write_bytes(buffer.getvalue())
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _escaped(text: str) -> str:
    """``text`` as a plot shows it: control characters, which a topic may hold and the fonts
    have no glyph for (matplotlib warned about each), escaped as Python escapes them."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _label(name: str | None) -> str | None:
    """A topic or service as a legend names it (None: not in the legend)."""
    return None if name is None else _escaped(name)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "<p><em>none</em></p>"

    def cell(column: str, value: Any) -> str:
        if value is None:
            return "(none)" if column in ("topic", "service") else "n/a"
        if column in _IDENTIFIERS:
            return html.escape(str(value))
        if isinstance(value, float):
            return f"{value:,.2f}"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        if isinstance(value, dt.datetime):  # UTC-aware, as the tables hold them
            return html.escape(value.isoformat(sep=" ", timespec="milliseconds"))
        return html.escape(str(value))

    head = "".join(
        f"<th>{html.escape(_HEADINGS.get(c, c.replace('_', ' ')))}</th>" for c in columns
    )
    body = "".join(
        "<tr>" + "".join(f"<td>{cell(c, r.get(c))}</td>" for c in columns) + "</tr>"
        for r in rows[:_MAX_ROWS]
    )
    more = f"<p>... and {len(rows) - _MAX_ROWS} more rows</p>" if len(rows) > _MAX_ROWS else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def measured(
    value: float | None, count: int | None, total: int, low: float | None, high: float | None
) -> str:
    """A latency or round-trip median as the data supports it: the value when every row's
    delivery time was fine enough, the value and how many rows it rests on when some were,
    else the bounds of the median (``low``, ``high``: the unmeasurable rows' median lies
    within them), or, without even those, that it is not measurable."""
    if value is not None and count:
        return f"{value:,.2f}" if count == total else f"{value:,.2f} ({count:,} of {total:,})"
    if low is not None and high is not None:
        return f"between {low:,.0f} and {high:,.0f} (delivery times known to the second)"
    return "not measurable at this resolution"


def resolution(measured_rows: int, total: int) -> str:
    """How well the latencies of a topic (or the round trips of a service) are known: a
    latency is computed only where the delivery time is known to 1 ms or better (a Dovecot
    Maildir file name says the microsecond); a ``Received:`` or ``Date:`` header says the
    second, which gives bounds only."""
    if total == 0:
        return "n/a"
    if measured_rows == total:
        return "<= 1 ms (all)"
    if measured_rows == 0:
        return "1 s (bounds only)"
    return f"<= 1 ms for {measured_rows:,}; 1 s for {total - measured_rows:,}"


def _topic_display(stat: dict[str, Any]) -> dict[str, Any]:
    row = dict(stat)
    row["latency_resolution"] = resolution(stat["latency_measured"], stat["messages"])
    row["mean_rate_per_s"] = (
        "n/a (one instant)" if stat["mean_rate_per_s"] is None else stat["mean_rate_per_s"]
    )
    row["latency_p50_ms"] = measured(
        stat["latency_p50_ms"], stat["latency_measured"], stat["messages"],
        stat["latency_p50_low_ms"], stat["latency_p50_high_ms"],
    )  # fmt: skip
    return row


def _service_display(service: dict[str, Any]) -> dict[str, Any]:
    row = dict(service)
    row["round_trip_resolution"] = resolution(service["round_trip_measured"], service["answered"])
    row["round_trip_p50_ms"] = measured(
        service["round_trip_p50_ms"], service["round_trip_measured"], service["answered"],
        service["round_trip_p50_low_ms"], service["round_trip_p50_high_ms"],
    )  # fmt: skip
    return row


def rate_figure(stats: list[dict[str, Any]]) -> Figure:
    """Messages per second over time (each minute's mean), a line per topic. The time axis
    spans the traffic (padded by 5 %, at least a minute each side) in UTC, also when it
    lasted a minute:
    left to itself, matplotlib spreads a single point over four years. Publishes without a
    delivery time (a null minute in the series) have no place on it and are left out; the
    topic's count in the tables includes them."""
    fig = Figure(figsize=(9, 4))
    ax = fig.subplots()
    span: list[dt.datetime] = []
    for stat in stats:
        series = [point for point in stat["per_minute"] or () if point["minute"] is not None]
        minutes: Any = [dt.datetime.fromtimestamp(p["minute"] * 60, dt.UTC) for p in series]
        span += minutes
        rates = [p["messages"] / 60 for p in series]
        ax.plot(minutes, rates, marker=".", label=_label(stat["topic"]))
    if span:
        first, last = min(span), max(span)
        pad = max((last - first) * 0.05, dt.timedelta(minutes=1))
        ax.set_xlim(first - pad, last + pad)  # type: ignore[arg-type]
    locator = mdates.AutoDateLocator(tz=dt.UTC)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    formatter = mdates.ConciseDateFormatter(locator, tz=dt.UTC)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(formatter)
    ax.set(title="Message rate per topic", xlabel="time (UTC)", ylabel="messages per second")
    _legend_outside(ax)
    return fig


_LEGEND_MOST = 15


def _legend_outside(ax: Any) -> None:
    """The legend right of the plot, never over it; at most :data:`_LEGEND_MOST` entries
    (the first drawn: the busiest), and a line saying how many more there are."""
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return
    title = None
    if len(labels) > _LEGEND_MOST:
        title = f"{len(labels) - _LEGEND_MOST} more not listed"
        handles, labels = handles[:_LEGEND_MOST], labels[:_LEGEND_MOST]
    ax.legend(handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0, title=title, title_fontsize="small")  # fmt: skip


def topic_plots(stats: list[dict[str, Any]], plots: Path) -> list[tuple[str, str]]:
    """The per-topic plots (message rate over time, latency CDF) of ``topic_stats`` rows,
    written to ``plots`` (which must exist): ``(title, base64 PNG)`` in report order."""
    if not stats:
        return []
    return [rate_plot(stats, plots), latency_plot(stats, plots)]


def rate_plot(stats: list[dict[str, Any]], plots: Path) -> tuple[str, str]:
    """The first of :func:`topic_plots`; it needs only each row's ``topic`` and
    ``per_minute``."""
    return ("Message rate over time", _png(rate_figure(stats), plots / "rate.png"))


def latency_plot(stats: list[dict[str, Any]], plots: Path) -> tuple[str, str]:
    """The second of :func:`topic_plots`: on a log-scaled latency axis (a linear one puts
    99 % of the messages on one line; symmetric-log when some latency is not positive, as
    a skewed clock makes it)."""
    fig = Figure(figsize=(9, 4))
    ax = fig.subplots()
    lowest = min((min(s["latency_cdf_ms"]) for s in stats if s["latency_cdf_ms"]), default=1.0)
    if lowest > 0:
        ax.set_xscale("log")
    else:
        ax.set_xscale("symlog", linthresh=1.0)
    for stat in stats:
        if stat["latency_cdf_ms"]:
            points = [q * 100 for q in CDF_POINTS]
            ax.plot(stat["latency_cdf_ms"], points, label=_label(stat["topic"]))
    ax.set(
        title="Latency CDF per topic (delivery - source timestamp)",
        xlabel="latency (ms)",
        ylabel="% of messages",
    )
    if ax.get_legend_handles_labels()[1]:
        _legend_outside(ax)
    elif not any(stat["latency_cdf_ms"] for stat in stats):
        ax.text(
            0.5, 0.5, "no latency measurable: delivery times known only to the second",
            ha="center", va="center", transform=ax.transAxes,
        )  # fmt: skip
    return ("Latency CDF", _png(fig, plots / "latency_cdf.png"))


def round_trip_figure(round_trips: list[dict[str, Any]]) -> Figure:
    """The overview's round-trip histogram: calls per bin, a colour per service."""
    by_service: dict[str, list[dict[str, Any]]] = {}
    for row in round_trips:
        by_service.setdefault(row["service"], []).append(row)
    fig = Figure(figsize=(9, 4))
    ax = fig.subplots()
    for service, bins in sorted(by_service.items()):
        ax.bar(
            [b["low_ms"] for b in bins],
            [b["calls"] for b in bins],
            width=[max(b["high_ms"] - b["low_ms"], 1e-3) for b in bins],
            align="edge",
            alpha=0.6,
            label=_label(service),
        )
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # calls are counted
    ax.set(title="Service round trips", xlabel="round trip (ms)", ylabel="calls")
    _legend_outside(ax)
    return fig


def loss_figure(health: list[dict[str, Any]]) -> Figure:
    """Lost and duplicated messages of the first 30 ``publisher_health`` rows (the worst
    first, as the overview orders them), on an axis from zero; when none lost or duplicated
    anything, the plot says so instead of showing an empty axis around zero."""
    top = health[:30]
    fig = Figure(figsize=(9, max(3, len(top) * 0.3)))
    ax = fig.subplots()
    labels = [_escaped(f"{r['publisher_gid']} {r['topic']}") for r in top]
    ax.barh(labels, [r["lost"] for r in top], label="lost")
    ax.barh(
        labels,
        [r["duplicated"] for r in top],
        left=[r["lost"] for r in top],
        label="duplicated",
    )
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # messages are counted
    most = max(r["lost"] + r["duplicated"] for r in top)
    if most:
        ax.set_xlim(0, most * 1.05)
    else:
        ax.set_xlim(0, 1)
        ax.text(
            0.5, 0.5, "no message lost or duplicated", transform=ax.transAxes,
            ha="center", va="center",
        )  # fmt: skip
    ax.set(title="Loss and duplicates per publisher", xlabel="messages")
    ax.legend(fontsize="small", loc="lower right")
    return fig


def loss_plot(health: list[dict[str, Any]], plots: Path) -> tuple[str, str] | None:
    """The loss plot of ``publisher_health`` rows in the overview's order, written to
    ``plots`` (which must exist): ``(title, base64 PNG)``, or None without publishers."""
    if not health:
        return None
    return ("Loss per publisher", _png(loss_figure(health), plots / "loss.png"))


#: column headings as the report shows them (the tables keep their names)
_HEADINGS = {
    "mean_rate_per_s": "mean rate (/s)",
    "latency_p50_ms": "latency p50 (ms)",
    "latency_p90_ms": "p90 (ms)",
    "latency_p99_ms": "p99 (ms)",
    "latency_max_ms": "max (ms)",
    "latency_resolution": "delivery times known to",
    "duplicate_responses": "duplicate responses",
    "round_trip_p50_ms": "round trip p50 (ms)",
    "round_trip_p90_ms": "p90 (ms)",
    "round_trip_p99_ms": "p99 (ms)",
    "round_trip_max_ms": "max (ms)",
    "round_trip_resolution": "delivery times known to",
    "publisher_gid": "publisher GID",
    "out_of_order": "out of order",
}


_VERDICT_COLORS = {"healthy": "#1a7f37", "degraded": "#9a6700", "unhealthy": "#cf222e"}


def _verdict(overview: Overview, summary: dict[str, Any], limits: HealthThresholds) -> str:
    level, lines = health_verdict(overview, summary, limits)
    color = _VERDICT_COLORS[level]
    return (
        f"<div class='verdict' data-level='{level}' style='border-left:6px solid {color};"
        f"padding:.4em .8em;margin-bottom:1em'><b style='color:{color}'>{level}</b>: "
        + "; ".join(html.escape(line) for line in lines)
        + "</div>"
    )


def _figures(overview: Overview, summary: dict[str, Any]) -> str:
    """The overview engineers look at first: messages, loss, latency, calls, rejects."""
    stats = overview.topic_stats
    health = overview.publisher_health
    sent = sum(h["sent"] for h in health)
    lost = summary.get("lost", 0)
    p50s = [s["latency_p50_ms"] for s in stats if s["latency_p50_ms"] is not None]
    worst = max(
        (s for s in stats if s["latency_p99_ms"] is not None),
        key=lambda s: s["latency_p99_ms"], default=None,
    )  # fmt: skip
    calls, answered = summary.get("calls", 0), summary.get("answered", 0)
    rejects = sum(summary.get(k, 0) for k in ("foreign", "malformed", "unreadable"))
    tiles = [
        ("messages", f"{summary.get('publish', 0):,}",
         f"{len(stats)} topics, {len(health)} publishers"),
        ("lost", f"{lost:,}", f"{100 * lost / sent:.2f} % of {sent:,} sent" if sent else "-"),
        ("out of order", f"{summary.get('out_of_order', 0):,}",
         f"{summary.get('duplicated', 0):,} duplicated"),
        ("latency p50", f"{min(p50s):,.1f} to {max(p50s):,.1f} ms" if p50s else "n/a",
         "across topics"),
        ("worst p99", f"{worst['latency_p99_ms']:,.1f} ms" if worst else "n/a",
         _escaped(str(worst["topic"])) if worst else ""),
        ("calls answered", f"{answered:,} of {calls:,}" if calls else "no calls",
         f"{summary.get('duplicate_responses', 0):,} duplicate responses" if calls else ""),
        ("rejected mail", f"{rejects:,}", "foreign, malformed or unreadable"),
    ]  # fmt: skip
    return (
        "<div class='tiles'>"
        + "".join(
            f"<div class='tile'><div class='k'>{html.escape(k)}</div>"
            f"<div class='v'>{html.escape(v)}</div><div class='n'>{html.escape(n)}</div></div>"
            for k, v, n in tiles
        )
        + "</div>"
    )


def write_report(
    overview: Overview,
    summary: dict[str, Any],
    out: Path,
    *,
    topic_images: list[tuple[str, str]] | None = None,
    loss_image: tuple[str, str] | None = None,
    groups: list[dict[str, Any]] | None = None,
    run: dict[str, Any] | None = None,
    details: Details | None = None,
    thresholds: HealthThresholds | None = None,
) -> Path:
    """Write ``out/report.html`` and ``out/plots/*.png``. ``topic_images`` and
    ``loss_image``: what :func:`topic_plots` and :func:`loss_plot` returned for these same
    rows, drawn earlier into ``out/plots`` (each is drawn here when not given). ``groups``:
    the ``group_stats`` rows, a section when there are any. ``run``: what made the report
    (sources, master, filters). ``details``: the time series and drill-downs of the
    interactive page (without them it draws what the overview holds).

    The page opens on the figures that say how the traffic went, then the plots (one
    topic selector drives them all), then the tables; the run's settings and the full
    summary close it."""
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    stats = overview.topic_stats
    images = list(topic_images) if topic_images is not None else topic_plots(stats, plots)

    if overview.round_trips:
        fig = round_trip_figure(overview.round_trips)
        images.append(("Round-trip histogram", _png(fig, plots / "round_trips.png")))

    health = overview.publisher_health
    loss = loss_image if loss_image is not None else loss_plot(health, plots)
    if loss is not None:
        images.append(loss)

    services = overview.services
    rejects = overview.rejects

    summary_rows = [{"figure": k.replace("_", " "), "value": v} for k, v in summary.items()]
    span = [t for stat in stats for t in (stat.get("first"), stat.get("last")) if t is not None]
    run_rows = [{"setting": k, "value": v} for k, v in (run or {}).items()]
    if span:
        run_rows.append({"setting": "messages delivered", "value": f"{min(span)} to {max(span)}"})
    tables = [
        (
            "Topics",
            _table(
                [_topic_display(stat) for stat in stats],
                ["topic", "messages", "bytes", "first", "last", "mean_rate_per_s",
                 "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_max_ms",
                 "latency_resolution"],
            ),
        ),
        (
            "Services",
            _table(
                [_service_display(service) for service in services],
                ["service", "calls", "answered", "duplicate_responses", "round_trip_p50_ms",
                 "round_trip_p90_ms", "round_trip_p99_ms", "round_trip_max_ms",
                 "round_trip_resolution"],
            ),
        ),
        (
            "Publishers",
            _table(
                health,
                ["publisher_gid", "topic", "mailbox", "sent", "received", "lost",
                 "duplicated", "out_of_order"],
            ),
        ),
        ("Rejected mail", _table(rejects, ["status", "reason", "emails"])),
    ]  # fmt: skip
    if groups:  # delivery-mode groups (docs/delivery-modes.md): who processed what
        tables.append(
            ("Delivery groups", _table(groups, ["group", "member", "processed", "redelivered"]))
        )
    closing = [
        ("Run", _table(run_rows, ["setting", "value"])),
        ("Summary", _table(summary_rows, ["figure", "value"])),
    ]
    figures = (
        f"<h2>Overview</h2>{_verdict(overview, summary, thresholds or HealthThresholds())}"
        f"{_figures(overview, summary)}"
    )
    tables_html = "".join(f"<h2>{html.escape(t)}</h2>{content}" for t, content in tables)
    closing_html = "".join(
        f"<details><summary>{html.escape(t)}</summary>{content}</details>" for t, content in closing
    )
    pngs = "".join(
        f'<h2>{html.escape(title)}</h2><img alt="{html.escape(title)}" '
        f'src="data:image/png;base64,{data}">'
        for title, data in images
    )
    (out / "report-static.html").write_text(
        _page("", figures + pngs + tables_html + closing_html), encoding="utf-8"
    )
    from .explore import interactive_plots

    resources, script, plots_div = interactive_plots(overview, details)
    body = figures
    if plots_div:
        body += f"<h2>Plots</h2>{plots_div}"
    body += tables_html + closing_html
    body += "<p>The same report without scripts: report-static.html, plots/*.png.</p>"
    path = out / "report.html"
    path.write_text(_page(resources + script, body), encoding="utf-8")
    return path


def _page(head: str, body: str) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>emailmw traffic report"
        "</title><style>body{font-family:sans-serif;margin:2em}"
        "table{border-collapse:collapse;margin-bottom:1em;font-size:90%}"
        "td,th{border:1px solid #ccc;padding:.25em .5em;text-align:right}"
        "th{background:#f3f3f3;font-weight:600}img{max-width:100%}"
        ".tiles{display:flex;flex-wrap:wrap;gap:.8em;margin-bottom:1em}"
        ".tile{border:1px solid #ccc;border-radius:6px;padding:.6em 1em;min-width:10em}"
        ".tile .k{color:#555;font-size:85%}.tile .v{font-size:150%;font-weight:600}"
        ".tile .n{color:#777;font-size:80%}details{margin:.5em 0}summary{cursor:pointer}"
        f"</style>{head}</head><body><h1>emailmw traffic report</h1>"
        f"<p>Generated {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}.</p>{body}</body></html>"
    )
