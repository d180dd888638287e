"""Servers that lack what Dovecot offers: a server of this module's own that stops
advertising IDLE, MOVE, UIDPLUS or CONDSTORE in turn, as servers without them do. emailmw
degrades: it polls instead of IDLE, moves with COPY + ``\\Deleted`` + expunge instead of
MOVE, expunges without UIDPLUS; groups, which claim mail with an atomic MOVE, say so in
one line. (Dovecot would still answer the commands: what the clients send tells.)"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import emailmw
from emailmw import std_msgs
from emailmw.testing.mailserver import MailServer
from tests.helpers import deadline_loop

from .helpers import transport_extra


@pytest.fixture(scope="module")
def trimmed(mailserver: MailServer) -> Iterator[MailServer]:
    del mailserver  # (started after the run's: the packages are there)
    state = Path(f"/tmp/emailmw-caps-{uuid.uuid4().hex[:8]}")
    server = MailServer(state_dir=state, pool_size=30)
    server.start(fresh=True)
    yield server
    server.stop()
    shutil.rmtree(state, ignore_errors=True)


def _count(server: MailServer, address: str, folder: str, text: bytes) -> int:
    maildir = server.maildir(address)
    if folder != "INBOX":
        maildir = maildir / f".{folder}"
    return sum(1 for d in ("new", "cur") if (maildir / d).is_dir()
               for f in (maildir / d).iterdir() if text in f.read_bytes())  # fmt: skip


@pytest.mark.parametrize("missing", ["IDLE", "MOVE", "UIDPLUS", "CONDSTORE"])
def test_a_server_without_a_capability_still_delivers_and_files_every_message(
    trimmed: MailServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
    missing: str,
) -> None:  # fmt: skip
    """Both transports receive with ``on-receive: move:Done`` after a quiet spell (past
    ``idle-after``) from a server without ``missing``: every message arrives, each is
    filed in Done and none is left in INBOX; what libcurl sent never names the missing
    command (imapclient refuses to send it: it raised before)."""
    trimmed.without_capabilities(missing)
    monkeypatch.setenv("EMAILMW_CURL_VERBOSE", "1")
    caplog.set_level(logging.DEBUG, logger="emailmw.curl")
    sender = trimmed.fresh_account()
    receivers = {t: trimmed.fresh_account() for t in ("native", "curl")}
    contexts = [
        emailmw.Context({"email": trimmed.config(
            address, transport=transport, poll={"idle-after": 0.2},
            **{"on-receive": "move:Done"}, **transport_extra(transport))})
        for transport, address in receivers.items()
    ]  # fmt: skip
    talker = emailmw.Context({"email": trimmed.config(sender, to=list(receivers.values()))})
    try:
        subs = [emailmw.Subscription("/caps", context=ctx) for ctx in contexts]
        for ctx in contexts:
            ctx.start_receiving()
        time.sleep(0.5)  # quiet past idle-after: a receiver would wait in IDLE now
        pub = emailmw.Publisher("/caps", context=talker)
        for i in range(3):
            pub.publish(f"m{i}")
        for sub in subs:
            got: list[str] = []
            more = deadline_loop(30)
            while len(got) < 3 and more():
                found = emailmw.wait_for_message(sub, 1)
                if found is not None:
                    got.append(found)
            assert sorted(got) == ["m0", "m1", "m2"], sub
        for address in receivers.values():
            more = deadline_loop(30)
            while more() and _count(trimmed, address, "Done", b"/caps") < 3:
                time.sleep(0.1)
            assert _count(trimmed, address, "Done", b"/caps") == 3
            assert _count(trimmed, address, "INBOX", b"/caps") == 0
        sent = "\n".join(r.getMessage() for r in caplog.records if " > " in r.getMessage())
        command = {"IDLE": " IDLE", "MOVE": "UID MOVE", "UIDPLUS": "UID EXPUNGE"}.get(missing)
        if command is not None:
            assert command not in sent
    finally:
        talker.shutdown()
        for ctx in contexts:
            ctx.shutdown()
        trimmed.without_capabilities()


def test_a_group_on_a_server_without_move_is_one_line(trimmed: MailServer) -> None:
    """A group member claims mail with an atomic MOVE: on a server without it, joining the
    group fails with one line that says why and what to do."""
    trimmed.without_capabilities("MOVE")
    ctx = emailmw.Context({"email": trimmed.config(trimmed.fresh_account())})
    try:
        node = emailmw.Node("member", context=ctx)
        with pytest.raises(emailmw.ReceiveError) as info:
            node.create_subscription(std_msgs.msg.String, "/work", lambda m: None, 10,
                                     mode="stateless", group="crew")  # fmt: skip
        assert "IMAP MOVE (RFC 6851" in str(info.value)
        assert "\n" not in str(info.value)
    finally:
        ctx.shutdown()
        trimmed.without_capabilities()
