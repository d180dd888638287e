"""Record the Spark driver's class-data archive once, before a parallel test run.

The first ``emailmw analyze`` of an installation records a class-data archive as its JVM
exits, and every later JVM maps it (``emailmw/_pipeline/jvm.py``: ~5 CPU-seconds less
per start here). A parallel test run starts several JVMs at once, the demos', the
cluster's and each Spark worker's session: without an archive all of them recorded one
under the load they made, none finished within its 30 s (the suite ran the rest of the
way without an archive). This runs one small analysis first, alone, when the
installation has no archive yet: ``make test`` runs it beside ruff and mypy (a core they
leave idle), before the tests.

    python -m tests.spark_archive
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def _archive() -> Path | None:
    """Where this installation's archive goes; None without PySpark or a JVM, or with
    recording switched off (``EMAILMW_SPARK_CDS=off``)."""
    import os

    try:
        import pyspark  # noqa: F401
    except ImportError:
        return None
    from emailmw._pipeline import jvm

    if os.environ.get("EMAILMW_SPARK_CDS", "").lower() in ("0", "off", "no", "false"):
        return None
    key = jvm._archive_key()
    return None if key is None else jvm.cache_dir() / f"spark-cds-{key}.jsa"


def archive_missing() -> bool:
    """Whether this installation has no archive yet (and could have one)."""
    final = _archive()
    return final is not None and not final.is_file()


def record(timeout: float = 300) -> bool:
    """Run one small analysis in a process of its own, which records the archive; whether
    it did (a failure here is the suite's to find: nothing is raised)."""
    final = _archive()
    if final is None or final.is_file():
        return False
    from emailmw.testing.archive import generate

    # (a recording that did not finish under an earlier run's load marks the machine to
    # skip it for a week; alone, it finishes)
    final.with_suffix(".skip").unlink(missing_ok=True)

    with tempfile.TemporaryDirectory(prefix="emailmw-spark-archive-") as tmp:
        mbox = generate(topics=1, services=1).write_mbox(Path(tmp) / "a.mbox")
        command = [sys.executable, "-m", "emailmw", "analyze", str(mbox),
                   "--out", str(Path(tmp) / "out"), "--no-report"]  # fmt: skip
        try:
            subprocess.run(command, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return False
    return final.is_file()


if __name__ == "__main__":
    if archive_missing():
        print("recording Spark's class-data archive for this installation (once) ...")
        print("recorded" if record() else "not recorded: the suite's JVMs start without one")
