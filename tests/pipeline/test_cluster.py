"""``emailmw analyze`` on a Spark standalone cluster on loopback (a master and a worker
started from the pyspark package) gives the same tables as the local run."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from emailmw.testing.archive import generate
from emailmw.testing.sparkcluster import SparkCluster
from tests.pipeline.test_known_answers import DATA, TABLES, _digest

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with SparkCluster(tmp_path_factory.mktemp("spark"), slow_starts=True) as running:
        yield running


def _analyze(sources: list[Path], out: Path, master: str, *conf: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "emailmw", "analyze", *map(str, sources), "--out", str(out),
         "--master", master, "--no-report", *conf],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_cluster_run_gives_the_recorded_tables(cluster: SparkCluster, tmp_path: Path) -> None:
    """One run over a Maildir tree and an mbox file at once (the two forms' readers, on the
    executors) on the cluster: every table is the one recorded for these archives
    (``test_known_answers``' run "two", which the local session gives). The cluster's
    executor starts 12 s late, as a busy machine's can: the master granted it, so it is
    waited for (was: "no executor within 7 s", the CI failure of a loaded run). (Was: the
    same run locally as well, a second driver JVM, to compare with.)"""
    src = tmp_path / "src"
    with tarfile.open(DATA / "known_archives.tar.xz") as archive:
        archive.extractall(src, filter="data")
    known = json.loads((DATA / "known_answers.json").read_text())["two"]
    out = tmp_path / "out"
    printed = _analyze([src / "maildirs_b", src / "b.mbox"], out, cluster.url,
                       "--conf", "spark.executorEnv.EMAILMW_EXECUTOR_DELAY=12")  # fmt: skip
    for name in TABLES:
        assert _digest(out, name, src) == known["tables"][name], name
    assert known["tables"]["messages"]["rows"] > 0
    assert f"{known['summary']['publish']:,}" in printed  # (its summary, printed)


def test_a_master_without_workers_is_one_line_within_seconds(tmp_path: Path) -> None:
    """A standalone master that gives the job no executor (no worker) would leave every
    job waiting for ever: it is said, in one line, before the archive is read."""
    import time

    archive = generate()
    archive.write_maildir(tmp_path / "m")
    with SparkCluster(tmp_path / "spark", workers=0) as empty:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "emailmw", "analyze", str(tmp_path / "m"),
             "--out", str(tmp_path / "out"), "--master", empty.url],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        took = time.monotonic() - started
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("emailmw: error:")]
    assert errors == [
        f"emailmw: error: --master: the Spark master at {empty.url} gave this job no "
        "executor within 7 s: start a worker with free cores (or one that can reach this "
        "machine), or use --master local[*]"
    ]
    assert "Traceback" not in done.stderr
    # the JVM's start and the 7-s wait, not Spark's own retries for minutes (a loose bound:
    # a squeezed machine takes 20 s and more to start a JVM)
    assert took < 90
    assert not (tmp_path / "out" / "messages").exists()  # nothing was read
