"""Courier-IMAP (Debian 12's 5.0, ``MailServer(imap_server="courier")``, Debian's settings)
passes what Dovecot passes: the transport conformance suite on both transports and the
delivery-mode suite. Postfix delivers into the Maildirs; every IMAP session is Courier's."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import emailmw
from emailmw.testing import (
    DeliveryModeConformance,
    GroupWorld,
    MultiRecipientConformance,
    TransportConformance,
    TransportUnderTest,
)
from emailmw.testing.mailserver import MailServer
from tests.helpers import deadline_loop

from .helpers import transport_extra, write_config
from .test_conformance import MAIL_TRANSPORTS, _pair
from .test_delivery_modes import _world
from .test_doctor import check_line, doctor


@pytest.fixture(scope="module")
def courier(mailserver: MailServer) -> Iterator[MailServer]:
    del mailserver  # (started after the run's: Postfix and Dovecot are there)
    state = Path(f"/tmp/emailmw-courier-{uuid.uuid4().hex[:8]}")
    server = MailServer(state_dir=state, imap_server="courier", pool_size=300)
    server.start(fresh=True)
    yield server
    server.stop()
    shutil.rmtree(state, ignore_errors=True)


class TestCourierTransportConformance(TransportConformance, MultiRecipientConformance):
    @pytest.fixture(params=MAIL_TRANSPORTS)
    def transport(
        self, request: pytest.FixtureRequest, courier: MailServer
    ) -> Iterator[TransportUnderTest]:
        yield from _pair(courier, courier.fresh_account, request.param)


class TestCourierDeliveryModes(DeliveryModeConformance):
    @pytest.fixture
    def group_world(self, courier: MailServer) -> Iterator[GroupWorld]:
        yield from _world(courier, "native")


def _filed(server: MailServer, address: str, folder: str) -> int:
    """How many ``/filed`` messages the Maildir folder holds (``""``: INBOX)."""
    maildir = server.maildir(address) / folder
    return sum(1 for d in ("new", "cur") if (maildir / d).is_dir()
               for f in (maildir / d).iterdir() if b"/filed" in f.read_bytes())  # fmt: skip


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
        got: list[str] = []
        more = deadline_loop(30)
        while len(got) < 3 and more():
            found = emailmw.wait_for_message(sub, 1)
            if found is not None:
                got.append(found)
        assert sorted(got) == ["m0", "m1", "m2"]
        more = deadline_loop(30)
        while more() and _filed(courier, receiver, ".Done") < 3:
            time.sleep(0.1)
        assert _filed(courier, receiver, ".Done") == 3  # Courier's INBOX.Done
        assert _filed(courier, receiver, "") == 0
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
