"""Courier-IMAP (Debian 12's 5.0, ``MailServer(imap_server="courier")``, Debian's settings)
passes what Dovecot passes: the transport conformance suite on both transports and the
delivery-mode suite. Postfix delivers into the Maildirs; every IMAP session is Courier's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import emailmw
from emailmw._transport.group import GroupSettings
from emailmw.testing import (
    DeliveryModeConformance,
    GroupWorld,
    MultiRecipientConformance,
    TransportConformance,
    TransportUnderTest,
)
from emailmw.testing.mailserver import MailServer

from .helpers import (
    check_batch_delivery_record,
    count_in_maildir,
    inject,
    other_imap_server,
    receive_bodies,
    transport_extra,
    wait_filed,
    write_config,
)
from .test_conformance import MAIL_TRANSPORTS, _pair
from .test_delivery_modes import _world
from .test_doctor import check_line, doctor
from .test_reliability import POISON


@pytest.fixture(scope="module")
def courier(mailserver: MailServer) -> Iterator[MailServer]:
    del mailserver  # (started after the run's: Postfix and Dovecot are there)
    yield from other_imap_server("courier")


class TestCourierTransportConformance(TransportConformance, MultiRecipientConformance):
    @pytest.fixture(params=MAIL_TRANSPORTS)
    def transport(
        self, request: pytest.FixtureRequest, courier: MailServer
    ) -> Iterator[TransportUnderTest]:
        yield from _pair(courier, courier.fresh_account, request.param)


class TestCourierDeliveryModes(DeliveryModeConformance):
    # a member's claim round waits 2 s for Courier to delete the lock folder: a liveness
    # horizon under it sees live members dead (docs/providers.md)
    timing = GroupSettings(heartbeat=0.25, expiry=5.0, poll=0.02, steal_after=0.5)

    @pytest.fixture
    def group_world(self, courier: MailServer) -> Iterator[GroupWorld]:
        yield from _world(courier, "native")


@pytest.mark.parametrize("transport", MAIL_TRANSPORTS)
def test_a_folder_named_plainly_is_made_under_courier_s_namespace(
    courier: MailServer, transport: str
) -> None:
    """Courier keeps an account's folders under ``INBOX.`` (its personal namespace) and
    refuses ``CREATE Done``: ``on-receive: move:Done`` files into ``INBOX.Done`` (made
    when missing), as a mail client shows it; was: every move failed and the mail stayed."""
    sender, receiver = courier.fresh_account(), courier.fresh_account()
    ctx = emailmw.Context({"email": courier.config(
        receiver, transport=transport, **{"on-receive": "move:Done"},
        **transport_extra(transport))})  # fmt: skip
    talker = emailmw.Context({"email": courier.config(sender, to=receiver)})
    try:
        sub = emailmw.Subscription("/filed", context=ctx)
        pub = emailmw.Publisher("/filed", context=talker)
        for i in range(3):
            pub.publish(f"m{i}")
        assert sorted(receive_bodies(sub, 3, 30)) == ["m0", "m1", "m2"]
        # (Courier's INBOX.Done; Courier has no MOVE: COPY, \\Deleted, expunge)
        assert wait_filed(courier, receiver, "Done", b"/filed", 3) == (3, 0)
    finally:
        talker.shutdown()
        ctx.shutdown()


def test_doctor_says_what_courier_lacks(courier: MailServer, tmp_path: Path) -> None:
    """``emailmw doctor`` against Courier (Debian's settings) warns of what it does not
    offer (MOVE, SPECIAL-USE) and of its IDLE and folder deletions, each with what
    emailmw does about it; everything else passes."""
    config = write_config(tmp_path / "email.yml", courier.config(courier.fresh_account()))
    out = doctor(config)
    features = check_line(out, "WARN", "imap features")
    assert "no MOVE: a move is COPY + expunge" in features
    assert "no SPECIAL-USE" in features
    assert "Courier-IMAP: its IDLE looks for new mail only every" in features
    assert "no IDLE" not in features
    assert "no UIDPLUS" not in features
    for name in ("smtp login", "imap login", "imap folders", "imap tls"):
        check_line(out, "PASS", name)


def test_a_group_on_courier_is_told_to_reach_past_its_slow_lock(
    courier: MailServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The group store knows Courier (its greeting) takes 2 s to release the claim lock;
    a group with the default expiry (0.8 s) is told, in one line, the expiry to give."""
    ctx = emailmw.Context({"email": courier.config(courier.fresh_account())})
    try:
        with caplog.at_level("WARNING", logger="emailmw.groups"):
            emailmw.Subscription("/work", context=ctx, mode="stateless", group="crew")
        (said,) = [r.getMessage() for r in caplog.records if "claim lock" in r.getMessage()]
        assert "takes 2 s to release the claim lock" in said
        assert "give the group an expiry of 5 s or more" in said
    finally:
        ctx.shutdown()


@pytest.mark.parametrize("transport", MAIL_TRANSPORTS)
def test_poison_mail_stops_no_receiver_on_courier(courier: MailServer, transport: str) -> None:
    """The receive path as Courier makes it (UIDNEXT asked apart, read-write sessions,
    polling, the quarantine folder under ``INBOX.``, moves without MOVE): each poison
    email of the reliability suite, each followed by a legitimate one, stops nothing; the
    poison is quarantined, never deleted, ours deleted as configured."""
    address, sender = courier.fresh_account(), courier.fresh_account()
    config = {"on-receive": "delete", "quarantine": "Quarantine"}
    ctx = emailmw.Context({"email": courier.config(
        address, transport=transport, **config, **transport_extra(transport))})  # fmt: skip
    talker = emailmw.Context({"email": courier.config(sender, to=address)})
    try:
        sub = emailmw.Subscription("/stream", context=ctx)
        pub = emailmw.Publisher("/stream", context=talker)
        for i, raw in enumerate(POISON.values()):
            inject(courier, address, raw)
            pub.publish(f"legit {i}")
        got = receive_bodies(sub, len(POISON), 60)
        assert sorted(got) == sorted(f"legit {i}" for i in range(len(POISON)))
    finally:
        talker.shutdown()
        ctx.shutdown()  # settles and applies the last moves
    assert count_in_maildir(courier, address, "Quarantine", b"Publisher-GID: 1") == len(POISON)
    assert count_in_maildir(courier, address, "INBOX", b"Subject:") == 0


def test_a_batch_s_delivery_record_grows_reads_back_and_moves_with_its_claim(
    courier: MailServer,
) -> None:
    check_batch_delivery_record(courier)
