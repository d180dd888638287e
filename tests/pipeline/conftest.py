"""Pipeline tests share one JVM: every analyze() in this process reuses the first session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pyspark.sql import SparkSession  # noqa: E402

from emailmw._pipeline.jvm import stop_session  # noqa: E402
from emailmw._pipeline.session import build_session  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", {"spark.driver.memory": "2g"})
    yield session
    stop_session(session)
