"""The driver JVM's start-up options: a class-data archive recorded once, then reused."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark import SparkContext

from emailmw._pipeline import jvm


@pytest.fixture
def no_running_jvm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.setenv("EMAILMW_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMAILMW_SPARK_CDS", raising=False)
    monkeypatch.setattr(jvm, "_pending", None)
    return tmp_path


def test_first_run_records_the_archive_later_runs_map_it(no_running_jvm: Path) -> None:
    first = jvm.driver_java_options("-Dmine=1")
    assert first is not None
    assert "-XX:ArchiveClassesAtExit=" in first
    assert "SharedArchiveFile" not in first
    assert first.endswith("-Dmine=1")  # the user's options come last, so they win
    temp, final = jvm._pending or (None, None)
    assert temp is not None
    assert final is not None
    assert temp.parent == final.parent
    assert final.parent == no_running_jvm

    final.write_bytes(b"archive")  # what stop_session() renames into place
    second = jvm.driver_java_options(None, short_job=False)
    assert second is not None
    assert f"-XX:SharedArchiveFile={final}" in second
    assert "ArchiveClassesAtExit" not in second
    assert "TieredStopAtLevel" not in second  # long jobs keep C2
    assert jvm._pending is None


def test_opting_out_leaves_the_jvm_untouched(
    no_running_jvm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMAILMW_SPARK_CDS", "off")
    assert jvm.driver_java_options("-Dmine=1") == "-Dmine=1"
    assert jvm.driver_java_options(None) is None


def test_a_running_jvm_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SparkContext, "_gateway", object())
    assert jvm.driver_java_options("-Dx=1") == "-Dx=1"


def test_a_collector_the_user_names_replaces_ours(no_running_jvm: Path) -> None:
    assert "-XX:+UseParallelGC" in (jvm.driver_java_options("-Dmine=1") or "")
    # naming two collectors would stop the JVM from starting
    mine = jvm.driver_java_options("-XX:+UseG1GC -Xmx1g") or ""
    assert "UseParallelGC" not in mine
    assert mine.endswith("-XX:+UseG1GC -Xmx1g")


def test_executors_get_the_driver_s_jit_and_collector_but_the_user_s_options_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EMAILMW_SPARK_CDS", raising=False)
    options = jvm.executor_java_options(None) or ""
    assert "-XX:TieredStopAtLevel=1" in options
    assert "-XX:+UseParallelGC" in options
    assert "SharedArchiveFile" not in options
    assert "ArchiveClassesAtExit" not in options
    assert "TieredStopAtLevel" not in (jvm.executor_java_options(None, short_job=False) or "")
    mine = jvm.executor_java_options("-XX:+UseG1GC -Xss4m") or ""
    assert "UseParallelGC" not in mine  # two collectors named: the JVM would not start
    assert mine.endswith("-XX:+UseG1GC -Xss4m")
    monkeypatch.setenv("EMAILMW_SPARK_CDS", "off")
    assert jvm.executor_java_options("-Xss4m") == "-Xss4m"


def test_half_written_archives_of_gone_processes_are_removed(no_running_jvm: Path) -> None:
    import os

    dead = no_running_jvm / "spark-cds-abc.999999999.tmp"  # (no such process)
    mine = no_running_jvm / f"spark-cds-abc.{os.getpid()}.tmp"
    for path in (dead, mine):
        path.write_bytes(b"half")
    assert jvm.clean_stale(no_running_jvm) == [dead]
    assert mine.exists()
    jvm.driver_java_options(None)  # (every run cleans up first)
    assert not dead.exists()


def test_a_jvm_that_does_not_finish_the_archive_in_time_is_ended_and_recording_skipped(
    no_running_jvm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JVM writing the archive at exit past the wait (``make demo`` hung for minutes
    on a fresh machine, its output pipes held open, 340 MB left behind): it is killed,
    its file removed, and later runs on the machine do not record again."""
    import subprocess
    import time

    first = jvm.driver_java_options(None) or ""
    assert "ArchiveClassesAtExit" in first
    temp, final = jvm._pending or (None, None)
    assert temp is not None
    assert final is not None
    temp.write_bytes(b"half-written")
    proc = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE)

    class Gateway:
        def __init__(self) -> None:
            self.proc = proc

        def shutdown(self) -> None:
            pass

    # (stop_session clears _gateway and _jvm: both restored after the test, for the
    # session's own JVM that later tests use)
    monkeypatch.setattr(SparkContext, "_jvm", SparkContext._jvm)
    monkeypatch.setattr(SparkContext, "_gateway", Gateway())
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(jvm, "_DUMP_TIMEOUT_S", 0.5)
    start = time.monotonic()
    jvm.stop_session()
    assert time.monotonic() - start < 10
    assert proc.poll() is not None, "the JVM was left running"
    assert not temp.exists()
    assert not final.exists()
    monkeypatch.setattr(SparkContext, "_gateway", None)
    again = jvm.driver_java_options(None) or ""
    assert "ArchiveClassesAtExit" not in again
    assert "SharedArchiveFile" not in again


def test_the_suite_records_the_archive_only_where_an_installation_has_none(
    no_running_jvm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make test`` records the archive before the tests (``tests/spark_archive.py``) only
    when this installation has none yet; never where recording is switched off."""
    from tests import spark_archive

    assert spark_archive.archive_missing()
    final = spark_archive._archive()
    assert final is not None
    assert final.parent == no_running_jvm
    final.write_bytes(b"archive")
    assert not spark_archive.archive_missing()
    assert not spark_archive.record()  # nothing to do: no JVM started
    final.unlink()
    monkeypatch.setenv("EMAILMW_SPARK_CDS", "off")
    assert not spark_archive.archive_missing()
