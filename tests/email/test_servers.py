"""Servers that lack what Dovecot offers: a server of this module's own that stops
advertising IDLE, MOVE, UIDPLUS or CONDSTORE in turn, as servers without them do. emailmw
degrades: it polls instead of IDLE, moves with COPY + ``\\Deleted`` + expunge instead of
MOVE, expunges without UIDPLUS; groups claim with a copy and an expunge under their lock,
and heartbeat with a keyword without CONDSTORE. (Dovecot would still answer the
commands: what the clients send tells.)"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

import emailmw
from emailmw._core.config import load_options
from emailmw._transport.group import imap as group_imap
from emailmw._transport.group.imap import ImapGroupStore
from emailmw.testing.mailserver import MailServer
from tests.helpers import deadline_loop

from .helpers import (
    claim_at_once,
    count_in_maildir,
    other_imap_server,
    receive_bodies,
    transport_extra,
    wait_filed,
)


@pytest.fixture(scope="module")
def trimmed(mailserver: MailServer) -> Iterator[MailServer]:
    del mailserver  # (started after the run's: the packages are there)
    yield from other_imap_server("dovecot", pool_size=30)


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
            assert sorted(receive_bodies(sub, 3, 30)) == ["m0", "m1", "m2"], sub
        for address in receivers.values():
            assert wait_filed(trimmed, address, "Done", b"/caps", 3) == (3, 0), address
        sent = "\n".join(r.getMessage() for r in caplog.records if " > " in r.getMessage())
        command = {"IDLE": " IDLE", "MOVE": "UID MOVE", "UIDPLUS": "UID EXPUNGE"}.get(missing)
        if command is not None:
            assert command not in sent
    finally:
        talker.shutdown()
        for ctx in contexts:
            ctx.shutdown()
        trimmed.without_capabilities()


@pytest.mark.parametrize("missing", [("MOVE",), ("MOVE", "CONDSTORE")])
def test_a_group_works_on_a_server_without_move_or_condstore(
    trimmed: MailServer, missing: tuple[str, ...]
) -> None:
    """Group members claim with COPY + ``\\Deleted`` + expunge under the claim lock where
    the server has no MOVE, and heartbeat with a keyword where it has no CONDSTORE (no
    MODSEQ to read): two stateless members process every one of 20 messages once, and
    both stay alive throughout (a liveness token that never changed would have made each
    dead to the other)."""
    trimmed.without_capabilities(*missing)
    group, sender = trimmed.fresh_account(), trimmed.fresh_account()
    talker = emailmw.Context({"email": trimmed.config(sender, to=group)})
    members = [emailmw.Context({"email": trimmed.config(group)}) for _ in range(2)]
    try:
        got: list[tuple[str, str]] = []
        subs = [emailmw.Subscription("/work", context=ctx, mode="stateless", group="crew")
                for ctx in members]  # fmt: skip
        receivers = [s.group_receiver for s in subs]
        assert all(r is not None for r in receivers)
        more = deadline_loop(30)
        while more() and not all(len(r.alive) == 2 for r in receivers if r is not None):
            for sub in subs:  # (a group's rounds run while it is asked for mail)
                sub.has_message()
            time.sleep(0.05)
        pub = emailmw.Publisher("/work", context=talker)
        for i in range(20):
            pub.publish(f"m{i}")
        more = deadline_loop(60)
        while len(got) < 20 and more():
            for sub in subs:
                taken = sub.take_with_ticket()
                if taken is not None:
                    got.append((taken[0], sub.member or ""))
                    taken[2].release()
            time.sleep(0.01)
        assert sorted(b for b, _ in got) == sorted(f"m{i}" for i in range(20))
        assert all(r.counts["taken"] == 0 and r.counts["rejoined"] == 0
                   for r in receivers if r is not None)  # fmt: skip
    finally:
        talker.shutdown()
        for ctx in members:
            ctx.shutdown()
        trimmed.without_capabilities()


def test_a_claim_cut_short_without_move_is_a_flagged_redelivery(
    trimmed: MailServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without MOVE a claim is a copy, then an expunge: a member that dies in between
    leaves the message in the inbox as well as in its claims folder. The next claim of it
    counts it as got by one application already (handed out with ``delivery_count`` 2,
    ``redelivered``), so that the two copies are never processed silently twice."""
    trimmed.without_capabilities("MOVE")
    options = load_options({"email": trimmed.config(trimmed.fresh_account())})
    first, second = ImapGroupStore(options, "crew"), ImapGroupStore(options, "crew")
    try:
        first.offer(b"Subject: /work\r\nSource-Timestamp: 1\r\n\r\nm0\r\n", 0)
        (uid,) = first.inbox()
        real = group_imap.move_uids

        def copy_then_die(client: Any, uids: list[int], folder: str) -> None:
            client.copy(uids, folder)
            raise ConnectionResetError("killed between the copy and the expunge")

        monkeypatch.setattr(group_imap, "move_uids", copy_then_die)
        with pytest.raises(emailmw.TransportError):
            first.claim([uid], "a")
        monkeypatch.setattr(group_imap, "move_uids", real)
        assert first.inbox() == [uid]  # left behind, and copied
        assert len(first.holding("a")) == 1
        second.claim([uid], "b")
        assert second.inbox() == []
        (held,) = second.holding("b").values()
        assert held.taken
        assert held.delivered == 1  # so handed out with delivery_count 2: redelivered
        left = next(iter(first.holding("a").values()))
        assert (left.taken, left.delivered) == (False, 0)
    finally:
        first.close()
        second.close()
        trimmed.without_capabilities()


def test_two_members_claiming_one_message_without_move_hand_it_out_once_unflagged(
    trimmed: MailServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without MOVE two members in the claim section at once (the lock broken by time
    while its holder only stalled) each copy the message to their claims folder: of the
    two copies at most one is a first delivery; the other is handed out as a redelivery
    (``delivery_count`` 2, ``redelivered``). Here both read the message's flags before
    either marks it, and both copy before either expunges. Was: both copies unflagged,
    the message processed twice silently (bench/fleet.py: ``/jobs`` 415 on Courier; the
    same on Courier itself: tests/email/test_courier.py)."""
    trimmed.without_capabilities("MOVE")
    try:
        copies = claim_at_once(trimmed, monkeypatch)
    finally:
        trimmed.without_capabilities()
    assert len(copies) == 2
    assert len([h for h in copies if not h.taken and h.delivered == 0]) <= 1, copies


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
        assert wait_filed(mailserver, archive, "Archiv", b"/roles", 2) == (2, 0)
        assert wait_filed(mailserver, gmail, "Trash", b"/roles", 2) == (2, 0)
        more = deadline_loop(30)
        while more() and not any("\\Junk" in r.getMessage() for r in caplog.records):
            time.sleep(0.1)
        said = [r.getMessage() for r in caplog.records if "\\Junk" in r.getMessage()]
        assert len(said) == 1, said
        assert "has the role \\Junk (RFC 6154 SPECIAL-USE): name the folder" in said[0]
        assert count_in_maildir(mailserver, junk, "INBOX", b"/roles") == 2
        assert not (mailserver.maildir(junk) / ".Junk").exists()
    finally:
        talker.shutdown()
        for ctx in contexts:
            ctx.shutdown()
