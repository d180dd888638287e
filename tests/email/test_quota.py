"""A provider's limits over the real server: the outbox paces itself under ``limits:``
(batches grow instead of the budget being exceeded), and a server that answers
``450 4.7.1 too much mail`` (Postfix's per-client message rate, as a provider throttles)
holds the outbox without losing a message; a connection beyond the server's limit is one
clear error."""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import emailmw
from emailmw._core.config import load_options
from emailmw.testing.mailserver import MailServer
from tests.conftest import MakeContext
from tests.helpers import connections_held_elsewhere, deadline_loop

from .helpers import TRANSPORTS, receive_bodies, transport_extra


def _emails(server: MailServer, address: str) -> int:
    maildir = server.maildir(address)
    return sum(1 for sub in ("new", "cur") for _ in (maildir / sub).glob("*"))


def test_a_10_hz_topic_under_30_emails_a_minute_arrives_whole_in_fewer_emails(
    mailserver: MailServer, account: Callable[[], str], email_context: MakeContext
) -> None:
    """``limits: {emails-per-minute: 30}`` (one every 2 s, a burst of 3) and a topic
    published at 10 Hz for 4 s, batching allowed by the reader: all 40 messages arrive,
    in at most 3 + 4/2 + 2 emails (the budget), not 40."""
    sender, receiver = account(), account()
    listener = email_context(receiver)
    sub = emailmw.Subscription("/paced", context=listener)
    listener.start_receiving()
    talker = email_context(sender, to=receiver, limits={"emails-per-minute": 30},
                           batch={"linger-ms": 5})  # fmt: skip
    assert talker.wait_for_readers("batch", 30)
    pub = emailmw.Publisher("/paced", context=talker, guarantee="memory")
    start = time.monotonic()
    for i in range(40):
        pub.publish(f"m{i}")
        time.sleep(max(0.0, start + (i + 1) * 0.1 - time.monotonic()))
    assert talker.flush(30)
    got = receive_bodies(sub, 40)
    assert sorted(got, key=lambda m: int(m[1:])) == [f"m{i}" for i in range(40)]
    assert _emails(mailserver, receiver) <= 3 + 4 // 2 + 2


@pytest.fixture(scope="module")
def rate_limited(mailserver: MailServer) -> Iterator[MailServer]:
    """A server of this module's own with a provider's limits: its Postfix takes 3
    messages per client in 3 s, then answers ``450 4.7.1 Error: too much mail`` (its anvil
    rate limit), and its Dovecot allows 2 IMAP sessions per account and address."""
    del mailserver  # (started after the run's: the packages are there)
    state = Path(f"/tmp/emailmw-rate-{uuid.uuid4().hex[:8]}")
    server = MailServer(state_dir=state, message_rate_limit=3, rate_time_unit=3, pool_size=10,
                        max_userip_connections=2)  # fmt: skip
    server.start(fresh=True)
    yield server
    server.stop()
    shutil.rmtree(state, ignore_errors=True)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_throttling_server_holds_the_outbox_and_nothing_is_lost(
    rate_limited: MailServer, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """5 messages at once to a server that takes 3 per 3 s: the refusals (450 4.7.1) hold
    all sending (1 s, 2 s ...), said once each; every message arrives, each once."""
    caplog.set_level(logging.WARNING, logger="emailmw")
    sender, receiver = rate_limited.fresh_account(), rate_limited.fresh_account()
    extra = transport_extra(transport)
    listener = emailmw.Context({"email": rate_limited.config(receiver, transport=transport,
                                                            **extra)})  # fmt: skip
    talker = emailmw.Context({"email": rate_limited.config(sender, to=receiver,
                                                          transport=transport)})  # fmt: skip
    try:
        sub = emailmw.Subscription("/throttled", context=listener)
        listener.start_receiving()
        pub = emailmw.Publisher("/throttled", context=talker, guarantee="memory")
        for i in range(5):
            pub.publish(f"m{i}")
        assert talker.flush(60)
        got = receive_bodies(sub, 5)
        assert sorted(got, key=lambda m: int(m[1:])) == [f"m{i}" for i in range(5)]
        holds = [r.getMessage() for r in caplog.records if "throttles sending" in r.getMessage()]
        assert holds, "the server never throttled: the test tests nothing"
        assert all("4.7.1" in line or "450" in line for line in holds)
    finally:
        talker.shutdown()
        listener.shutdown()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_connection_beyond_the_servers_limit_is_one_clear_error_not_a_login_refusal(
    rate_limited: MailServer, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two receiving contexts on one account fill the server's 2 sessions; a third is
    refused by the server: it says so once, in one line that says what to do (was an
    ``AuthenticationError``: "login refused", as if the password were wrong), and is made
    all the same, to connect once a session is free (#58: it raised)."""
    address = rate_limited.fresh_account()
    config = {"email": rate_limited.config(address, transport=transport)}
    contexts = []
    try:
        for _ in range(2):
            ctx = emailmw.Context(config)
            contexts.append(ctx)
            emailmw.Subscription("/full", context=ctx)
            ctx.start_receiving()
        with caplog.at_level(logging.WARNING, logger="emailmw"):
            contexts.append(emailmw.Context(config))
        said = [r.getMessage() for r in caplog.records
                if "connects once a connection is free" in r.getMessage()]  # fmt: skip
        assert len(said) == 1, said
        assert "refuses another connection" in said[0]
        assert "mail_max_userip_connections" in said[0]
        assert "\n" not in said[0]
        assert "login refused" not in said[0]
    finally:
        for ctx in contexts:
            ctx.shutdown()


def _holds(server: MailServer, address: str, line: bytes) -> bool:
    """Whether an email in ``address``'s inbox has ``line`` in it."""
    maildir = server.maildir(address)
    return any(line in path.read_bytes() for sub in ("new", "cur")
               for path in (maildir / sub).glob("*"))  # fmt: skip


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_process_stays_within_max_connections_and_the_next_is_one_clear_error(
    mailserver: MailServer, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """``limits: {max-connections: 4}``: a context's receiver (1) and a group member (2)
    leave one slot: a second member shares its receiving connection for settling (said
    once), a third is refused by the process, one line naming max-connections (not by the
    server: it counts 4 sessions). The two members process every message, each once."""
    caplog.set_level(logging.INFO, logger="emailmw")
    group, sender = mailserver.fresh_account(), mailserver.fresh_account()
    config = mailserver.config(group, transport=transport, limits={"max-connections": 4},
                               timeout=2, **transport_extra(transport))  # fmt: skip
    members = emailmw.Context({"email": config})
    talker = emailmw.Context({"email": mailserver.config(sender, to=group)})
    try:
        subs = [
            emailmw.Subscription("/work", context=members, group="crew", mode="stateless")
            for _ in range(2)
        ]
        assert any("settles on its receiving connection" in r.getMessage()
                   for r in caplog.records)  # fmt: skip
        with pytest.raises(emailmw.ConnectionLimitError) as info:
            emailmw.Subscription("/work", context=members, group="crew", mode="stateless")
        message = str(info.value)
        assert "max-connections (4)" in message
        assert "\n" not in message
        assert mailserver.sessions(group) == 4
        members.start_receiving()
        pub = emailmw.Publisher("/work", context=talker)
        for i in range(20):
            pub.publish(f"m{i}")
        got: list[str] = []
        more = deadline_loop(60)
        while len(got) < 20 and more():
            for sub in subs:
                found = emailmw.wait_for_message(sub, 0.05)
                if found is not None:
                    got.append(found)
        assert sorted(got, key=lambda m: int(m[1:])) == [f"m{i}" for i in range(20)]
        assert mailserver.sessions(group) <= 4
    finally:
        talker.shutdown()
        members.shutdown()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_group_member_made_while_its_account_is_full_joins_once_a_connection_is_free(
    mailserver: MailServer, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """#58 item 2: a delivery-group member made while another process holds every
    connection its account allows (max-connections 2) is made all the same, says so once,
    joins once that process ends (SIGKILL) and processes what is published (was:
    ConnectionLimitError out of the subscription: a member process started on a full
    account died)."""
    caplog.set_level(logging.WARNING, logger="emailmw")
    account, sender = mailserver.fresh_account(), mailserver.fresh_account()
    config = mailserver.config(account, transport=transport, limits={"max-connections": 2},
                               timeout=1, **transport_extra(transport))  # fmt: skip
    options = load_options({"email": config})
    assert options.user is not None
    talker = emailmw.Context({"email": mailserver.config(sender, to=account)})
    members = None
    try:
        with connections_held_elsewhere(account, options.user.imap.url, 2, 2) as holder:
            members = emailmw.Context({"email": config})
            sub = emailmw.Subscription("/work", context=members, group="crew", mode="stateless")
            said = [r.getMessage() for r in caplog.records
                    if "joins once a connection is free" in r.getMessage()]  # fmt: skip
            assert len(said) == 1, said
            assert "\n" not in said[0]
            members.start_receiving()
            holder.kill()  # its connections given back by the kernel
            pub = emailmw.Publisher("/work", context=talker)
            for i in range(5):
                pub.publish(f"w{i}")
            assert sorted(receive_bodies(sub, 5, timeout=120)) == [f"w{i}" for i in range(5)]
    finally:
        for context in (talker, members):
            if context is not None:
                context.shutdown()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_group_member_that_finds_no_second_connection_settles_on_its_first(
    mailserver: MailServer, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """A group member whose second connection another process holds (max-connections 3:
    one held elsewhere, one for the context's receiver, one for the member) settles on
    the one it got (said once) and processes every message (was: made with a second
    connection it waited for, its heartbeats and deliveries on it: the member never
    processed anything and was judged hung)."""
    caplog.set_level(logging.INFO, logger="emailmw")
    account, sender = mailserver.fresh_account(), mailserver.fresh_account()
    config = mailserver.config(account, transport=transport, limits={"max-connections": 3},
                               timeout=1, **transport_extra(transport))  # fmt: skip
    options = load_options({"email": config})
    assert options.user is not None
    talker = emailmw.Context({"email": mailserver.config(sender, to=account)})
    members = None
    try:
        with connections_held_elsewhere(account, options.user.imap.url, 1, 3):
            members = emailmw.Context({"email": config})
            sub = emailmw.Subscription("/work", context=members, group="crew", mode="stateless")
            said = [r.getMessage() for r in caplog.records
                    if "settles on its receiving connection" in r.getMessage()]  # fmt: skip
            assert len(said) == 1, said
            assert not [r for r in caplog.records if "once a connection is free" in r.getMessage()]
            members.start_receiving()
            pub = emailmw.Publisher("/work", context=talker)
            for i in range(5):
                pub.publish(f"w{i}")
            assert sorted(receive_bodies(sub, 5, timeout=90)) == [f"w{i}" for i in range(5)]
    finally:
        for context in (talker, members):
            if context is not None:
                context.shutdown()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_context_that_only_sends_gives_its_session_back_and_misses_nothing(
    mailserver: MailServer, transport: str
) -> None:
    """#58 item 2: a context that receives nothing holds no IMAP session once it has been
    idle a few seconds (the server counts none for its account) and sends all the same;
    when it starts receiving it connects again and hands out the mail that arrived while
    it held none (was: one session held for the context's life)."""
    own, other = mailserver.fresh_account(), mailserver.fresh_account()
    config = mailserver.config(own, to=other, transport=transport, **transport_extra(transport))
    sending = emailmw.Context({"email": config})
    talker = emailmw.Context({"email": mailserver.config(other, to=own)})
    listener = emailmw.Context({"email": mailserver.config(other)})
    try:
        out = emailmw.Subscription("/out", context=listener)
        listener.start_receiving()
        pub = emailmw.Publisher("/out", context=sending)
        more = deadline_loop(60)
        while mailserver.sessions(own) > 0 and more():
            time.sleep(0.1)
        assert mailserver.sessions(own) == 0
        pub.publish("sent without a session")
        assert receive_bodies(out, 1) == ["sent without a session"]
        emailmw.Publisher("/back", context=talker).publish("came while it held none")
        assert talker.flush(30)
        while not _holds(mailserver, own, b"Subject: /back") and more():
            time.sleep(0.05)  # (delivered while the context holds no session)
        assert mailserver.sessions(own) == 0
        back = emailmw.Subscription("/back", context=sending)
        assert receive_bodies(back, 1) == ["came while it held none"]
        assert mailserver.sessions(own) == 1
    finally:
        for context in (sending, talker, listener):
            context.shutdown()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_context_made_while_its_account_is_full_waits_for_a_connection(
    mailserver: MailServer, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """#58 item 2: a context made while every connection its account allows is held (here
    max-connections 1, held by another context) is made all the same, says so once, and
    receives once a connection is free (was: ConnectionLimitError out of Context())."""
    caplog.set_level(logging.WARNING, logger="emailmw")
    account, sender = mailserver.fresh_account(), mailserver.fresh_account()
    config = mailserver.config(account, transport=transport, limits={"max-connections": 1},
                               timeout=1, **transport_extra(transport))  # fmt: skip
    holder = emailmw.Context({"email": config})
    talker = emailmw.Context({"email": mailserver.config(sender, to=account)})
    late = None
    try:
        late = emailmw.Context({"email": config})  # (the account is full: no error)
        said = [r.getMessage() for r in caplog.records if "connects once a connection is free"
                in r.getMessage()]  # fmt: skip
        assert len(said) == 1, said
        sub = emailmw.Subscription("/late", context=late)
        late.start_receiving()
        holder.shutdown()  # its connection given back
        pub = emailmw.Publisher("/late", context=talker)
        more = deadline_loop(90)
        got = None
        while got is None and more():
            pub.publish("here")
            got = emailmw.wait_for_message(sub, 5)
        assert got == "here"
    finally:
        for context in (holder, talker, late):
            if context is not None:
                context.shutdown()
