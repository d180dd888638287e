"""Landing is plain Python over emailmw's wire format (the driver lists units of work, an
executor lands each): tested without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emailmw._core.errors import ConfigError
from emailmw._core.protocol import Recipients, publish_email, request_email, response_email
from emailmw._core.types import Gid
from emailmw._core.wire import build
from emailmw._pipeline import landing
from emailmw._pipeline.analyze import AnalyzeRequest, analyze
from emailmw._pipeline.landing import (
    LANDED_SCHEMA,
    LANDING_SCHEMA,
    Source,
    delivery_time,
    describe,
    land_unit,
    land_units,
    list_units,
    maildir_name_ns,
)

from ..test_wire import ANY_BYTES

R = Recipients("a@example.test", ("b@example.test",))


def test_publish_request_and_response_rows() -> None:
    pub = publish_email("/t", "x", recipients=R, gid=Gid(5), sequence_number=3, timestamp_ns=7)
    row = describe(build(pub.with_message_id("<p@example.test>")))
    assert row["status"] == "ok"
    assert (row["kind"], row["topic"], row["publisher_gid"], row["publisher_seq"]) == (
        "publish",
        "/t",
        5,
        3,
    )
    assert row["source_ns"] == 7
    request = request_email(
        "/s", "q", recipients=R, client_gid=Gid(9), sequence_number=1, timestamp_ns=1
    ).with_message_id("<q@example.test>")
    row = describe(build(request))
    assert (row["kind"], row["client_gid"], row["request_seq"]) == ("request", 9, 1)
    response = response_email(request, "a", from_="b@example.test", timestamp_ns=2)
    row = describe(build(response.with_message_id("<r@example.test>")))
    assert (row["kind"], row["in_reply_to"]) == ("response", "<q@example.test>")


def test_foreign_and_malformed_rows_say_why() -> None:
    assert describe(b"Subject: hi\r\nContent-Type: text/html\r\n\r\n<p>")["status"] == "foreign"
    assert describe(b"Subject: hi\r\n\r\nplain person mail\r\n")["status"] == "foreign"
    row = describe(b"Subject: t\r\nPublisher-GID: x\r\nSource-Timestamp: 1\r\n\r\nb\r\n")
    assert row["status"] == "malformed"
    assert "Publisher-GID" in row["reason"]
    row = describe(b"not an email at all")
    assert row["status"] in ("malformed", "foreign")


def test_delivery_time_prefers_received_refines_with_maildir_name_and_says_how_well() -> None:
    """Each delivery time comes with its resolution: a header's second, a Maildir file
    name's microsecond."""
    received = "from x by y with LMTP; Wed, 18 Nov 2026 11:06:40 +0000"
    whole = 1_795_000_000 * 10**9
    second, micro = 10**9, 10**3
    assert delivery_time(received, None, None) == (whole, second)
    assert delivery_time(None, "Wed, 18 Nov 2026 11:06:40 +0000", None) == (whole, second)
    name = maildir_name_ns("1795000000.M123456P42.mail,S=1:2,")
    assert name == whole + 123_456_000
    assert delivery_time(received, None, name) == (name, micro)  # same second: refined
    # the name disagrees: Received wins, to the second
    assert delivery_time(received, None, name + 5 * 10**9) == (whole, second)
    assert delivery_time(None, None, name) == (name, micro)
    assert delivery_time(None, None, None) == (None, None)


def test_a_directory_without_a_maildir_is_an_error_not_an_empty_archive(tmp_path: Path) -> None:
    """A mistyped path, or an mbox's folder given for its file, must not analyze as no mail."""
    (tmp_path / "mail").mkdir()
    (tmp_path / "mail" / "archive.mbox").write_bytes(b"From x\r\nSubject: t\r\n\r\nb\r\n")
    with pytest.raises(ConfigError, match="no Maildir here") as raised:
        analyze(AnalyzeRequest([str(tmp_path / "mail")], tmp_path / "out", report=False))
    assert str(tmp_path / "mail") in str(raised.value)
    assert not (tmp_path / "out" / "_landing").exists()  # refused before anything was read


def test_an_output_path_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("not a directory")
    with pytest.raises(ConfigError, match="not a directory") as raised:
        analyze(AnalyzeRequest([str(tmp_path)], tmp_path / "taken", report=False))
    assert "--out" in str(raised.value)
    assert (tmp_path / "taken").read_text() == "not a directory"  # left as it was


def _land_all(units: pa.Table) -> pa.Table:
    """What the executors make of ``units``, one unit at a time as Spark hands them out."""
    batches = [b for unit in units.to_batches(max_chunksize=1) for b in land_units([unit])]
    return pa.Table.from_batches(batches, schema=LANDED_SCHEMA)


def test_every_maildir_file_lands_once_across_unit_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Units are cut every two files, across cur/ and new/ and across the Maildirs of a tree;
    directories among the files are skipped, not read, and do not end a listing early."""
    monkeypatch.setattr(landing, "MAILDIR_UNIT_FILES", 2)
    expected = set()
    for box, counts in (("INBOX", (4, 2)), (".Archive", (0, 5))):
        for sub, count in zip(("cur", "new"), counts, strict=True):
            directory = tmp_path / "root" / box / sub
            directory.mkdir(parents=True)
            (tmp_path / "root" / box / "tmp").mkdir(exist_ok=True)
            for i in range(count):
                name = f"{1_700_000_000 + i}.M{i}P1.{box}{sub}"
                pub = publish_email(
                    "/t", "x", recipients=R, gid=Gid(1), sequence_number=i, timestamp_ns=1
                )
                (directory / f"{name}:2,S").write_bytes(build(pub.with_message_id(f"<{name}@x>")))
                expected.add(name)
            for i in range(3 if count else 0):
                (directory / f"sub{i}").mkdir()  # not a file: never read
    source = Source("maildir", tmp_path / "root", "root")
    units = list_units([source])
    assert units.num_rows == 6  # 11 files in units of 2
    landed = _land_all(units)
    assert sorted(landed["key"].to_pylist()) == sorted(expected)  # each file once, none missed
    assert set(landed["src"].to_pylist()) == {source.digest}
    assert set(landed["offset"].to_pylist()) == {None}  # only an mbox message has an offset


def test_mbox_pieces_undo_mboxrd_quoting_and_record_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each message lands once, from any cut of the file into units: keyed by the offset
    of its ``From `` line (also kept as a number), and with mboxrd's quoting undone, which
    its size shows (each quoted line is one byte longer in the file)."""
    bodies = [
        "plain",
        "From the start of a line\n>From quoted once already\nend",
        "nothing to undo",
        ">>From deep\nFrom again",
        "last",
    ]
    originals = []
    mbox = tmp_path / "archive.mbox"
    offsets = []
    with open(mbox, "wb") as out:
        for seq, body in enumerate(bodies):
            pub = publish_email(
                "/t", body, recipients=R, gid=Gid(1), sequence_number=seq, timestamp_ns=1
            )
            raw = build(pub.with_message_id(f"<{seq}@x>")).replace(b"\r\n", b"\n")
            originals.append(raw + b"\n")  # as stored: every line ends with a newline
            offsets.append(out.tell())
            out.write(b"From a@example.test Thu Nov 19 10:00:00 2026\n")
            for line in raw.split(b"\n"):
                quoted = line.lstrip(b">").startswith(b"From ")
                out.write((b">" + line if quoted else line) + b"\n")
            out.write(b"\n")
    data = mbox.read_bytes()
    assert data.count(b">From ") == 4  # the quoting is there to undo
    for unit_bytes in (len(data), len(data) // 2, len(data) // 3, len(data) // 5):
        monkeypatch.setattr(landing, "MBOX_UNIT_BYTES", unit_bytes)
        units = list_units([Source("mbox", mbox, "s")])
        rows = _land_all(units).to_pylist()
        assert [r["offset"] for r in rows] == offsets, unit_bytes
        assert all(data[r["offset"] :].startswith(b"From ") for r in rows)
        assert [r["key"] for r in rows] == [f"{o:016d}" for o in offsets]
        assert [r["size"] for r in rows] == [len(raw) for raw in originals], unit_bytes
        assert {r["status"] for r in rows} == {"ok"}
        assert {r["mailbox"] for r in rows} == {"archive.mbox"}


def test_files_and_directories_gone_since_the_listing_are_skipped(tmp_path: Path) -> None:
    """A Maildir changes between the listing and the landing: a file the driver listed and
    the server has since expunged (or moved), or a whole directory removed, is skipped; the
    rest of the unit lands."""
    cur = tmp_path / "box" / "cur"
    cur.mkdir(parents=True)
    names = []
    for i in range(3):
        pub = publish_email("/t", "x", recipients=R, gid=Gid(1), sequence_number=i, timestamp_ns=1)
        name = f"{1_700_000_000 + i}.M{i}P1.host:2,S"
        (cur / name).write_bytes(build(pub.with_message_id(f"<{i}@x>")))
        names.append(name)
    (cur / names[1]).unlink()
    groups = [
        {"directory": str(tmp_path / "gone" / "cur"), "mailbox": "gone",
         "names": ["1700000000.M0P1.host:2,S"]},
        {"directory": str(cur), "mailbox": "box", "names": names},
    ]  # fmt: skip
    landed = land_unit({"kind": "maildir", "source": "s", "groups": groups})
    keys = landed["key"].to_pylist()
    assert keys == [names[0].partition(":2,")[0], names[2].partition(":2,")[0]]


def test_an_empty_mbox_lands_as_no_mail(tmp_path: Path) -> None:
    """An empty mbox file (a folder with nothing in it yet) is an archive of no mail, not an
    error: it has no unit of work (mmap refuses an empty file), and a unit of no bytes lands
    no row."""
    (tmp_path / "empty.mbox").touch()
    assert list_units([Source("mbox", tmp_path / "empty.mbox", "e")]).num_rows == 0
    unit = {"kind": "mbox", "source": "e", "path": str(tmp_path / "empty.mbox"),
            "mailbox": "empty.mbox", "start": 0, "end": 0}  # fmt: skip
    assert land_unit(unit).schema == LANDING_SCHEMA
    assert land_unit(unit).num_rows == 0


_HUGE = b"1" + b"0" * 40  # beyond any 64-bit column
_EMAILMW_HEADS = st.sampled_from(
    [
        b"",
        b"Subject: /t\r\nPublisher-GID: 1\r\nSource-Timestamp: 1\r\n",
        b"Subject: /t\r\nPublisher-GID: " + _HUGE + b"\r\nSource-Timestamp: 1\r\n",
        b"Subject: /t\r\nPublisher-GID: 1\r\nSource-Timestamp: " + _HUGE + b"\r\n",
        b"Subject: /t\r\nPublisher-GID: 1\r\nSource-Timestamp: 1\r\n"
        b"Publisher-Sequence-Number: " + _HUGE + b"\r\n",
        b"Subject: /s\r\nClient-GID: -" + _HUGE + b"\r\nRequest-Sequence-Number: 1\r\n"
        b"Source-Timestamp: 1\r\n",
        b"Received: from x by y; Tue, 17 Nov 99999 10:00:00 +0000\r\nSubject: /t\r\n"
        b"Publisher-GID: 1\r\nSource-Timestamp: 1\r\n",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(head=_EMAILMW_HEADS, raw=ANY_BYTES)
def test_no_stored_email_stops_a_unit(tmp_path_factory: pytest.TempPathFactory, head: bytes,
                                      raw: bytes) -> None:  # fmt: skip
    """An executor lands a unit in one go: whatever one stored email holds (any bytes, and
    emailmw headers with numbers no 64-bit column can hold), it lands as a row, the email
    after it lands too, and the unit's table is made (a raise would fail the whole job)."""
    cur = tmp_path_factory.mktemp("box") / "cur"
    cur.mkdir()
    (cur / "1700000000.M1P1.a:2,S").write_bytes(head + raw)
    pub = publish_email("/t", "x", recipients=R, gid=Gid(1), sequence_number=0, timestamp_ns=1)
    (cur / "1700000000.M2P1.b:2,S").write_bytes(build(pub.with_message_id("<b@x>")))
    names = sorted(p.name for p in cur.iterdir())
    unit = {"kind": "maildir", "source": "s",
            "groups": [{"directory": str(cur), "mailbox": "box", "names": names}]}  # fmt: skip
    rows = land_unit(unit).to_pylist()
    assert len(rows) == 2
    assert rows[0]["status"] in ("ok", "foreign", "malformed")
    assert (rows[1]["status"], rows[1]["message_id"]) == ("ok", "<b@x>")


def test_a_source_named_twice_is_listed_once(tmp_path: Path) -> None:
    """``emailmw analyze a.mbox a.mbox`` (or a path and a link to it): one source, landed
    once, never counted twice."""
    mbox = tmp_path / "a.mbox"
    pub = publish_email("/t", "x", recipients=R, gid=Gid(1), sequence_number=0, timestamp_ns=1)
    mbox.write_bytes(b"From a Thu Nov 19 10:00:00 2026\n" + build(pub) + b"\n")
    (tmp_path / "link").symlink_to(tmp_path)
    once = list_units([Source("mbox", mbox, "a")])
    twice = list_units(
        [Source("mbox", mbox, "a"), Source("mbox", tmp_path / "link" / "a.mbox", "b")]
    )
    assert twice.num_rows == once.num_rows == 1


def test_a_maildir_file_whose_name_is_not_utf8_is_left_out_and_named(tmp_path: Path) -> None:
    """(#61) One file whose name is not UTF-8 (``os`` gives its bytes as lone surrogates)
    among others: left out of the units and named for the terminal's line; was a
    ``UnicodeEncodeError`` traceback from the listing, nothing said which file."""
    import os

    raw = build(publish_email("/t", "x", recipients=R, gid=Gid(1), sequence_number=0,
                              timestamp_ns=1))  # fmt: skip
    root = _maildir(tmp_path / "md", {"good:2,S": raw})
    bad = os.fsdecode(b"bad\xff\xfename:2,S")
    (root / "cur" / bad).write_bytes(raw)
    skipped: list[str] = []
    units = list_units([Source("maildir", root, "md")], skipped)
    names = [n for unit in units.to_pylist() for g in unit["groups"] for n in g["names"]]
    assert names == ["good:2,S"]
    assert skipped == [str(root / "cur" / bad)]


def _maildir(root: Path, files: dict[str, bytes]) -> Path:
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for name, raw in files.items():
        (root / "cur" / name).write_bytes(raw)
    return root


_GOOD = b"Subject: /t\nPublisher-GID: 3\nPublisher-Sequence-Number: 0\nSource-Timestamp: 1\n\nm\n"


def test_a_file_that_cannot_be_read_is_a_reject_and_stops_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["1790000000.M1P1.a:2,", "1790000000.M5P1.b:2,", "1790000001.M1P1.c:2,"]
    root = _maildir(tmp_path / "m", dict.fromkeys(names, _GOOD))
    read = landing._read_file

    def unreadable(name: str, dir_fd: int) -> bytes:  # (root reads any file: as a user)
        if name == names[1]:
            raise PermissionError(13, "Permission denied")
        return read(name, dir_fd)

    monkeypatch.setattr(landing, "_read_file", unreadable)
    (unit,) = list_units([Source("maildir", root, "m")]).to_pylist()
    rows = sorted(land_unit(unit).to_pylist(), key=lambda r: r["key"])
    assert [r["status"] for r in rows] == ["ok", "unreadable", "ok"]
    assert rows[1]["reason"] == "cannot be read: Permission denied"
    assert rows[1]["delivered_ns"] == 1_790_000_000_000_005_000  # from its file name


def test_a_truncated_mbox_says_its_last_message_was_cut(tmp_path: Path) -> None:
    mbox = tmp_path / "cut.mbox"
    mbox.write_bytes(b"From a Thu Jan  1 00:00:00 2026\n" + _GOOD + b"\n"
                     b"From a Thu Jan  1 00:00:00 2026\nSubject: /t\nPublisher-GI")  # fmt: skip
    (unit,) = list_units([Source("mbox", mbox, "cut.mbox")]).to_pylist()
    rows = land_unit(unit).to_pylist()
    assert [r["status"] for r in rows] == ["ok", "malformed"]
    assert rows[1]["reason"] == "truncated: the mbox ends inside this message"


def test_a_maildir_that_cannot_be_listed_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _maildir(tmp_path / "m", {"1.M1P1.a:2,": _GOOD})

    scandir = landing.os.scandir

    def refuse(path: Any) -> Any:
        if str(path).endswith("/cur"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(landing.os, "scandir", refuse)
    with pytest.raises(ConfigError, match=r"cannot list .*/cur: Permission denied \(check its"):
        list_units([Source("maildir", root, "m")])


def test_rejects_keep_a_delivery_time() -> None:
    html = b"Received: by mx; Fri, 15 Jan 2027 08:00:00 +0000\nSubject: hi\n"
    html += b"Content-Type: text/html\n\n<p>"
    row = describe(html)
    assert (row["status"], row["delivered_ns"]) == ("foreign", 1_800_000_000 * 10**9)
    assert describe(b"\x00\xff", 1_800_000_000_123_456_000)["delivered_ns"] == (
        1_800_000_000_123_456_000
    )


def test_progress_never_goes_backwards_when_a_stage_adds_tasks() -> None:
    """(#61: 'computing tables: 13 %' was followed by '12 %') A fake status tracker: one
    stage half done, then a second stage starts with as many tasks."""
    from types import SimpleNamespace

    from emailmw._pipeline.analyze import _SparkProgress

    stages: dict[int, tuple[int, int]] = {1: (5, 10)}
    tracker = SimpleNamespace(
        getActiveStageIds=lambda: list(stages),
        getStageInfo=lambda s: SimpleNamespace(
            numCompletedTasks=stages[s][0], numTasks=stages[s][1]),
    )  # fmt: skip
    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker))
    progress = _SparkProgress(spark, "computing tables", None)
    said = [progress.line()]
    stages[2] = (0, 10)
    said.append(progress.line())
    stages[2] = (8, 10)
    said.append(progress.line())
    assert said == ["[analyze] computing tables: 50 %", "[analyze] computing tables: 50 %",
                    "[analyze] computing tables: 65 %"]  # fmt: skip
    # in the units a person thinks in: tables written of tables to write, never below
    counted = _SparkProgress(spark, "computing tables", None, parts=5)
    for name in ("topic_stats", "publisher_health", "messages", "service_calls"):
        counted.part_done(name)
    assert counted.line() == "[analyze] computing tables: 80 % (4 of 5 tables)"


def test_a_master_url_where_no_spark_master_listens_is_one_line_in_seconds(
    tmp_path: Path,
) -> None:
    """(#61) --master spark://HOST:PORT where a web server answers (a 33-line
    Py4JJavaError), or where a port accepts connections and says nothing (nothing printed
    for 10 minutes): one line each, before Spark starts."""
    import http.server
    import socket
    import subprocess
    import sys
    import threading
    import time

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    silent = socket.create_server(("127.0.0.1", 0))  # (accepts, never reads or answers)
    (tmp_path / "a.mbox").write_bytes(b"From x@y Thu Jan  1 00:00:00 2026\nSubject: /t\n\nm\n")
    try:
        for port, said in (
            (web.server_address[1], "a web server answers at 127.0.0.1:"),
            (silent.getsockname()[1], "accepts connections but answers nothing"),
        ):
            start = time.monotonic()
            out = subprocess.run(
                [sys.executable, "-m", "emailmw", "analyze", str(tmp_path / "a.mbox"), "--out",
                 str(tmp_path / "out"), "--master", f"spark://127.0.0.1:{port}"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert out.returncode == 1
            assert out.stderr.count("\n") == 1, out.stderr
            assert said in out.stderr
            assert "is this the master's URL" in out.stderr
            assert time.monotonic() - start < 30
    finally:
        web.shutdown()
        silent.close()


def test_an_mbox_only_grew_when_its_landed_bytes_are_unchanged_and_new_mail_starts_there(
    tmp_path: Path,
) -> None:
    """#61: what decides whether a re-run extends an mbox from its landed size or lands it
    again whole (an expunge rewrites the file)."""
    from emailmw._pipeline import incremental

    def mail(i: int) -> bytes:
        return f"From a@b Mon Jan 1 00:00:00 2024\nSubject: m{i}\n\n{'x' * 3000}\n\n".encode()

    path = tmp_path / "box.mbox"
    path.write_bytes(b"".join(mail(i) for i in range(60)))  # ~180 KiB: head and tail differ
    size = path.stat().st_size
    with path.open("rb") as handle:
        head, tail = incremental._digests(handle, size)
    state = {"size": size, "head": head, "tail": tail}
    assert incremental.only_grew(path, state)  # (unchanged)
    path.write_bytes(path.read_bytes() + mail(60))
    assert incremental.only_grew(path, state)  # appended
    rewritten = b"".join(mail(i) for i in range(61) if i != 40) + mail(61) + mail(62)
    path.write_bytes(rewritten)  # an expunge after 64 KiB, then more mail: larger than before
    assert path.stat().st_size > size
    assert not incremental.only_grew(path, state)
    path.write_bytes(b"".join(mail(i) for i in range(30)))
    assert not incremental.only_grew(path, state)  # smaller
    assert not incremental.only_grew(tmp_path / "gone.mbox", state)
