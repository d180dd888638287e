"""``emailmw analyze``: land the archives, run the Spark job, write the report.

Sources: a Maildir (or a tree of them, such as a Dovecot mail root), an mbox file, an
``imap://``/``imaps://`` folder URL (staged locally, incrementally), or the output directory
of an earlier run (its landed data is merged in).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import importlib
import os
import re
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError
from .landing import Source, list_units, maildirs

__all__ = ["AnalyzeRequest", "analyze", "parse_time"]


def parse_time(text: str) -> int:
    """ISO 8601 (UTC unless it says otherwise) or seconds since the epoch -> ns."""
    try:
        return int(float(text) * 1e9)
    except ValueError:
        pass
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(
            f"not a time: {text!r} (ISO 8601 or epoch seconds)", source="--since/--until"
        ) from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return int(value.timestamp() * 1e9)


@dataclass
class AnalyzeRequest:
    sources: list[str]
    out: Path
    master: str = "local[*]"
    since_ns: int | None = None
    until_ns: int | None = None
    topic_glob: str | None = None
    # emailmw's own topics (the graph's announcements) in the tables too
    include_internal: bool = False
    conf: dict[str, str] = field(default_factory=dict)
    config: str | None = None
    report: bool = True
    # stop Spark and its JVM once the tables are written (the command line's choice): the
    # report needs no session, so the JVM's shutdown overlaps it
    release_spark: bool = False
    # verify signed mail against this keystore's trusted keys (the ``security`` column)
    keystore: str | None = None


def _say(text: str) -> None:
    print(f"[analyze] {text}", file=sys.stderr, flush=True)


def _progress(what: str) -> Callable[[int, int], None]:
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - last[0] > 0.5:
            last[0] = now
            percent = 100 * done / total if total else 100
            end = "\n" if done >= total else ""
            print(f"\r[analyze] {what}: {percent:5.1f} %", end=end, file=sys.stderr, flush=True)

    return show


def _classify(request: AnalyzeRequest) -> tuple[list[Source], list[Path]]:
    archives: list[Source] = []
    earlier: list[Path] = []
    for text in request.sources:
        if text.startswith(("imap://", "imaps://")):
            from .imap_source import stage_imap_folder

            staged = stage_imap_folder(
                text,
                request.out / "_staging",
                config=request.config,
                progress=_progress(f"fetching {text}"),
            )
            label = text.split("@", 1)[-1] if "@" in text else text
            archives.append(Source("maildir", staged, f"imap:{label}"))
            continue
        path = Path(text).expanduser()
        if not path.exists():
            raise ConfigError("no such file or directory", source=text)
        if path.is_dir() and (path / "_landing").is_dir():
            earlier.extend(sorted((path / "_landing").glob("src=*")))
        elif path.is_dir():
            if next(maildirs(path), None) is None:  # a mistyped path must not analyze as empty
                raise ConfigError(
                    "no Maildir here (a directory with cur/ and new/, at or below it);"
                    " an mbox is given as its file",
                    source=text,
                )
            archives.append(Source("maildir", path.resolve(), str(path)))
        else:
            _check_mbox(path, text)
            archives.append(Source("mbox", path.resolve(), str(path)))
    return archives, earlier


def _check_mbox(path: Path, text: str) -> None:
    """An mbox file starts with a ``From `` line (an empty one is an empty archive)."""
    try:
        with path.open("rb") as file:
            start = file.read(5)
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc.strerror}", source=text) from exc
    if start and start != b"From ":
        raise ConfigError(
            "not an mbox file (its first line is not a 'From ' line); give a Maildir as its "
            "directory, an IMAP folder as imaps://user@host/FOLDER",
            source=text,
        )


_MASTER = re.compile(
    r"local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?|local-cluster\[[0-9]+,[0-9]+,[0-9]+\]"
    r"|spark://[^\s/]+(/)?|yarn|k8s://\S+"
)


def _preflight(master: str) -> None:
    """What would otherwise cost a minute of Java retries and tracebacks: no Java, a
    malformed master URL, a standalone master nobody answers at."""
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    if java is None or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={java_home}" if java_home else "PATH"
        raise ConfigError(
            f"no Java runtime found on {where}: Spark needs Java 17 or later "
            "(apt-get install openjdk-17-jre-headless, or set JAVA_HOME)",
            source="analyze",
        )
    if not _MASTER.fullmatch(master):
        raise ConfigError(
            f"not a Spark master URL: {master!r} (local, local[N], local[*], "
            "spark://HOST:PORT, yarn, k8s://...)",
            source="--master",
        )
    if master.startswith("spark://"):
        for address in master.removeprefix("spark://").rstrip("/").split(","):
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"expected spark://HOST:PORT, got {master!r}", source="--master")
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
            except OSError as exc:
                raise ConfigError(
                    f"no Spark master answers at {host}:{port} ({exc.strerror or exc}): is it "
                    "running, and is this its URL?",
                    source="--master",
                ) from exc


def _when(ns: int | None) -> str:
    """A time filter as the report states it (UTC); ``-`` for none."""
    if ns is None:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _no_topic(request: AnalyzeRequest) -> None:
    raise ConfigError(
        f"no message's topic matches {request.topic_glob!r} (a glob matches the whole topic, "
        "as in '/sensors/*'; see the topics of a run without --topic)",
        source="--topic",
    )


def _link_tree(source: Path, target: Path) -> None:
    """Copy a landed directory, hard-linking its (immutable) Parquet parts when possible."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link)


def _estimate(archives: list[Source], earlier: list[Path]) -> int:
    """A rough message count, before landing: files in Maildirs, ~512 bytes per mbox
    message (emailmw mail is small), ~10 bytes of landed Parquet per earlier message."""
    count = 0
    for source in archives:
        if source.kind == "mbox":
            count += source.path.stat().st_size // 512
            continue
        for maildir, _ in maildirs(source.path):
            for sub in ("cur", "new"):
                with contextlib.suppress(OSError), os.scandir(maildir / sub) as entries:
                    count += sum(1 for _ in entries)
    for directory in earlier:
        with contextlib.suppress(OSError):
            count += sum(p.stat().st_size for p in directory.rglob("*.parquet")) // 10
    return count


def _import_report() -> None:
    with contextlib.suppress(Exception):  # a real failure shows when the report is written
        importlib.import_module(".report", __package__)


class _EarlyPlots:
    """The report's plots of ``topic_stats`` and of ``publisher_health``, each drawn as soon
    as its table is on the driver, while Spark may still compute the other (its last stages
    often leave a core idle), rather than after the job. Any failure here only means the
    report draws them itself, where a real error shows. One
    drawing at a time (matplotlib does not promise that two figures can be drawn at once),
    and write_report draws only after :meth:`images` has waited for all of them.
    """

    def __init__(self, out: Path) -> None:
        self._plots = out / "plots"
        self._drawing = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._drawn: dict[str, Any] = {}  # write_report's keyword -> what it was drawn as

    def _start(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name="report-plot", daemon=True)
        self._threads.append(thread)
        thread.start()

    def collected(self, name: str, table: Any) -> None:  # run_job's on_collected
        if name in ("topic_stats", "publisher_health"):
            self._start(self._draw, name, table)

    def _draw(self, name: str, table: Any) -> None:
        with self._drawing, contextlib.suppress(Exception):
            from .overview import health_rows, topic_rows
            from .report import loss_plot, topic_plots

            self._plots.mkdir(parents=True, exist_ok=True)
            if name == "topic_stats":
                stats = topic_rows(table)
                self._drawn["topic_images"] = topic_plots(stats, self._plots)
            elif (loss := loss_plot(health_rows(table), self._plots)) is not None:
                self._drawn["loss_image"] = loss

    def images(self) -> dict[str, Any]:
        """write_report's arguments for the plots drawn (waiting for the drawing)."""
        for thread in self._threads:
            thread.join()
        return dict(self._drawn)


def analyze(request: AnalyzeRequest) -> dict[str, Any]:
    """Run the whole job; returns the summary figures."""
    started = time.monotonic()
    out = request.out.resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:  # a file on the way, or at the end
        raise ConfigError("not a directory", source=f"--out {request.out}") from exc
    _preflight(request.master)
    archives, earlier = _classify(request)
    # The JVM starts (with the class-data archive of jvm.py) while the archives are listed.
    session: dict[str, Any] = {}
    expected = _estimate(archives, earlier)  # before landing replaces any directory

    def start_spark() -> None:
        try:
            from .session import build_session

            session["spark"] = build_session(
                request.master, request.conf, expected_messages=expected
            )
            if request.master.startswith("spark://"):
                from .session import require_executors

                require_executors(session["spark"], request.master)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            session["error"] = exc

    spark_thread = threading.Thread(target=start_spark, name="spark-start", daemon=True)
    spark_thread.start()
    if request.master.startswith("spark://"):
        # a cluster is checked before the archives are read: a master that gives no
        # executor is said within seconds, not after the landing
        spark_thread.join()
        if "error" in session:
            raise session["error"]

    # the driver's share of the landing, while the JVM starts: the archives listed into
    # units of work (cheap: no email is read); the executors parse them
    units = list_units(archives)
    spark_thread.join()
    if "error" in session:
        raise session["error"]
    phases = {"start": time.monotonic() - started}  # listing and Spark's start
    from .job import run_job
    from .tables import JobOptions, compute, land

    spark = session["spark"]
    landing = out / "_landing"
    mark = time.monotonic()
    _say(f"landing {len(archives)} archive(s) in {units.num_rows} unit(s) of work")
    dirs = land(spark, archives, units, landing, keystore=request.keystore) if archives else []
    for earlier_dir in earlier:
        # keep the output self-contained: an earlier run's landed data is linked in
        target = landing / earlier_dir.name
        if target in dirs:
            continue  # the same source was just landed again: the fresh copy wins
        if earlier_dir.resolve() != target.resolve():
            shutil.rmtree(target, ignore_errors=True)
            _link_tree(earlier_dir, target)
        dirs.append(target)
    for stale in landing.glob("src=*"):
        if stale not in dirs:
            shutil.rmtree(stale, ignore_errors=True)
    if not dirs:
        raise ConfigError("nothing to analyze", source=" ".join(request.sources))
    phases["landing"] = time.monotonic() - mark

    early = _EarlyPlots(out) if request.report else None
    if request.report:  # matplotlib takes a second to import: do it while Spark works
        threading.Thread(target=_import_report, name="report-import", daemon=True).start()
    mark = time.monotonic()
    _say("computing tables with Spark")
    options = JobOptions(
        request.since_ns, request.until_ns, request.topic_glob, request.include_internal
    )
    # merged runs may hold the same stored email twice
    tables = compute(spark, dirs, options, deduplicate=bool(earlier))
    overview = run_job(spark, out, tables, on_collected=None if early is None else early.collected)
    import pyarrow.compute as pc

    from .tables import write_group_stats

    groups = write_group_stats(out, {a.label: a.path for a in archives if a.kind == "maildir"})
    phases["tables"] = time.monotonic() - mark
    summary = overview.summary()
    summary["group_members"] = groups.num_rows
    summary["group_processed"] = pc.sum(groups["processed"]).as_py() or 0
    summary["group_redelivered"] = pc.sum(groups["redelivered"]).as_py() or 0
    if request.topic_glob and not any(summary[k] for k in ("publish", "request", "response")):
        _no_topic(request)
    stopper = None
    if request.release_spark:
        from .jvm import stop_session

        def release() -> None:
            try:
                stop_session(exit_jvm=True)
            except Exception as exc:  # noqa: BLE001 - the tables are written; say it, go on
                _say(f"stopping Spark failed: {exc}")

        stopper = threading.Thread(target=release, name="spark-stop", daemon=True)
        stopper.start()
    try:
        if request.report:
            from .report import write_report

            mark = time.monotonic()
            drawn = early.images() if early is not None else {}
            run = {
                "sources": ", ".join(request.sources),
                "master": request.master,
                "since": _when(request.since_ns),
                "until": _when(request.until_ns),
                "topics": request.topic_glob or "all",
                "emailmw's own topics": "included" if request.include_internal else "left out",
                "signatures checked against": request.keystore or "no keystore",
            }
            report = write_report(
                overview, summary, out, groups=groups.to_pylist(), run=run, **drawn
            )
            phases["report"] = time.monotonic() - mark
            _say(f"report: {report}")
    finally:
        if stopper is not None:
            stopper.join()
    if request.release_spark:
        # the process exits next (the command line's case): the interpreter's final
        # collections need not walk what Spark, pandas and matplotlib left behind
        gc.freeze()
    summary["seconds"] = round(time.monotonic() - started, 2)
    summary["phases"] = {name: round(value, 2) for name, value in phases.items()}
    _say("time: " + ", ".join(f"{name} {value:.1f} s" for name, value in phases.items()))
    return summary
