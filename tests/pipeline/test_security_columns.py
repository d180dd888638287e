"""The pipeline counts verified, unsigned, invalid, untrusted, replayed and quarantined
mail (docs/security.md), the same in a plain run (the landing counts) and a merged run
(Spark counts)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from emailmw import Email, Keystore
from emailmw._core.protocol import Recipients, publish_email
from emailmw._core.types import Gid
from emailmw._core.wire import build, prepare_outgoing
from emailmw._pipeline.analyze import AnalyzeRequest, analyze
from emailmw._security import sign

RECIPIENTS = Recipients("talker@example.test", ("inbox@example.test",))


def _message(seq: int, body: str) -> Email:
    email = publish_email(
        "/chatter", body, recipients=RECIPIENTS, gid=Gid(9), sequence_number=seq,
        timestamp_ns=time.time_ns(),
    )  # fmt: skip
    return prepare_outgoing(email, RECIPIENTS.from_)


def _store(folder: Path, name: str, raw: bytes) -> None:
    for sub in ("cur", "new", "tmp"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "cur" / f"{time.time_ns()}.M1P1.{name}:2,S").write_bytes(raw)


@pytest.fixture(scope="module")
def mail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Keystore]:
    root = tmp_path_factory.mktemp("signed")
    store = Keystore.create(root / "keystore")
    store.create_key("talker")
    outsider = Keystore.create(root / "outsider")
    outsider.create_key("mallory")
    talker = store.identity("talker")
    inbox = root / "maildir" / "inbox"
    good = [build(sign(_message(i, f"m{i}"), talker)) for i in range(3)]
    for i, raw in enumerate(good):
        _store(inbox, f"good{i}", raw)
    _store(inbox, "replay", good[0])  # the same email again
    _store(inbox, "tampered", good[1].replace(b"m1", b"m7"))
    _store(inbox, "mallory", build(sign(_message(5, "x"), outsider.identity("mallory"))))
    _store(inbox, "unsigned", build(_message(6, "plain")))
    _store(root / "maildir" / "inbox" / ".Quarantine", "q", build(_message(7, "refused")))
    return root, store


@pytest.mark.parametrize("keyed", [True, False])
def test_the_summary_counts_each_kind_of_signature(
    spark: SparkSession, mail: tuple[Path, Keystore], keyed: bool
) -> None:
    del spark
    root, store = mail
    out = root / f"out-{keyed}"
    keystore = str(store.path) if keyed else None
    summary = analyze(AnalyzeRequest([str(root / "maildir")], out, keystore=keystore))
    expected: dict[str, Any] = {"unsigned": 2, "quarantined": 1}
    if keyed:
        expected |= {"verified": 4, "invalid": 1, "untrusted": 1, "signed": 0, "replayed": 1}
    else:  # unverified, the tampered copy is one more copy of its Message-ID
        expected |= {"verified": 0, "invalid": 0, "untrusted": 0, "signed": 6, "replayed": 2}
    assert {k: summary[k] for k in expected} == expected
    # the same counts from Spark: a run that merges the first one's output
    merged = analyze(AnalyzeRequest([str(out)], root / f"merged-{keyed}"))
    assert {k: merged[k] for k in expected} == expected


def test_the_messages_table_has_the_security_column(
    spark: SparkSession, mail: tuple[Path, Keystore]
) -> None:
    root, store = mail
    out = root / "out-column"
    analyze(AnalyzeRequest([str(root / "maildir")], out, keystore=str(store.path)))
    rows = spark.read.parquet(str(out / "messages")).select("security").collect()
    marks = sorted(r["security"] for r in rows)
    assert marks == sorted(["verified"] * 4 + ["invalid", "untrusted", "unsigned", "unsigned"])
