"""The pipeline on mail that went through the real server: its Maildir and a live IMAP folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

import emailmw
from emailmw._pipeline.analyze import AnalyzeRequest, analyze
from emailmw.testing.mailserver import MailServer

from ..conftest import MakeContext

pytestmark = [pytest.mark.spark, pytest.mark.mailserver]


def test_real_dovecot_maildir_and_live_imap_folder(
    spark: SparkSession,
    mailserver: MailServer,
    account: Callable[[], str],
    email_context: MakeContext,
    tmp_path: Path,
) -> None:
    talker, listener = account(), account()
    sub_ctx = email_context(listener)
    sub = emailmw.Subscription("/chatter", context=sub_ctx)
    server = emailmw.ServiceServer("/add", lambda r: str(sum(map(int, r.split()))), context=sub_ctx)
    ctx = email_context(talker, to=listener)
    pub = emailmw.Publisher("/chatter", context=ctx)
    client = emailmw.ServiceClient("/add", context=ctx)
    for i in range(10):
        pub.publish(f"data: {i}")
    assert [client.call(f"{i} 1", timeout=30) for i in range(3)] == ["1", "2", "3"]
    for _ in range(10):
        assert emailmw.wait_for_message(sub, 30) is not None
    server.close()

    # the server's own Maildirs: listener got 10 publishes + 3 requests, talker 3 responses
    root = mailserver.state_dir / "mail" / "example.test"
    summary = analyze(
        AnalyzeRequest(
            [str(mailserver.maildir(listener)), str(mailserver.maildir(talker))],
            tmp_path / "maildir",
            report=False,
        )
    )
    assert (summary["publish"], summary["request"], summary["response"]) == (10, 3, 3)
    assert (summary["calls"], summary["answered"], summary["lost"]) == (3, 3, 0)
    assert root.is_dir()

    # the live IMAP folder of the listener, fetched into staging; a re-run is incremental
    config = tmp_path / "email.yml"
    config.write_text(yaml.safe_dump({"email": mailserver.config(listener)}))
    url = f"imaps://{listener}@{mailserver.host}:{mailserver.imaps_port}/INBOX"
    out = tmp_path / "imap"
    first = analyze(AnalyzeRequest([url], out, config=str(config), report=False))
    assert (first["publish"], first["request"]) == (10, 3)
    staged = list((out / "_staging").rglob("cur/*"))
    assert len(staged) == 13
    for i in range(10, 15):
        pub.publish(f"data: {i}")
    for _ in range(5):
        assert emailmw.wait_for_message(sub, 30) is not None
    second = analyze(AnalyzeRequest([url], out, config=str(config), report=False))
    assert second["publish"] == 15
    assert len(list((out / "_staging").rglob("cur/*"))) == 18  # only the 5 new were fetched
    # the folder recreated (a new UIDVALIDITY): staged afresh, nothing of the old copy kept
    mailserver.set_uidvalidity(listener, 4242)
    third = analyze(AnalyzeRequest([url], out, config=str(config), report=False))
    assert third["publish"] == 15
    restaged = list((out / "_staging").rglob("cur/*"))
    assert len(restaged) == 18
    assert all(path.name.startswith("4242.") for path in restaged)
