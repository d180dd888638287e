"""``emailmw analyze``: traffic analytics of mail archives with Spark (``docs/pipeline.md``)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from .._core.errors import ConfigError
from .common import Commands

__all__ = ["register"]


class _Stopped(BaseException):
    """SIGTERM arrived (``timeout``, a service manager): the run ends as at ctrl-c."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    analyze = commands.add_parser(
        "analyze",
        parents=[common],
        help="traffic analytics of mail archives (Spark)",
        description="Read mail archives (Maildir, mbox, imap[s]:// folder, or an earlier "
        "output directory) and write Parquet tables and report.html to --out.",
    )
    analyze.add_argument("sources", nargs="+", metavar="SOURCE")
    analyze.add_argument("--out", required=True, type=Path, metavar="DIR")
    analyze.add_argument("--master", default="local[*]", help="Spark master URL")
    analyze.add_argument("--since", metavar="T", help="ISO 8601 or epoch seconds")
    analyze.add_argument("--until", metavar="T", help="ISO 8601 or epoch seconds")
    analyze.add_argument("--topic", metavar="GLOB", help="only topics matching GLOB")
    analyze.add_argument(
        "--include-internal",
        action="store_true",
        help="keep emailmw's own topics (/_emailmw/..., the graph) in the tables",
    )
    analyze.add_argument(
        "--conf",
        type=_conf,
        action="append",
        default=[],
        metavar="K=V",
        help="Spark configuration (repeatable)",
    )
    analyze.add_argument(
        "--keystore",
        metavar="DIR",
        default=os.environ.get("EMAILMW_SECURITY_KEYSTORE") or None,
        help="verify signed mail against this keystore (default: EMAILMW_SECURITY_KEYSTORE)",
    )
    analyze.add_argument("--no-report", action="store_true", help="tables only")
    analyze.add_argument(
        "--profile", action="store_true",
        help="say where Spark's time went: each table's, the overview's and the report "
        "series' seconds, Spark jobs, stages and tasks",
    )  # fmt: skip
    analyze.add_argument(
        "--since-last", action="store_true",
        help="an earlier run's --out DIR: land only what each source gained since (the "
        "same as giving DIR as a source too)",
    )  # fmt: skip
    health = analyze.add_argument_group("the report's verdict (over any: degraded or unhealthy)")
    health.add_argument("--max-loss", type=float, default=0.1, metavar="PERCENT",
                        help="messages lost (default 0.1)")  # fmt: skip
    health.add_argument("--max-p99-ms", type=float, default=1000.0, metavar="MS",
                        help="a topic's p99 latency (default 1000)")  # fmt: skip
    health.add_argument("--max-unanswered", type=int, default=0, metavar="N",
                        help="unanswered service calls (default 0)")  # fmt: skip
    health.add_argument("--max-skew-ms", type=float, default=100.0, metavar="MS",
                        help="a clock ahead of the server's (default 100)")  # fmt: skip
    analyze.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        from .._pipeline.analyze import AnalyzeRequest, analyze, parse_time
        from .._pipeline.health import HealthThresholds

        # what the spark extra installs, and Spark's Arrow path needs on driver and executors
        wanted = ("pyspark", "pyarrow", "pandas", "numpy", "matplotlib", "bokeh")
        missing = next((name for name in wanted if importlib.util.find_spec(name) is None), None)
    except ImportError as exc:
        missing = exc.name or str(exc)
    if missing:
        raise ConfigError(
            f"analyze needs the spark extra, which is not installed (no module {missing!r}): "
            "pip install 'emailmw[spark]'",
            source="analyze",
        )

    if args.keystore is not None:
        from .._security import Keystore

        Keystore(args.keystore)  # one line now, not in a worker, if it is not one
    sources = list(args.sources)
    if args.since_last and (args.out / "_landing").is_dir() and str(args.out) not in sources:
        sources.insert(0, str(args.out))
    request = AnalyzeRequest(
        sources=sources,
        out=args.out,
        master=args.master,
        since_ns=parse_time(args.since) if args.since else None,
        until_ns=parse_time(args.until) if args.until else None,
        topic_glob=args.topic,
        include_internal=args.include_internal,
        conf=dict(args.conf),
        config=args.config,
        report=not args.no_report,
        release_spark=True,
        keystore=args.keystore,
        debug=bool(getattr(args, "debug", False)),
        thresholds=HealthThresholds(
            args.max_loss, args.max_p99_ms, args.max_unanswered, args.max_skew_ms
        ),
    )
    from .._pipeline.jvm import end_driver, stop_session, stopping

    requested: list[int] = []  # the signal that asked the run to stop

    running = [True]

    def stopped(signum: int, frame: object) -> None:
        requested.append(signum)
        stopping()  # (calls cut short on other threads: said by the one line below)
        if running[0]:  # (once the run is over, what it asked is only noted)
            raise _Stopped(signum)

    main = threading.current_thread() is threading.main_thread()
    previous: dict[int, Any] = {}
    if main:
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, stopped)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # (not ignored)
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, stopped)
    summary: dict[str, Any] | None = None
    try:
        summary = analyze(request)
        running[0] = False
    except BaseException as exc:
        running[0] = False
        # (an interrupt may surface as what it broke: a call to the JVM cut short)
        if not requested and not isinstance(exc, KeyboardInterrupt):
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            stop_session()
            raise
        requested.append(signal.SIGINT)
    if requested:
        # nothing outlives the command: the driver JVM is ended here (a few seconds for
        # its shutdown hooks, then killed); once is enough
        for signum in previous:
            signal.signal(signum, signal.SIG_IGN)
        end_driver()
        name = signal.Signals(requested[0])
        print(f"emailmw: analyze stopped by {name.name}: {args.out} may hold a partial run; "
              "run the command again", file=sys.stderr)  # fmt: skip
        return 128 + name.value
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    stop_session()
    assert summary is not None
    if summary.get("empty"):
        where = f"{args.out}/report.html" if not args.no_report else str(args.out)
        print(
            f"no mail in {', '.join(args.sources)}: nothing to analyze (an empty report: {where})"
        )
        return 0
    unmeasured = summary["latency_measured"] < summary["publish"] or (
        summary["round_trips_measured"] < summary["answered"]
    )
    coarse = (
        " (the others' delivery times are known only to the second: the report gives bounds)"
        if unmeasured
        else ""
    )
    packed = (
        f"batches: {summary['batch_emails']} emails carried {summary['batched_messages']} "
        f"messages; {summary['split_messages']} messages came in {summary['message_parts']} "
        "parts\n"
        if summary["batch_emails"] or summary["split_messages"]
        else ""
    )
    print(
        f"{summary['publish']} messages, {summary['request']} requests, "
        f"{summary['response']} responses; {summary['foreign']} foreign and "
        f"{summary['malformed']} malformed emails left out\n"
        f"{packed}"
        f"service calls: {summary['calls']} ({summary['answered']} answered, "
        f"{summary['duplicate_responses']} duplicate responses)\n"
        f"latency measurable for {summary['latency_measured']} of {summary['publish']} "
        f"messages, round trip for {summary['round_trips_measured']} of "
        f"{summary['answered']} answered calls{coarse}\n"
        f"publishers: {summary['publishers']} streams, {summary['lost']} lost, "
        f"{summary['duplicated']} duplicated, {summary['out_of_order']} out of order\n"
        f"signatures: {summary['verified']} verified, {summary['signed']} signed but not "
        f"verified (no --keystore), {summary['unsigned']} unsigned, {summary['invalid']} "
        f"invalid, {summary['untrusted']} untrusted, {summary['replayed']} replayed copies; "
        f"{summary['quarantined']} emails in quarantine folders\n"
        f"tables and report in {args.out} ({summary['seconds']} s)"
    )
    if args.profile:
        print("where Spark's time went (the tables are computed at once: their seconds "
              "overlap):")  # fmt: skip
        for part, figures in summary.get("spark_parts", {}).items():
            print(f"  {part:<17} {figures['seconds']:8.2f} s  {figures['jobs']:3.0f} jobs  "
                  f"{figures['stages']:3.0f} stages  {figures['tasks']:5.0f} tasks")  # fmt: skip
    if summary["unreadable"]:
        print(
            f"emailmw: warning: {summary['unreadable']} stored email(s) could not be read and "
            "were skipped (the rejects table names each, with why): check their permissions",
            file=sys.stderr,
        )
    return 0
