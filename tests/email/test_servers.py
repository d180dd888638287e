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


def _filed(server: MailServer, address: str, folder: str, count: int) -> int:
    """How many ``/roles`` messages are in ``folder``, waiting up to 30 s for ``count``."""
    more = deadline_loop(30)
    while more() and _count(server, address, folder, b"/roles") < count:
        time.sleep(0.1)
    return _count(server, address, folder, b"/roles")


@pytest.mark.parametrize("transport", ["native", "curl"])
def test_folder_roles_name_the_server_s_folders_and_gmail_s_delete_moves_to_trash(
    mailserver: MailServer, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """A folder is named by its SPECIAL-USE role (RFC 6154): ``move:\\Archive`` files in
    the server's ``Archiv``; under the Gmail profile ``on-receive: delete`` moves to the
    ``\\Trash`` folder (Gmail's EXPUNGE only archives); a role no folder has is one warning
    line and the mail stays in INBOX (nothing deleted, nothing created)."""
    caplog.set_level(logging.WARNING, logger="emailmw")
    sender = mailserver.fresh_account()
    archive, gmail, junk = (mailserver.fresh_account() for _ in range(3))
    on_receive = {archive: "move:\\Archive", gmail: "delete", junk: "move:\\Junk"}
    contexts = []
    for address, action in on_receive.items():
        config = mailserver.config(address, transport=transport, **{"on-receive": action},
                                   **transport_extra(transport))  # fmt: skip
        if address == gmail:  # the profile, pointed at this server
            config["provider"] = "gmail"
        contexts.append(emailmw.Context({"email": config}))
    talker = emailmw.Context({"email": mailserver.config(sender, to=list(on_receive))})
    try:
        subs = [emailmw.Subscription("/roles", context=ctx) for ctx in contexts]
        for ctx in contexts:
            ctx.start_receiving()
        pub = emailmw.Publisher("/roles", context=talker)
        for i in range(2):
            pub.publish(f"m{i}")
        for sub in subs:
            got = [emailmw.wait_for_message(sub, 30) for _ in range(2)]
            assert sorted(map(str, got)) == ["m0", "m1"]
        assert _filed(mailserver, archive, "Archiv", 2) == 2
        assert _filed(mailserver, gmail, "Trash", 2) == 2
        for address in (archive, gmail):
            assert _count(mailserver, address, "INBOX", b"/roles") == 0
        more = deadline_loop(30)
        while more() and not any("\\Junk" in r.getMessage() for r in caplog.records):
            time.sleep(0.1)
        said = [r.getMessage() for r in caplog.records if "\\Junk" in r.getMessage()]
        assert len(said) == 1, said
        assert "has the role \\Junk (RFC 6154 SPECIAL-USE): name the folder" in said[0]
        assert _count(mailserver, junk, "INBOX", b"/roles") == 2
        assert not (mailserver.maildir(junk) / ".Junk").exists()
    finally:
        talker.shutdown()
        for ctx in contexts:
            ctx.shutdown()
