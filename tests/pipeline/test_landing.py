"""Landing is plain Python over emailmw's wire format: tested without Spark."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emailmw._exceptions import ConfigError
from emailmw._pipeline import landing
from emailmw._pipeline.analyze import AnalyzeRequest, analyze
from emailmw._pipeline.landing import (
    MINUTES_SCHEMA,
    STREAMS_SCHEMA,
    Source,
    TableSink,
    Written,
    delivery_time,
    describe,
    land,
    maildir_name_ns,
)
from emailmw._protocol import Recipients, publish_email, request_email, response_email
from emailmw._types import Gid
from emailmw._wire import build

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


def test_every_maildir_file_lands_once_across_part_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parts are cut every two files, across cur/ and new/ and across the Maildirs of a tree;
    directories among the files are skipped, not read, and do not end a listing early."""
    monkeypatch.setattr(landing, "_BATCH", 2)
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
    (landed,) = land(
        [Source("maildir", tmp_path / "root", "root")], tmp_path / "_landing", workers=1
    )
    parts = sorted(landed.glob("*.parquet"))
    keys = [key for part in parts for key in pq.read_table(part)["key"].to_pylist()]
    assert sorted(keys) == sorted(expected)  # each file once, none missed
    # only an mbox message has an offset
    assert {o for part in parts for o in pq.read_table(part)["offset"].to_pylist()} == {None}
    assert len(parts) == 6  # 11 files in parts of 2


def test_mbox_pieces_undo_mboxrd_quoting_and_record_offsets(tmp_path: Path) -> None:
    """Each message lands once, from any cut of the file into pieces: keyed by the offset
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
    for pieces in (1, 2, 3, 5):
        rows = []
        for i, (start, end) in enumerate(landing._mbox_ranges(mbox, pieces)):
            part = tmp_path / f"part-{pieces}-{i}.parquet"
            landing._land_mbox_range(("s", str(mbox), "box", start, end, str(part), None, None))
            rows += pq.read_table(part).to_pylist()
        assert [r["offset"] for r in rows] == offsets, pieces
        assert all(data[r["offset"] :].startswith(b"From ") for r in rows)
        assert [r["key"] for r in rows] == [f"{o:016d}" for o in offsets]
        assert [r["size"] for r in rows] == [len(raw) for raw in originals], pieces
        assert {r["status"] for r in rows} == {"ok"}


def test_counts_of_many_parts_add_up(tmp_path: Path) -> None:
    """The calling process sums the parts' publishes per topic and minute and lists their
    streams, merging as it goes (every 64 parts): each (topic, minute) once with its total,
    each stream once."""
    sink = TableSink(tmp_path)
    sink.prepare()
    for part in range(150):
        minutes = pa.table(
            {"topic": ["/a", "/b", "/a"], "minute": [1, 1, None], "messages": [1, part, 2]},
            schema=MINUTES_SCHEMA,
        )
        streams = pa.table(
            {"publisher_gid": [1, part % 3], "topic": ["/a", None], "mailbox": ["m", "m"]},
            schema=STREAMS_SCHEMA,
        )
        sink.add(Written(Counter({("kind", "publish"): 4}), minutes, streams))
        assert len(sink._minutes) < 64  # merged as they come, not kept part by part
        assert len(sink._streams) < 64
    got = {(r["topic"], r["minute"]): r["messages"] for r in sink.per_minute().to_pylist()}
    assert got == {("/a", 1): 150, ("/b", 1): sum(range(150)), ("/a", None): 300}
    assert sink.per_minute().num_rows == 3
    listed = {tuple(r.values()) for r in sink.streams().to_pylist()}
    assert listed == {(0, None, "m"), (1, "/a", "m"), (1, None, "m"), (2, None, "m")}
    assert sink.streams().num_rows == 4
    assert sink.tally == Counter({("kind", "publish"): 600})


def test_files_and_directories_gone_since_the_walk_are_skipped(tmp_path: Path) -> None:
    """A Maildir changes while it is read: a file the walk listed and the server has since
    expunged (or moved), or a whole directory removed, is skipped; the rest of the part
    lands."""
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
        (str(tmp_path / "gone" / "cur"), "gone", ["1700000000.M0P1.host:2,S"]),
        (str(cur), "box", names),
    ]
    landing._land_files(("s", groups, str(tmp_path / "part.parquet"), None, None))
    keys = pq.read_table(tmp_path / "part.parquet")["key"].to_pylist()
    assert keys == [names[0].partition(":2,")[0], names[2].partition(":2,")[0]]


def test_an_empty_mbox_lands_as_no_mail(tmp_path: Path) -> None:
    """An empty mbox file (a folder with nothing in it yet) is an archive of no mail, not an
    error: mmap refuses an empty file, so its one piece is not mapped."""
    (tmp_path / "empty.mbox").touch()
    sink = TableSink(tmp_path / "out")
    dirs = land([Source("mbox", tmp_path / "empty.mbox", "e")], tmp_path / "landing", sink=sink)
    assert [pq.read_table(part).num_rows for part in dirs[0].glob("*.parquet")] == [0]
    assert sink.tally == Counter()
