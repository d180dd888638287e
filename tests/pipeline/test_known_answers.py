"""Every table and the summary of eight runs over fixed archives, against the answers recorded
from the version that parsed in a process pool beside Spark and wrote two of the tables
itself (``data/known_answers.json``): the project's generator's archives (a Maildir tree and
mbox files, one with delivery times known only to the second), an archive of odd topics and
foreign mail, two sources at once, a time window with a topic glob, and a merge of an
earlier run with a new source; and (recorded by the version that made windows exact to the
nanosecond, gave rejects their delivery times and kept what a re-run no longer finds) a
window with sub-second bounds and a re-run after mail was removed. A change to any value of
any row shows here.

The archives are in ``data/known_archives.tar.xz`` (22 KB): generated once, since the
generator draws new publisher GIDs on every call.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import tarfile
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

from emailmw._pipeline.analyze import AnalyzeRequest, analyze

pytestmark = pytest.mark.spark

DATA = Path(__file__).parent / "data"
TABLES = ("messages", "topic_stats", "service_calls", "publisher_health", "rejects", "group_stats")


def _digest(out: Path, name: str, archives: Path) -> dict[str, Any] | None:
    """The table's rows, each as sorted JSON with the archives' directory as ``SRC``,
    sorted, hashed."""
    if not (out / name).exists():
        return None
    table = ds.dataset(str(out / name), format="parquet", partitioning="hive").to_table()

    def plain(value: Any) -> Any:
        return value.isoformat() if isinstance(value, dt.date | dt.datetime) else value

    rows = sorted(
        json.dumps(
            {k: plain(v) for k, v in sorted(row.items())}, sort_keys=True, default=str
        ).replace(str(archives), "SRC")
        for row in table.to_pylist()
    )
    return {"rows": len(rows), "sha256": hashlib.sha256("\n".join(rows).encode()).hexdigest()}


def test_every_table_is_the_recorded_answer(spark: SparkSession, tmp_path: Path) -> None:
    del spark  # the session fixture started the JVM; analyze() reuses it
    src = tmp_path / "src"
    with tarfile.open(DATA / "known_archives.tar.xz") as archive:
        archive.extractall(src, filter="data")
    known = json.loads((DATA / "known_answers.json").read_text())
    work = tmp_path / "out"
    runs: dict[str, dict[str, Any]] = {
        "maildir": {"sources": [src / "maildirs"]},
        "mbox": {"sources": [src / "a.mbox"]},
        "two": {"sources": [src / "maildirs_b", src / "b.mbox"]},
        "odd": {"sources": [src / "odd.mbox"]},
        "win": {
            "sources": [src / "a.mbox", src / "odd.mbox"],
            "since_ns": 1_794_909_600_000_000_000 - 10**15,
            "topic_glob": "/*",
        },
        "merge": {"sources": [work / "maildir", src / "b.mbox"]},  # after "maildir"
        # a window whose bounds fall inside seconds, to the nanosecond
        "subsec": {
            "sources": [src / "a.mbox", src / "maildirs_b"],
            "since_ns": 1_795_000_001_500_000_001,
            "until_ns": 1_795_000_004_000_000_000,
        },
        # the same Maildir again, with the run before it, after mail was removed from it
        "removed": {"sources": [work / "kept", src / "maildirs_b"], "remove": 30},
    }
    first: dict[str, Any] = {}
    for name, run in runs.items():
        if "remove" in run:  # a first run, then the oldest files go
            first = analyze(AnalyzeRequest([str(src / "maildirs_b")], work / "kept", report=False))
            stored = sorted((src / "maildirs_b").rglob("cur/*"))[: run.pop("remove")]
            for path in stored:
                path.unlink()
        sources = [str(s) for s in run.pop("sources")]
        summary = analyze(AnalyzeRequest(sources, work / name, report=False, **run))
        del summary["seconds"], summary["phases"], summary["spark_parts"]
        if name == "removed":  # nothing the first run landed is lost
            assert (summary["publish"], summary["lost"]) == (first["publish"], first["lost"])
        assert summary == known[name]["summary"], name
        for table in TABLES:
            assert _digest(work / name, table, src) == known[name]["tables"][table], (name, table)
