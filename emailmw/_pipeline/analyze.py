"""``emailmw analyze``: land the archives, run the Spark job, write the report.

Sources: a Maildir (or a tree of them, such as a Dovecot mail root), an mbox file, an
``imap://``/``imaps://`` folder URL (staged locally, incrementally), or the output directory
of an earlier run (its landed data is merged in).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import gc
import importlib
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.errors import ConfigError
from .health import HealthThresholds
from .incremental import incremental_sources, mbox_states, new_units, record_mbox_states
from .landing import Source, list_units, maildirs

__all__ = ["AnalyzeRequest", "analyze", "parse_time"]


_FRACTION = re.compile(r"(\d{2}:\d{2}:\d{2})[.,](\d{1,9})")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_time(text: str) -> int:
    """ISO 8601 (UTC unless it says otherwise) or seconds since the epoch -> integer ns,
    exactly: fractions down to the nanosecond, no floating point (``1790000224.62504``
    is 1790000224625040000)."""
    text = text.strip()
    try:
        seconds = decimal.Decimal(text)
    except decimal.InvalidOperation:
        seconds = None
    if seconds is not None:
        if not seconds.is_finite():
            raise ConfigError(f"not a time: {text!r}", source="--since/--until")
        return int((seconds * 1_000_000_000).to_integral_value(decimal.ROUND_FLOOR))
    fraction_ns = 0
    found = _FRACTION.search(text)
    if found is not None:  # datetime keeps microseconds: the nanoseconds are kept here
        fraction_ns = int(found.group(2).ljust(9, "0"))
        text = text[: found.end(1)] + text[found.end() :]
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(
            f"not a time: {text!r} (ISO 8601 or epoch seconds)", source="--since/--until"
        ) from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    whole = (value - _EPOCH) // dt.timedelta(seconds=1)
    return whole * 1_000_000_000 + fraction_ns


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
    # Spark's own progress bars and log lines (off: emailmw says its progress)
    debug: bool = False
    # stop Spark and its JVM once the tables are written (the command line's choice): the
    # report needs no session, so the JVM's shutdown overlaps it
    release_spark: bool = False
    # verify signed mail against this keystore's trusted keys (the ``security`` column)
    keystore: str | None = None
    # what the report's verdict calls unhealthy
    thresholds: HealthThresholds = field(default_factory=HealthThresholds)


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


class _SparkProgress:
    """A phase's progress, from Spark's status tracker (the tasks of its running stages):
    on a terminal one line rewritten twice a second, ``landing: 45 % (90,000 of ~200,000
    messages, 31,000/s, 4 s left)``; in a log a plain line every 10 s; a last line when
    the phase ends. ``total`` is the messages the phase works through (a rough count),
    None when it does not count them; ``parts`` the tables it writes (:meth:`part_done`
    counts them: ``computing tables: 60 % (3 of 5 tables)``), 0 when it does not."""

    def __init__(self, spark: Any, what: str, total: int | None, parts: int = 0) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._what = what
        self._total = total
        self._tty = sys.stderr.isatty()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="analyze-progress", daemon=True)
        self._seen: dict[int, tuple[int, int]] = {}  # stage -> (done, tasks)
        self._shown = 0.0  # the fraction said last (never less after)
        self._parts, self._parts_done = parts, 0

    def part_done(self, name: str) -> None:
        """One of the phase's tables is written (from any thread)."""
        del name
        self._parts_done += 1

    def __enter__(self) -> _SparkProgress:
        self._thread.start()
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        end = "\r" if self._tty else ""
        if kind is not None:  # (failed or stopped: whoever handles it says so, not "done")
            if self._tty:  # (the progress line ends: what is said next starts a line)
                print(file=sys.stderr, flush=True)
            return
        elapsed = time.monotonic() - self._started
        counted = f"{self._total:,} messages, " if self._total else ""
        print(f"{end}[analyze] {self._what}: done ({counted}{elapsed:.1f} s)" + " " * 20,
              file=sys.stderr, flush=True)  # fmt: skip

    def _fraction(self) -> float | None:
        for stage in self._tracker.getActiveStageIds():
            info = self._tracker.getStageInfo(stage)
            if info is not None and info.numTasks:
                self._seen[stage] = (info.numCompletedTasks, info.numTasks)
        done = sum(d for d, _ in self._seen.values())
        tasks = sum(t for _, t in self._seen.values())
        if not tasks:
            return None
        # never backwards: a stage that starts adds tasks (was: 13 %, then 12 %); never
        # below the share of tables written
        share = self._parts_done / self._parts if self._parts else 0.0
        self._shown = max(self._shown, done / tasks, share)
        return self._shown

    def line(self) -> str:
        fraction = self._fraction()
        elapsed = time.monotonic() - self._started
        tables = f" ({self._parts_done} of {self._parts} tables)" if self._parts else ""
        if fraction is None:
            return f"[analyze] {self._what}: {elapsed:.0f} s{tables}"
        text = f"[analyze] {self._what}: {100 * fraction:.0f} %{tables}"
        if self._total and fraction > 0:
            done = int(self._total * fraction)
            rate = done / max(elapsed, 1e-3)
            left = (self._total - done) / rate if rate else 0
            text += f" ({done:,} of ~{self._total:,} messages, {rate:,.0f}/s, {left:.0f} s left)"
        return text

    def _run(self) -> None:
        period = 0.5 if self._tty else 10.0
        while not self._stop.wait(period):
            try:
                text = self.line()
            except Exception:  # noqa: BLE001 - progress must never fail the run
                return
            if self._tty:
                print(f"\r{text}   ", end="", file=sys.stderr, flush=True)
            else:
                print(text, file=sys.stderr, flush=True)


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


def _set_aside(earlier: list[Path], archives: list[Source], out: Path) -> dict[str, Path]:
    """Move (or, from another run's output, copy) the earlier landings of sources landed
    again out of the way of the new landing: name -> where it now is."""
    fresh = {f"src={a.digest}" for a in archives}
    aside: dict[str, Path] = {}
    for directory in earlier:
        if directory.name not in fresh:
            continue
        target = out / "_landing_previous" / directory.name
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        if directory.resolve().parent == (out / "_landing").resolve():
            os.replace(directory, target)
        else:
            shutil.copytree(directory, target)
        aside[directory.name] = target
    return aside


def _stable_keys(table: Any) -> Any:
    """Each row's key that survives a rewrite of its mbox: the mailbox, the email's
    Message-ID and what follows ``#`` in its key (a batch's message, a part); the key
    itself for an email without a Message-ID. (An mbox key is a byte offset: an expunge
    moves every email after the first one removed.)"""
    import pyarrow.compute as pc

    suffix = pc.replace_substring_regex(table.column("key"), "^[^#]*", "")
    by_id = pc.binary_join_element_wise(
        table.column("mailbox"), table.column("message_id"), suffix, "\0"
    )
    return pc.coalesce(by_id, pc.binary_join_element_wise(
        table.column("mailbox"), table.column("key"), "\0"))  # fmt: skip


def _keep_removed(before: Path, now: Path, landing: Path, *, mbox: bool) -> tuple[Path, int]:
    """The rows of landing ``before`` whose email is not in ``now`` (by (mailbox, key); an
    mbox's by :func:`_stable_keys`): added to ``landing/<name>-kept/`` (which earlier
    re-runs may have started). Returns that directory and how many rows were added."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from .landing import LANDING_SCHEMA

    kept_dir = landing / f"{now.name}-kept"
    old = ds.dataset(str(before), schema=LANDING_SCHEMA, format="parquet").to_table()
    if old.num_rows == 0:
        return kept_dir, 0
    new = ds.dataset(str(now), schema=LANDING_SCHEMA, format="parquet").to_table(
        columns=["mailbox", "key", "message_id"]
    )
    keys = ["mailbox", "key"]
    if mbox:
        old = old.append_column("stable", _stable_keys(old))
        new = new.append_column("stable", _stable_keys(new))
        keys = ["stable"]
    removed = old.join(new.select(keys), keys=keys, join_type="left anti")
    if mbox:  # (its offset may be another email's now: keyed by what it is instead)
        import pyarrow.compute as pc

        stable = pc.binary_join_element_wise("kept", removed.column("stable"), "\0")
        removed = removed.set_column(removed.schema.get_field_index("key"), "key", stable)
    if removed.num_rows == 0:
        return kept_dir, 0
    kept_dir.mkdir(parents=True, exist_ok=True)
    removed = removed.select(LANDING_SCHEMA.names).cast(LANDING_SCHEMA)
    pq.write_table(removed, kept_dir / f"part-{time.time_ns()}.parquet")
    return kept_dir, removed.num_rows


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
            said = _speaks_spark(host.strip("[]"), int(port))
            if said is not None:
                raise ConfigError(f"{said}: is this the master's URL (spark://HOST:7077 by "
                                  "default; its web page is on port 8080)?",
                                  source="--master")  # fmt: skip


def _ends_inside_a_message(path: Path) -> bool:
    """Whether the mbox ``path`` ends inside a message (every mbox writer ends a message
    with a line break): its last byte, read on the driver."""
    try:
        with path.open("rb") as file:
            file.seek(0, os.SEEK_END)
            if file.tell() == 0:
                return False
            file.seek(-1, os.SEEK_END)
            return file.read(1) != b"\n"
    except OSError:
        return False


def _speaks_spark(host: str, port: int, wait: float = 5.0) -> str | None:
    """None when what listens at ``host:port`` may be a Spark master, else why not. A
    master's RPC port reads length-prefixed frames: to a line of HTTP (a frame length
    far too large) it closes the connection at once. An HTTP server answers it instead; a
    port that accepts and says nothing within ``wait`` seconds is not a master either
    (Spark's client would wait minutes there, printing nothing)."""
    try:
        connection = socket.create_connection((host, port), timeout=wait)
    except OSError as exc:
        return f"no Spark master answers at {host}:{port} ({exc.strerror or exc})"
    with connection:
        try:
            connection.sendall(b"GET / HTTP/1.0\r\n\r\n")
            connection.settimeout(wait)
            answer = connection.recv(64)
        except TimeoutError:
            return f"{host}:{port} accepts connections but answers nothing in {wait:g} s"
        except OSError:
            return None  # (reset: a master refusing the line)
    if answer.startswith(b"HTTP/"):
        return f"a web server answers at {host}:{port}, not a Spark master"
    if answer:
        return f"{host}:{port} answers, but not as a Spark master ({answer[:20]!r})"
    return None


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


def _holds_no_mail(source: Source) -> bool:
    """Whether ``source`` holds no email at all (an empty mbox file; a Maildir tree with no
    file in any cur/ or new/): looked at without reading any email."""
    if source.kind == "mbox":
        return source.path.stat().st_size == 0
    for maildir, _ in maildirs(source.path):
        for sub in ("cur", "new"):
            with contextlib.suppress(OSError), os.scandir(maildir / sub) as entries:
                if any(entry.is_file() for entry in entries):
                    return False
    return True


def _empty(
    request: AnalyzeRequest, archives: list[Source], out: Path, started: float
) -> dict[str, Any]:
    """An archive of no mail: an empty landing per source (so that a later run merges it
    as one), an empty report, the summary of nothing, one line saying so; no Spark."""
    import pyarrow.parquet as pq

    from .landing import LANDING_SCHEMA
    from .overview import Overview

    for source in archives:
        landed = out / "_landing" / f"src={source.digest}"
        shutil.rmtree(landed, ignore_errors=True)
        landed.mkdir(parents=True)
        pq.write_table(LANDING_SCHEMA.empty_table(), landed / "part-empty.parquet")
    overview = Overview([], [], [], [], {}, [])
    summary = overview.summary()
    summary.update(group_members=0, group_processed=0, group_redelivered=0, empty=True)
    if request.report:
        from .report import write_report

        run = {"sources": ", ".join(request.sources), "master": "(not started: no mail)"}
        write_report(overview, summary, out, run=run, thresholds=request.thresholds)
    summary["seconds"] = round(time.monotonic() - started, 2)
    summary["phases"] = {"start": summary["seconds"]}
    return summary


def _any_topic(dirs: list[Path], glob: str) -> bool:
    """Whether any message landed in ``dirs`` has a topic ``glob`` matches (the topic
    column alone, read with pyarrow: no Spark job)."""
    import fnmatch

    import pyarrow.dataset as ds

    from .landing import LANDING_SCHEMA

    pattern = re.compile(fnmatch.translate(glob))
    for directory in dirs:
        topics = ds.dataset(str(directory), schema=LANDING_SCHEMA, format="parquet")
        found = topics.to_table(columns=["topic"]).column("topic").unique().to_pylist()
        if any(t is not None and pattern.match(t) for t in found):
            return True
    return False


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


def _units_estimate(units: Any) -> int:
    """:func:`_estimate` of what ``units`` hold: the files they name, ~512 bytes of mbox a
    message."""
    count = 0
    for row in units.to_pylist():
        if row["kind"] == "maildir":
            count += sum(len(group["names"]) for group in row["groups"])
        else:
            count += (row["end"] - row["start"]) // 512
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


def _check_writable(out: Path, given: Path) -> None:
    """One line before anything is read when ``out`` takes no file (was: the archive landed
    first, for minutes, and the first write failed). By trying, as permissions alone do
    not say it for root or a read-only mount."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".emailmw-write-check-", dir=out)
    except OSError as exc:
        raise ConfigError(f"cannot write in it ({exc.strerror or exc}): choose a directory "
                          "you can write", source=f"--out {given}") from None  # fmt: skip
    os.close(fd)
    os.unlink(probe)


def analyze(request: AnalyzeRequest) -> dict[str, Any]:
    """Run the whole job; returns the summary figures."""
    started = time.monotonic()
    out = request.out.resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:  # a file on the way, or at the end
        raise ConfigError("not a directory", source=f"--out {request.out}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot make it ({exc.strerror or exc}): choose a directory you "
                          "can write", source=f"--out {request.out}") from None  # fmt: skip
    _check_writable(out, request.out)
    _preflight(request.master)
    archives, earlier = _classify(request)
    if archives and not earlier and all(_holds_no_mail(a) for a in archives):
        return _empty(request, archives, out, started)  # (no Spark started for nothing)
    # The JVM starts (with the class-data archive of jvm.py) while the archives are listed.
    session: dict[str, Any] = {}
    expected = _estimate(archives, earlier)  # before landing replaces any directory

    def start_spark() -> None:
        try:
            from .session import build_session

            session["spark"] = build_session(
                request.master, request.conf, expected_messages=expected, debug=request.debug
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
    skipped: list[str] = []
    units = list_units(archives, skipped)
    if skipped:
        first = os.fsencode(skipped[0]).decode("utf-8", "backslashreplace")
        _say(f"left out {len(skipped)} file(s) whose names are not UTF-8 (not emailmw's: "
             f"rename them to land them), the first: {first}")  # fmt: skip
    for source in archives:
        if source.kind == "mbox" and _ends_inside_a_message(source.path):
            _say(f"{source.label} ends inside its last message (a copy cut short?): that "
                 "message is counted as malformed, 'truncated'")  # fmt: skip
    states = mbox_states(archives, units)
    landing = out / "_landing"
    # a source this output landed before: only what it gained since is landed
    incremental = incremental_sources(archives, earlier, landing)
    units, increments, removed = new_units(units, archives, incremental, landing)
    spark_thread.join()
    if "error" in session:
        raise session["error"]
    phases = {"start": time.monotonic() - started}  # listing and Spark's start
    from .job import TABLES_WRITTEN, Profile, run_job
    from .tables import JobOptions, compute, land

    spark = session["spark"]
    from .session import set_codegen

    set_codegen(spark, expected, request.conf)
    mark = time.monotonic()
    # a source an earlier run landed and this one lands again whole: what it landed then
    # is set aside, and what the source no longer holds (mail removed since) is kept
    whole = [a for a in archives if a.digest not in incremental]
    previous = _set_aside(earlier, whole, out)
    earlier = [d for d in earlier if d.name not in previous]
    if incremental:
        _say(f"landing only what {len(incremental)} archive(s) gained since the last run")
    for source in archives:
        if removed.get(source.digest):
            _say(f"kept {removed[source.digest]} email(s) of {source.label} that an earlier "
                 "run landed and the source no longer holds")  # fmt: skip
    _say(f"landing {len(archives)} archive(s) in {units.num_rows} unit(s) of work")
    dirs: list[Path] = []
    if archives:
        to_land = _units_estimate(units) if incremental else expected
        with _SparkProgress(spark, "landing", to_land or None):
            dirs = land(spark, whole, units, landing, keystore=request.keystore)
        for name in increments.values():
            added = landing / f"src={name}"
            added.mkdir(parents=True, exist_ok=True)
            dirs.append(added)
        record_mbox_states(landing, states)
    labels = {f"src={a.digest}": a.label for a in archives}
    kinds = {f"src={a.digest}": a.kind for a in archives}
    for name, aside in previous.items():
        mbox = kinds.get(name) == "mbox"
        kept_dir, count = _keep_removed(aside, landing / name, landing, mbox=mbox)
        if count:
            _say(f"kept {count} email(s) of {labels.get(name, name)} that an earlier run "
                 "landed and the source no longer holds")  # fmt: skip
        if kept_dir not in dirs and kept_dir.is_dir():
            dirs.append(kept_dir)
    shutil.rmtree(out / "_landing_previous", ignore_errors=True)
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
    if request.topic_glob and not _any_topic(dirs, request.topic_glob):
        _no_topic(request)  # (said before the tables are computed: seconds, not a minute)
    phases["landing"] = time.monotonic() - mark

    early = _EarlyPlots(out) if request.report else None
    if request.report:  # matplotlib takes a second to import: do it while Spark works
        threading.Thread(target=_import_report, name="report-import", daemon=True).start()
    mark = time.monotonic()
    options = JobOptions(
        request.since_ns, request.until_ns, request.topic_glob, request.include_internal
    )
    with _SparkProgress(spark, "computing tables", None, parts=TABLES_WRITTEN) as progress:
        # merged runs may hold the same stored email twice
        # merged runs may hold the same stored email twice; a source's own increments
        # never do (each lands only what its earlier landings lack): no shuffle for them
        own = tuple(f"src={digest}" for digest in incremental)
        merged = [d for d in earlier if not d.name.startswith(own)] if own else earlier
        tables = compute(spark, dirs, options, deduplicate=bool(merged) or bool(previous))
        profile = Profile(spark)
        overview = run_job(
            spark, out, tables, on_collected=None if early is None else early.collected,
            on_written=progress.part_done, profile=profile,
        )  # fmt: skip
    import pyarrow.compute as pc

    from .tables import write_group_stats

    if request.report:  # the time series and drill-downs the report draws: small
        from .overview import details

        firsts = [s["first"] for s in overview.topic_stats if s["first"] is not None]
        lasts = [s["last"] for s in overview.topic_stats if s["last"] is not None]
        span_ns = int((max(lasts) - min(firsts)).total_seconds() * 1e9) if firsts else 0
        with _SparkProgress(spark, "the report's series", None), profile.part("series"):
            written = spark.read.schema(tables.messages.schema).parquet(str(out / "messages"))
            report_details = details(written, span_ns, windowed=options.windowed)
    groups = write_group_stats(out, {a.label: a.path for a in archives if a.kind == "maildir"})
    phases["tables"] = time.monotonic() - mark
    spark_parts = profile.figures()  # (before a release stops the session)
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
                overview, summary, out, groups=groups.to_pylist(), run=run,
                details=report_details, thresholds=request.thresholds, **drawn,
            )  # fmt: skip
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
    summary["spark_parts"] = spark_parts
    _say("time: " + ", ".join(f"{name} {value:.1f} s" for name, value in phases.items()))
    return summary
